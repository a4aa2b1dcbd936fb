/**
 * The provider path of a legacy upstream's `sampling/createMessage` inside a call: whether the
 * gateway's provider answers it instead of the client (the upstream's or the tool's
 * `sampling.mode`, src/sampling/mode.ts), and the answer through the {@link Sampler}.
 */
import type { UpstreamConfig } from '../../config/schema.js';
import type { ClientCapabilities, InputRequest } from '../../protocol/wire.js';
import type { Logger } from '../../observability/log.js';

import { asRpcError, SamplingError } from '../../sampling/errors.js';
import { samplingModeFor, samplingRoute } from '../../sampling/mode.js';
import type { Sampler } from '../../sampling/sampler.js';
import type { ServerInitiatedRequest, ServerRequestExtra } from '../../upstream/session-calls.js';

/**
 * Whether the gateway's provider answers this `sampling/createMessage` (the upstream's or the
 * tool's `sampling.mode`: always in provider mode; in fallback mode when the client did not
 * declare what the request needs, or `input.allow` does not relay sampling).
 * @param tool the tool the call runs (`tools/call`), else undefined.
 */
export function samplingByProvider(
  cfg: UpstreamConfig,
  clientCapabilities: ClientCapabilities,
  tool: string | undefined,
  request: InputRequest,
): boolean {
  const relayed = cfg.input.allow.includes('sampling') ? (clientCapabilities.sampling as { tools?: unknown } | undefined) : undefined;
  return samplingRoute(samplingModeFor(cfg.sampling, tool), relayed, request.params) === 'provider';
}

/** The call a provider-answered sampling request belongs to. */
export interface ProviderSamplingCall {
  /** The Exchange id (logs). */
  id: string;
  upstream: string;
  cfg: UpstreamConfig;
  principal: string;
  /** The tool the call runs (`tools/call`), else undefined. */
  tool: string | undefined;
  sampler?: Pick<Sampler, 'answer'>;
  log: Logger;
  /** Called with the provider request's controller when it starts (`running`) and when it ends: the call waits on the provider meanwhile. */
  track(ctrl: AbortController, running: boolean): void;
}

/**
 * Answers the upstream's `sampling/createMessage` through the provider. While it runs the call
 * waits on the gateway, so `requestMs`/`totalMs` are paused as they are for a client's answer;
 * the provider's own `timeoutMs` bounds it. The provider call is aborted when the upstream
 * withdraws its request (or the call aborts the controller it was given). Failures reach the
 * upstream as the JSON-RPC error of its request (`SamplingError`); the call goes on and the tool
 * decides.
 */
export async function sampleByProvider(
  call: ProviderSamplingCall,
  req: ServerInitiatedRequest,
  extra: ServerRequestExtra,
): Promise<Record<string, unknown>> {
  const sampler = call.sampler;
  if (!sampler) throw asRpcError(new SamplingError('invalid-request', 'No sampling provider is available for this upstream'));
  const ctrl = new AbortController();
  const onAbort = () => ctrl.abort();
  extra.signal.addEventListener('abort', onAbort, { once: true });
  call.track(ctrl, true);
  call.log.debug({ exchange: call.id, method: req.method }, 'sampling answered by the provider');
  try {
    const { _meta, task, ...params } = (req.params ?? {}) as Record<string, unknown>;
    void _meta;
    void task;
    return await sampler.answer({
      upstream: call.upstream,
      cfg: call.cfg.sampling,
      tool: call.tool,
      principal: call.principal,
      params,
      signal: ctrl.signal,
    });
  } catch (e) {
    throw e instanceof SamplingError ? asRpcError(e) : e;
  } finally {
    extra.signal.removeEventListener('abort', onAbort);
    call.track(ctrl, false);
  }
}
