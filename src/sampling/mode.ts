/**
 * Which side answers a legacy upstream's `sampling/createMessage`, and what the upstream session
 * must declare so the upstream asks at all. Pure functions over the upstream's `sampling` config.
 */
import type { SamplingMode, UpstreamSamplingConfig } from '../config/schema.js';

/** The `sampling` client capability of a legacy `initialize` (2025-11-25 fields). */
export interface SamplingCapability {
  tools?: Record<string, never>;
  context?: Record<string, never>;
}

/**
 * The mode for one call: the tool's `sampling.tools.NAME.mode` for a `tools/call` of NAME, else
 * the upstream's `sampling.mode`.
 * @param tool the tool name, for `tools/call`; undefined for other methods or when unknown.
 */
export function samplingModeFor(cfg: UpstreamSamplingConfig, tool: string | undefined): SamplingMode {
  return (tool !== undefined ? cfg.tools[tool]?.mode : undefined) ?? cfg.mode;
}

/** True when the upstream or one of its tools may have the provider answer (modes provider or fallback). */
export function usesProvider(cfg: UpstreamSamplingConfig): boolean {
  return cfg.mode !== 'client' || Object.values(cfg.tools).some((t) => t.mode !== 'client');
}

/**
 * Whether a client that declared `declared` (its `sampling` capability; undefined: none) can answer
 * `params`: sampling declared, and `sampling.tools` when the request carries `tools` or
 * `toolChoice` (MCP 2025-11-25 client/sampling §Tools).
 */
export function clientCanAnswer(declared: { tools?: unknown } | undefined, params: { tools?: unknown; toolChoice?: unknown }): boolean {
  if (!declared) return false;
  return !((params.tools !== undefined || params.toolChoice !== undefined) && !declared.tools);
}

/**
 * Who answers one `sampling/createMessage`: `provider` in provider mode, and in fallback mode when
 * the client cannot ({@link clientCanAnswer}, or the upstream's `input.allow` does not relay
 * sampling); otherwise `client`.
 * @param clientSampling the client's declared `sampling` capability, undefined when not declared or not relayed.
 */
export function samplingRoute(
  mode: SamplingMode,
  clientSampling: { tools?: unknown } | undefined,
  params: { tools?: unknown; toolChoice?: unknown },
): 'client' | 'provider' {
  if (mode === 'provider') return 'provider';
  if (mode === 'fallback' && !clientCanAnswer(clientSampling, params)) return 'provider';
  return 'client';
}

/**
 * The `sampling` capability to declare upstream. `mirrored` is what the gateway declares for the
 * client today (undefined: nothing). When the upstream or any of its tools uses the provider,
 * sampling is declared with `tools` (both provider kinds take tool definitions), even for a client
 * that declared none, so the server asks; `context` stays only when the client declared it and some
 * mode still lets the client answer (the provider path refuses `includeContext` other than `none`).
 */
export function upstreamSamplingCapability(
  mirrored: SamplingCapability | undefined,
  cfg: UpstreamSamplingConfig,
): SamplingCapability | undefined {
  if (!usesProvider(cfg)) return mirrored;
  const clientMayAnswer = [cfg.mode, ...Object.values(cfg.tools).map((t) => t.mode)].some((m) => m !== 'provider');
  return { tools: {}, ...(mirrored?.context && clientMayAnswer ? { context: {} } : {}) };
}
