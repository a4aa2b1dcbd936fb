/**
 * The form secret guard (docs/architecture.md, "Decisions and why" 7): an elicitation whose form
 * asks for a password, token, API key or similar is not forwarded to the client unless the
 * upstream's policy allows it.
 */

const SECRET_NAME = /(password|passwd|passphrase|secret|token|apikey|privatekey|credential)/;

/** Normalizes a property name: lower case, separators removed ("API_Key" → "apikey"). */
function normalize(name: string): string {
  return name.toLowerCase().replace(/[^a-z0-9]/g, '');
}

/**
 * Whether a property or argument name says its value is a secret: password, passphrase, secret,
 * token, api key, private key, credential (case and separator insensitive: "API_Key", "apiKey").
 */
export function secretName(name: string): boolean {
  return SECRET_NAME.test(normalize(name));
}

/**
 * Names of the properties of a form elicitation's `requestedSchema` that ask for a secret:
 * `format: "password"`, or a name like password, passphrase, secret, token, api key, private key,
 * credential (case and separator insensitive). Empty when the form asks for none.
 */
export function secretFields(requestedSchema: unknown): string[] {
  const props = (requestedSchema as { properties?: Record<string, unknown> } | undefined)?.properties;
  if (!props || typeof props !== 'object') return [];
  return Object.entries(props)
    .filter(([name, def]) => (def as { format?: unknown } | null)?.format === 'password' || secretName(name))
    .map(([name]) => name);
}
