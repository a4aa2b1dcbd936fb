/** The per-request context of the federation layer (`Federation.handle`). */
import type { CallContext } from '../protocol/connection.js';

/**
 * The front door's check of a request routed to the single member `upstream` (its rate limits),
 * with the params the member gets (its own tool or prompt name). Not called for the requests the
 * federation merges (`server/discover`, the list methods) or makes itself.
 * @returns resolves when the request may go on; rejects with the GatewayError to answer instead
 *   (the member is not called).
 */
export type MemberGate = (upstream: string, method: string, params: Record<string, unknown>) => Promise<void>;

/** Per-request context, as the router takes it, and the gate of the members a request is routed to. */
export type FederationContext = CallContext & { paramHeaders?: Record<string, string>; memberGate?: MemberGate };
