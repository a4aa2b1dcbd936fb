/**
 * The admin page, server-rendered with Hono's `html` helper (every interpolated value is
 * escaped). It reloads itself with a meta refresh, so it needs no script and works behind the
 * same `Authorization` header as its JSON.
 */
import { html, raw } from 'hono/html';
import type { HtmlEscapedString } from 'hono/utils/html';
import type { GrantInfo } from '../credentials/types.js';
import type { DroppedEntry } from '../observability/dropped.js';
import type { CensusView, InputView, ParkedView, SessionView, TasksView, UpstreamView } from './view.js';

/** Everything the page shows. */
export interface PageData {
  /** This replica's id and the shared store's kind. */
  replica: string;
  store: 'memory' | 'redis';
  /** When the data was read (ISO 8601). */
  now: string;
  refreshSeconds: number;
  upstreams: UpstreamView[];
  parked: ParkedView[];
  tasks: TasksView;
  sessions: SessionView[];
  census: CensusView;
  /** Entries left out of list answers. */
  dropped: DroppedEntry[];
  /** Per-user grants of `oauth` upstreams (absent: no such upstream); each row has a revoke button. */
  grants?: GrantInfo[];
}

type Html = HtmlEscapedString | Promise<HtmlEscapedString>;

/** A duration for people: `0.4 s`, `12 s`, `3 min 20 s`, `2 h 5 min`. */
export function duration(ms: number): string {
  if (ms < 10_000) return `${(ms / 1000).toFixed(1)} s`;
  const s = Math.round(ms / 1000);
  if (s < 60) return `${s} s`;
  if (s < 3600) return `${Math.floor(s / 60)} min ${s % 60} s`;
  return `${Math.floor(s / 3600)} h ${Math.floor((s % 3600) / 60)} min`;
}

/** An input request's kind for people: `elicitation (form)`, `sampling (tools)`, `roots`. */
export function inputLabel(i: InputView): string {
  return i.mode ? `${i.kind} (${i.mode})` : i.kind;
}

const STYLE = `
body { font: 14px/1.4 system-ui, sans-serif; margin: 1.5em; color: #1d1d1f; }
h1 { font-size: 1.4em; margin-bottom: 0.2em; }
h2 { font-size: 1.15em; margin: 1.6em 0 0.4em; }
.meta { color: #666; }
table { border-collapse: collapse; margin: 0.3em 0; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.6em; text-align: left; vertical-align: top; }
th { background: #f2f2f4; font-weight: 600; }
td.n { text-align: right; font-variant-numeric: tabular-nums; }
pre { margin: 0.3em 0 0; font-size: 12px; white-space: pre-wrap; max-width: 60em; }
.empty { color: #666; font-style: italic; }
.bad { color: #a40000; }
`;

/** A table, or `empty` when there are no rows. Header cells carry their explanation as a tooltip. */
function table(headers: [string, string][], rows: Html[], empty: string): Html {
  if (rows.length === 0) return html`<p class="empty">${empty}</p>`;
  return html`<table>
    <thead>
      <tr>
        ${headers.map(([h, title]) => html`<th title="${title}">${h}</th>`)}
      </tr>
    </thead>
    <tbody>
      ${rows}
    </tbody>
  </table>`;
}

/** The hit rate of a list cache for people: `75 % (3 of 4)`, or `–` before any lookup. */
export function hitRate({ hits, misses }: { hits: number; misses: number }): string {
  const all = hits + misses;
  return all === 0 ? '–' : `${Math.round((100 * hits) / all)} % (${hits} of ${all})`;
}

function upstreamsSection(upstreams: UpstreamView[]): Html {
  const rows = upstreams.map(
    (u) =>
      html`<tr>
        <td>${u.name}</td>
        <td>${u.era}${u.protocol === 'auto' ? ' (auto)' : ''}</td>
        <td>${u.revision ?? '–'}</td>
        <td>${u.transport}</td>
        <td class="n">${u.sessions.idle}</td>
        <td class="n">${u.sessions.inUse}</td>
        <td class="n">${u.sessions.waiting}</td>
        <td class="n">${u.legacySessions}</td>
        <td class="n">${u.parked}</td>
        <td class="n">${u.opened}</td>
        <td class="n">${u.died}</td>
        <td class="n">${u.restarts}</td>
        <td class="n">${u.openFailures}</td>
        <td class="n">${u.consecutiveFailures}</td>
        <td class="n">${hitRate(u.listCache)}</td>
        <td>
          ${
            u.lastFailure
              ? html`<span class="bad">${u.lastFailure.at} ${u.lastFailure.kind}: ${u.lastFailure.message}</span
                  >${u.lastFailure.stderr.length ? html`<pre>${u.lastFailure.stderr.join('\n')}</pre>` : ''}`
              : '–'
          }
        </td>
      </tr>`,
  );
  return table(
    [
      ['upstream', 'name, served at POST /mcp/NAME'],
      ['era', 'legacy (2024-11-05 … 2025-11-25) or modern (2026-07-28); (auto): learned by asking server/discover'],
      ['revision', 'the negotiated (or pinned) legacy revision, or 2026-07-28'],
      ['transport', 'stdio, streamable-http or sse'],
      ['idle', 'pooled upstream sessions open and unused'],
      ['in use', 'pooled upstream sessions leased to a call, a parked call or a task'],
      ['queued', 'callers waiting for a free session (maxSessions reached)'],
      ['legacy sessions', 'legacy client sessions, each with an upstream connection of its own'],
      ['parked', 'calls waiting for their client to answer input_required'],
      ['opened', 'upstream sessions opened since start'],
      ['died', 'upstream sessions lost without the gateway closing them (a stdio child exited, an HTTP session was lost)'],
      ['restarts', 'sessions opened to replace one that died or failed to open'],
      ['failed opens', 'attempts to open a session that failed'],
      ['failing now', 'failures in a row; new sessions wait for the restart backoff'],
      ['list cache', 'share of list and server/discover requests of a 2026-07-28 upstream answered from the list cache (hits of lookups)'],
      ['last error', 'the last failure, with the stdio child\u2019s last stderr lines'],
    ],
    rows,
    'No upstreams.',
  );
}

function parkedSection(parked: ParkedView[]): Html {
  const rows = parked.map(
    (p) =>
      html`<tr>
        <td>${p.upstream}</td>
        <td>${p.name}</td>
        <td>${p.method}</td>
        <td>${p.inputs.map(inputLabel).join(', ')}</td>
        <td><code>${p.principal}</code></td>
        <td class="n">${p.round}</td>
        <td class="n">${duration(p.ageMs)}</td>
        <td class="n">${duration(p.timeLeftMs)}</td>
      </tr>`,
  );
  return table(
    [
      ['upstream', 'the upstream the call runs on'],
      ['tool', 'tool or prompt name, or resource URI'],
      ['method', 'tools/call, prompts/get or resources/read'],
      ['waiting for', 'the kinds of input the upstream asked for'],
      ['principal', 'first 16 hex digits of the SHA-256 of the caller'],
      ['round', 'input_required rounds answered so far'],
      ['age', 'time since this round parked'],
      ['time left', 'until the call expires unless the client retries (requestState.ttlMs)'],
    ],
    rows,
    'No parked calls.',
  );
}

function tasksSection(tasks: TasksView): Html {
  const counts = Object.entries(tasks.counts).map(
    ([status, n]) =>
      html`<tr>
        <td>${status}</td>
        <td class="n">${n}</td>
      </tr>`,
  );
  const running = tasks.running.map(
    (t) =>
      html`<tr>
        <td><code>${t.taskId}</code></td>
        <td>${t.upstream}</td>
        <td>${t.tool ?? '–'}</td>
        <td>${t.status}</td>
        <td>${t.statusMessage ?? ''}</td>
        <td>${t.inputs.map(inputLabel).join(', ')}</td>
        <td><code>${t.principal}</code></td>
        <td class="n">${duration(t.ageMs)}</td>
      </tr>`,
  );
  return html`<table id="task-counts">
      <thead>
        <tr>
          <th title="task status">status</th>
          <th title="tasks this replica created whose record has not expired">tasks</th>
        </tr>
      </thead>
      <tbody>
        ${counts}
      </tbody>
    </table>
    <h3>Running on this replica</h3>
    ${table(
      [
        ['task', 'taskId'],
        ['upstream', 'the upstream the call runs on'],
        ['tool', 'the tool called'],
        ['status', 'working or input_required'],
        ['status message', 'the upstream\u2019s last progress message'],
        ['waiting for', 'input requests outstanding'],
        ['principal', 'first 16 hex digits of the SHA-256 of the caller'],
        ['age', 'time since the task was created'],
      ],
      running,
      'No task running on this replica.',
    )}`;
}

function sessionsSection(sessions: SessionView[]): Html {
  const rows = sessions.map(
    (s) =>
      html`<tr>
        <td><code>${s.session}</code></td>
        <td>${s.upstream}</td>
        <td>${s.transport}</td>
        <td>${s.relay}</td>
        <td>${s.protocolVersion ?? '–'}</td>
        <td><code>${s.principal}</code></td>
        <td class="n">${s.inFlight}</td>
        <td class="n">${duration(s.idleMs)}</td>
        <td class="n">${duration(s.ageMs)}</td>
        <td class="n">${s.pid ?? '–'}</td>
      </tr>`,
  );
  return table(
    [
      ['session', 'first 16 hex digits of the SHA-256 of the Mcp-Session-Id'],
      ['upstream', 'the upstream the session is relayed to'],
      ['transport', 'streamable-http or sse (the old HTTP+SSE transport)'],
      ['relay', 'pass-through (legacy upstream) or reverse (2026-07-28 upstream)'],
      ['revision', 'the revision negotiated with the client'],
      ['principal', 'first 16 hex digits of the SHA-256 of the caller'],
      ['in flight', 'client requests waiting for their answer'],
      ['idle', 'time since the client\u2019s last message'],
      ['age', 'time since the session opened'],
      ['pid', 'the upstream child\u2019s process id (stdio)'],
    ],
    rows,
    'No legacy sessions.',
  );
}

function censusSection(census: CensusView): Html {
  const rows = census.entries.map(
    (e) =>
      html`<tr>
        <td>${e.upstream}</td>
        <td>${e.tool}</td>
        <td>${e.feature}</td>
        <td class="n">${e.calls}</td>
        <td>${e.firstSeen}</td>
        <td>${e.lastSeen}</td>
      </tr>`,
  );
  return table(
    [
      ['upstream', 'the upstream that used the feature'],
      ['tool', 'the tool called; (unknown): a legacy session with zero or several tool calls in flight; (none): outside any call'],
      ['feature', `one of: ${census.features.join(', ')}`],
      ['calls', 'calls that used it (each counts once); occurrences for (unknown) and (none)'],
      ['first seen', 'first use (ISO 8601)'],
      ['last seen', 'last use (ISO 8601)'],
    ],
    rows,
    'No deprecated feature used since start.',
  );
}

function droppedSection(dropped: DroppedEntry[]): Html {
  const rows = dropped.map(
    (d) =>
      html`<tr>
        <td>${d.upstream}</td>
        <td>${d.kind}</td>
        <td><code>${d.name}</code></td>
        <td>${d.reason}</td>
        <td>${d.detail}</td>
        <td class="n">${d.count}</td>
        <td>${d.firstSeen}</td>
        <td>${d.lastSeen}</td>
      </tr>`,
  );
  return table(
    [
      ['upstream', 'the upstream whose entry was left out'],
      ['kind', 'tool, prompt, resource or resourceTemplate'],
      ['name', 'the name, URI or URI template as the upstream gave it'],
      [
        'reason',
        'invalid-name: breaks the MCP tool-name rules; invalid-x-mcp-header: invalid x-mcp-header annotations; conflict: on /mcp, an earlier upstream (config order) serves the same name or URI',
      ],
      ['detail', 'the rule broken, or the upstream that serves it instead'],
      ['times', 'list answers it was left out of'],
      ['first seen', 'first time (ISO 8601)'],
      ['last seen', 'last time (ISO 8601)'],
    ],
    rows,
    'Nothing left out since start.',
  );
}

/** The per-user grants, each with a revoke form (POST /admin/grants/revoke, which answers 303 back to the page). */
function grantsSection(grants: GrantInfo[]): Html {
  const at = (ms: number | undefined) => (ms === undefined ? '–' : new Date(ms).toISOString());
  const rows = grants.map(
    (g) =>
      html`<tr>
        <td><code>${g.principal}</code></td>
        <td>${g.upstream}</td>
        <td>${at(g.expiresAtMs)}</td>
        <td>${g.refreshable ? 'yes' : 'no'}</td>
        <td>${at(g.createdAtMs)}</td>
        <td>${g.scope ?? '–'}</td>
        <td>
          <form method="post" action="/admin/grants/revoke">
            <input type="hidden" name="upstream" value="${g.upstream}" /><input type="hidden" name="principal" value="${g.principal}" />
            <button type="submit">Revoke</button>
          </form>
        </td>
      </tr>`,
  );
  return table(
    [
      ['principal', 'who granted the gateway access'],
      ['upstream', 'the oauth upstream the grant is for'],
      ['expires', 'when the access token expires (ISO 8601); – when the server did not say'],
      ['refreshable', 'whether a refresh token is held, so the access token is renewed without asking'],
      ['stored', 'when the grant was stored or last refreshed'],
      ['scope', 'the scope granted'],
      ['', 'removes the grant here and revokes it at the authorization server; the user is asked again on the next call'],
    ],
    rows,
    'No grants held.',
  );
}

/** The whole page. */
export function renderPage(d: PageData): Html {
  return html`<!doctype html>
    <html lang="en">
      <head>
        <meta charset="utf-8" />
        <meta http-equiv="refresh" content="${d.refreshSeconds}" />
        <title>mrtr-gateway admin</title>
        <style>
          ${raw(STYLE)}
        </style>
      </head>
      <body>
        <h1>mrtr-gateway</h1>
        <p class="meta">
          Replica <code>${d.replica}</code>, store ${d.store}. Read at ${d.now}; reloads every ${d.refreshSeconds} s. JSON:
          <a href="/admin/api/upstreams">upstreams</a>, <a href="/admin/api/parked">parked</a>, <a href="/admin/api/tasks">tasks</a>,
          <a href="/admin/api/sessions">sessions</a>, <a href="/admin/api/census">census</a>, <a href="/admin/api/dropped">dropped</a>.
        </p>
        <section id="upstreams">
          <h2>Upstreams</h2>
          ${upstreamsSection(d.upstreams)}
        </section>
        <section id="parked">
          <h2>Parked calls</h2>
          ${parkedSection(d.parked)}
        </section>
        <section id="tasks">
          <h2>Tasks</h2>
          ${tasksSection(d.tasks)}
        </section>
        <section id="sessions">
          <h2>Legacy sessions</h2>
          ${sessionsSection(d.sessions)}
        </section>
        <section id="census">
          <h2>Deprecation census</h2>
          <p class="meta">Uses of what MCP 2026-07-28 deprecated or removed, since this replica started.</p>
          ${censusSection(d.census)}
        </section>
        <section id="dropped">
          <h2>Left out of lists</h2>
          <p class="meta">
            Tools, prompts, resources and templates upstreams listed that clients were not shown, since this replica started.
          </p>
          ${droppedSection(d.dropped)}
        </section>
        ${
          d.grants
            ? html`<section id="grants">
                <h2>Per-user grants</h2>
                <p class="meta">Which principals hold a grant for which upstream (tokens are never shown).</p>
                ${grantsSection(d.grants)}
              </section>`
            : ''
        }
      </body>
    </html>`;
}
