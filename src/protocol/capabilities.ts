/**
 * The input kinds of MCP (elicitation, sampling, roots) as client capabilities: which kind a
 * server-initiated request is, whether a client's declared ClientCapabilities can answer it, the
 * capabilities a client keeps when an upstream's `input.allow` withholds kinds, and the downstream
 * error for an upstream's -32021 (MissingRequiredClientCapability).
 */
import { missingCapability, upstreamFailed, type GatewayError } from './errors.js';
import type { ClientCapabilities, InputRequest } from './wire.js';

/** Input kinds and the server-initiated method each comes from. */
export type InputKind = 'elicitation' | 'sampling' | 'roots';
export const INPUT_KIND_OF: Record<string, InputKind> = {
  'elicitation/create': 'elicitation',
  'sampling/createMessage': 'sampling',
  'roots/list': 'roots',
};

/**
 * Whether `caps` (a 2026 ClientCapabilities) can answer `request`; returns the missing capability
 * as a ClientCapabilities object, or undefined when it can.
 */
export function missingFor(caps: ClientCapabilities, request: InputRequest): Record<string, unknown> | undefined {
  switch (request.method) {
    case 'elicitation/create': {
      const mode = request.params.mode === 'url' ? 'url' : 'form';
      const e = caps.elicitation as { form?: unknown; url?: unknown } | undefined;
      if (!e) return { elicitation: mode === 'url' ? { url: {} } : {} };
      if (mode === 'url' && !e.url) return { elicitation: { url: {} } };
      if (mode === 'form' && e.url && !e.form) return { elicitation: { form: {} } };
      return undefined;
    }
    case 'sampling/createMessage': {
      const s = caps.sampling as { tools?: unknown } | undefined;
      if (!s) return { sampling: {} };
      if ((request.params.tools || request.params.toolChoice) && !s.tools) return { sampling: { tools: {} } };
      return undefined;
    }
    case 'roots/list':
      return caps.roots ? undefined : { roots: {} };
  }
}

/**
 * The client's capabilities without the kinds `allow` does not relay (elicitation, sampling,
 * roots); everything else (extensions, experimental) is kept.
 */
export function allowedCapabilities(caps: Record<string, unknown>, allow: readonly string[]): Record<string, unknown> {
  const out = { ...caps };
  for (const kind of ['elicitation', 'sampling', 'roots']) if (!allow.includes(kind)) delete out[kind];
  return out;
}

/**
 * The downstream error for a 2026-07-28 upstream's -32021 (MissingRequiredClientCapability), whose
 * `data.requiredCapabilities` describe the gateway's hop: -32021 (HTTP 400) with those
 * requiredCapabilities when the client did not declare them (`declaredIn` names where it would:
 * a request's clientCapabilities, a legacy session's initialize), or -32603 `protocol` when it
 * declared an input kind (elicitation, sampling, roots) that the upstream's `input.allow` withholds,
 * which the client cannot fix.
 */
export function capabilityError(upstream: string, data: unknown, declared: Record<string, unknown>, declaredIn?: string): GatewayError {
  const required = ((data as { requiredCapabilities?: Record<string, unknown> } | undefined)?.requiredCapabilities ?? {}) as Record<
    string,
    unknown
  >;
  const withheld = Object.keys(required).filter((k) => ['elicitation', 'sampling', 'roots'].includes(k) && declared[k] !== undefined);
  if (withheld.length) {
    return upstreamFailed(
      upstream,
      'protocol',
      `Upstream '${upstream}' needs ${withheld.join(', ')}, which this gateway does not relay for it (input.allow)`,
    );
  }
  return missingCapability(required, JSON.stringify(required), declaredIn);
}

/** The MCP Apps extension (ext-apps, SEP-1865): tools name a `ui://` resource in `_meta.ui.resourceUri`. */
export const UI_EXTENSION = 'io.modelcontextprotocol/ui';

/**
 * The extensions of `caps` that every cell passes on as they are, because they ride on core
 * methods and `_meta` alone: only {@link UI_EXTENSION}. A legacy peer may declare it in
 * `experimental` instead of `extensions`; either counts.
 * @returns `{ [id]: settings }`, or undefined when `caps` declares none of them.
 */
export function passedExtensions(caps: Record<string, unknown> | undefined): Record<string, unknown> | undefined {
  const declared = (field: string) => (caps?.[field] as Record<string, unknown> | undefined)?.[UI_EXTENSION];
  const ui = declared('extensions') ?? declared('experimental');
  return ui && typeof ui === 'object' ? { [UI_EXTENSION]: ui } : undefined;
}
