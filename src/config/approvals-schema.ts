/**
 * The per-upstream `approvals` settings (docs/approvals.md): which tools of the upstream the user
 * must approve, through a form of the gateway's own, before a call reaches the upstream. A tool
 * needs approval when its name matches one of `tools` (names or globs, src/config/globs.ts), or
 * with `destructive` when its annotations say `destructiveHint: true`, or with `notReadOnly` when
 * they say `readOnlyHint: false`. An accepted approval may be remembered for `rememberMs`.
 */
import { z } from 'zod';

/** Longest a remembered approval may last, in ms (2^31 - 1, about 24.8 days, as every duration of the config). */
const MAX_REMEMBER_MS = 2_147_483_647;

export const UpstreamApprovalsSchema = z
  .object({
    tools: z
      .array(z.string().min(1, 'a tool pattern is a name or a glob, not empty'))
      .default([])
      .describe('Tools the user must approve before each call, by name or glob (* any run of characters, ? one character)'),
    destructive: z
      .boolean()
      .default(false)
      .describe(
        "Also every tool the upstream's tools/list annotates destructiveHint: true; left out it defaults to true unless readOnlyHint is true, as for a tool the list lacks",
      ),
    notReadOnly: z
      .boolean()
      .default(false)
      .describe("Also every tool the upstream's tools/list annotates readOnlyHint: false (its default, also for a tool the list lacks)"),
    rememberMs: z
      .number()
      .int()
      .nonnegative()
      .max(MAX_REMEMBER_MS, 'at most 2147483647 ms (about 24.8 days)')
      .default(0)
      .describe(
        'How long an approval the user asked to remember (the form\'s "remember" box) holds for the same principal, tool and arguments, in milliseconds, on every replica (the shared store). 0: never remembered, and the form has no such box',
      ),
  })
  .strict()
  .describe(
    "Calls the user must approve through the gateway's own form (accept / decline / cancel) before they reach the upstream; see docs/approvals.md",
  );

/** The `approvals` settings of one upstream, as parsed. */
export type UpstreamApprovalsConfig = z.output<typeof UpstreamApprovalsSchema>;
