/**
 * What the front door (src/http) asks of the router, and nothing more: the configured upstreams,
 * serving one validated MCP 2026-07-28 request or `subscriptions/listen` for an upstream, and the
 * live replicas of the internal hop. Readiness and the drain flag come from src/wiring.ts in `AppDeps`. The router's
 * `Router` (src/router/router.ts) fits it; the front door never sees the rest of it. What is plain
 * data or a lower-layer object (the config, the logger, the metrics, the census …) reaches the front
 * door in its deps object (`AppDeps`, src/http/app.ts), not through this interface.
 */
import type { ValidatedRequest } from '../protocol/envelope.js';
import type { CallContext } from '../protocol/connection.js';
import type { Upstream, UpstreamEra } from '../router/upstream.js';
import type { RelayCaller, RelayHooks } from '../router/relays.js';
import type { LegacyRelay } from '../upstream/legacy-relay.js';
import type { ListenHandle } from '../router/subscriptions.js';
import type { ReplicaInfo } from '../store/shared.js';

/** The router as the front door uses it. */
export interface McpRouter {
  /** The configured upstreams by name, in configuration order. */
  readonly upstreams: ReadonlyMap<string, Upstream>;
  /**
   * Serves one validated 2026-07-28 request for upstream `name`.
   * @returns the JSON-RPC `result` (always with `resultType`).
   * @throws GatewayError (-32601 unknown upstream or capability, -32602, -32021, -32603 upstream
   *   failure or "gateway shutting down"); HeldElsewhere when another replica holds the call;
   *   StoreUnavailable when the shared store cannot be reached.
   */
  handle(
    name: string,
    req: ValidatedRequest,
    ctx: CallContext & { paramHeaders?: Record<string, string> },
  ): Promise<Record<string, unknown>>;
  /**
   * Opens a `subscriptions/listen` subscription (MCP 2026-07-28 §Subscriptions) for upstream `name`.
   * @throws GatewayError -32601 (404) unknown upstream; -32021 (400); -32603 no upstream session, or shutting down.
   */
  listen(name: string, req: ValidatedRequest, who: { principal: string; token?: string }): Promise<ListenHandle>;
  /**
   * The live replica `id` (its URL), or undefined when its heartbeat stopped.
   * @throws StoreUnavailable when the registry cannot be read.
   */
  replicaInfo(id: string): Promise<ReplicaInfo | undefined>;
  /**
   * The relay of a legacy client session to upstream `name`, from the cell of the pair of eras:
   * the legacy pass-through (legacy upstream) or the reverse bridge (2026-07-28 upstream).
   */
  openRelay(name: string, upstreamEra: UpstreamEra, who: RelayCaller, hooks: RelayHooks): LegacyRelay;
  /**
   * The era of upstream `name` for a legacy session of `who`: learned once, its probe carrying the
   * caller's credential when the upstream wants each user's own (none yet: the probe goes without).
   * @throws GatewayError -32603 `unreachable` when the upstream cannot be asked.
   */
  relayEra(name: string, who: RelayCaller): Promise<UpstreamEra>;
}
