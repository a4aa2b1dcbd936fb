/**
 * A legacy MCP client (the v1 SDK over Streamable HTTP) that answers url-mode elicitations, for
 * the tests of consent asked of legacy sessions (docs/security.md, "Upstream credentials").
 */
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { ElicitationCompleteNotificationSchema, ElicitRequestSchema } from '@modelcontextprotocol/sdk/types.js';

/**
 * A connected v1 SDK client of `url`, sending `headers` on every request, declaring elicitation
 * `form` and, with `urlMode`, `url`; `onElicit` answers each `elicitation/create` (its params).
 * `completed` collects the `elicitationId` of each `notifications/elicitation/complete`.
 */
export async function elicitingClient(
  url: string,
  headers: Record<string, string>,
  urlMode: boolean,
  onElicit: (params: any) => Promise<Record<string, unknown>>,
): Promise<{ client: Client; completed: string[] }> {
  const completed: string[] = [];
  const client = new Client(
    { name: 'eliciting-client', version: '1.0.0' },
    { capabilities: { elicitation: urlMode ? { form: {}, url: {} } : { form: {} } } },
  );
  client.setRequestHandler(ElicitRequestSchema, async (r) => (await onElicit(r.params)) as never);
  client.setNotificationHandler(ElicitationCompleteNotificationSchema, (n) => void completed.push(n.params.elicitationId));
  await client.connect(new StreamableHTTPClientTransport(new URL(url), { requestInit: { headers } }));
  return { client, completed };
}
