/**
 * The gateway's approval of a call that becomes a task at once (docs/approvals.md, "Tasks"): a
 * `tools/call` to a legacy upstream from a client that declared the tasks extension, for a tool
 * with an effective `taskAfterMs` of 0 or `tasks.tools.NAME.required` (`approvesInTask`,
 * src/cells/bridge/serve.ts). Instead of an `input_required` round, the router hands the question
 * to the bridge in `CallContext.approval`: the bridge answers a `CreateTaskResult` whose task waits
 * in `input_required` with the approval form under `inputRequests.approval`, leasing no upstream
 * session; `tasks/update` answers it. Accept runs the call (remembered for `rememberMs` when the
 * user asked); decline and cancel complete the task with the `isError` tool result, and the
 * upstream is never called.
 */
import { approvesInTask } from '../cells/bridge/serve.js';
import type { AuditNote, CallApproval, CallContext } from '../protocol/connection.js';
import type { ValidatedRequest } from '../protocol/envelope.js';
import type { Logger } from '../observability/log.js';
import { APPROVAL_KEY, approvalAnswer, approvalRefusal, approvalRequest } from '../security/approval-form.js';
import { answersForms, formRequired, type ApprovalCall, type Approvals } from './approvals.js';
import type { Upstream } from './upstream.js';

/**
 * The approval question of `call`, for the bridge to ask in the call's task: its `decide` reads
 * the answer, notes it in `audit` (`accepted`, `declined`, `cancelled`), remembers an accept the
 * user asked to remember (a store that cannot take it is logged; the call still runs), and gives
 * the refusal's tool result for decline and cancel.
 */
export function taskApproval(approvals: Approvals, call: ApprovalCall, audit: AuditNote | undefined, log: Logger): CallApproval {
  return {
    key: APPROVAL_KEY,
    request: approvalRequest(call.upstream, call.tool, call.args, approvals.rememberMs(call.upstream)),
    async decide(answer) {
      const { action, remember } = approvalAnswer(answer);
      if (audit) audit.approval = action === 'accept' ? 'accepted' : action === 'decline' ? 'declined' : 'cancelled';
      if (action !== 'accept') return approvalRefusal(action, call.upstream, call.tool);
      if (remember)
        await approvals
          .remember(call)
          .catch((e: unknown) =>
            log.warn({ upstream: call.upstream, tool: call.tool, err: (e as Error).message }, 'approval not remembered: the store failed'),
          );
      return undefined;
    },
  };
}

/**
 * The context to route a call of `up` with when its approval is asked in its task: with
 * `approval` set (audit `asked`), or without when an approval of exactly this call is remembered
 * (audit `remembered`, asked of no one). Undefined when the call is not one whose approval goes into a task (not
 * `approvesInTask`, a 2026-07-28 upstream, or a tool that needs no approval): the router's round
 * applies, if any.
 * @throws GatewayError -32021 (HTTP 400) with `requiredCapabilities: {elicitation: {form: {}}}` when
 *   the client cannot answer a form; what the policy's listing or the store throw (the call does not run).
 */
export async function approvalInTask(
  approvals: Approvals,
  up: Upstream,
  req: ValidatedRequest,
  ctx: CallContext,
  log: Logger,
): Promise<CallContext | undefined> {
  if (!approvesInTask(up.cfg, req) || !approvals.applies(up.name)) return undefined;
  if ((up.settledEra() ?? (await up.era(ctx.credential?.headers))) !== 'legacy') return undefined;
  const call: ApprovalCall = { principal: ctx.principal, upstream: up.name, tool: String(req.params.name), args: req.params.arguments };
  const who = { principal: ctx.principal, token: ctx.token, clientCapabilities: req.clientCapabilities as Record<string, unknown> };
  if (!(await approvals.needs(up.name, call.tool, who))) return undefined;
  if (await approvals.remembered(call)) {
    if (ctx.audit) ctx.audit.approval = 'remembered';
    return ctx;
  }
  if (!answersForms(req.clientCapabilities as Record<string, unknown>)) {
    throw formRequired(call.tool, up.name);
  }
  if (ctx.audit) ctx.audit.approval = 'asked';
  return { ...ctx, approval: taskApproval(approvals, call, ctx.audit, log) };
}
