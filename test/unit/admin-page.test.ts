import { describe, expect, it } from 'vitest';
import { duration, hitRate, renderPage, type PageData } from '../../src/admin/page.js';
import { adminAddressRefusal } from '../../src/http/routes/admin.js';

const EVIL = `<script>alert(1)</script><img src=x onerror="alert('x')">&amp;`;
const ESCAPED = '&lt;script&gt;alert(1)&lt;/script&gt;&lt;img src=x onerror=&quot;alert(&#39;x&#39;)&quot;&gt;&amp;amp;';

/** A page in which every text an upstream or a client can choose is `EVIL`. */
function hostilePage(): PageData {
  const now = '2026-08-01T10:00:00.000Z';
  return {
    replica: 'r1',
    store: 'memory',
    now,
    refreshSeconds: 5,
    upstreams: [
      {
        name: 'up',
        transport: 'stdio',
        protocol: 'auto',
        era: 'legacy',
        revision: EVIL,
        sessions: { total: 1, idle: 1, inUse: 0, waiting: 0 },
        legacySessions: 0,
        parked: 1,
        opened: 2,
        died: 1,
        restarts: 1,
        openFailures: 0,
        consecutiveFailures: 0,
        lastFailure: { at: now, kind: 'died', message: EVIL, stderr: [EVIL, EVIL] },
        listCache: { hits: 3, misses: 1, entries: 1 },
      },
    ],
    parked: [
      {
        id: EVIL,
        upstream: 'up',
        method: 'tools/call',
        name: EVIL,
        principal: '0123456789abcdef',
        round: 0,
        parkedAt: now,
        expiresAt: now,
        ageMs: 1000,
        timeLeftMs: 599_000,
        inputs: [{ key: EVIL, kind: 'elicitation', mode: 'form' }],
      },
    ],
    tasks: {
      counts: { working: 1, input_required: 0, completed: 0, failed: 0, cancelled: 0 },
      running: [
        {
          taskId: 't1',
          upstream: 'up',
          tool: EVIL,
          status: 'working',
          statusMessage: EVIL,
          principal: '0123456789abcdef',
          createdAt: now,
          ageMs: 1000,
          inputs: [],
        },
      ],
    },
    sessions: [
      {
        session: '0123456789abcdef',
        upstream: 'up',
        principal: '0123456789abcdef',
        transport: 'streamable-http',
        relay: 'pass-through',
        protocolVersion: EVIL,
        inFlight: 0,
        idleMs: 0,
        ageMs: 0,
      },
    ],
    census: {
      features: ['elicitation_form'],
      entries: [{ upstream: 'up', tool: EVIL, feature: 'elicitation_form', calls: 1, firstSeen: now, lastSeen: now }],
    },
    dropped: [{ upstream: 'up', kind: 'tool', name: EVIL, reason: 'conflict', detail: EVIL, count: 2, firstSeen: now, lastSeen: now }],
    grants: [{ upstream: 'up', principal: EVIL, refreshable: true, createdAtMs: 0, scope: EVIL }],
  };
}

describe('admin page rendering', () => {
  it('escapes every text from upstreams and clients', async () => {
    const page = String(await renderPage(hostilePage()));
    expect(page).not.toContain('<script');
    expect(page).not.toContain('<img');
    expect(page).not.toContain('onerror="');
    // The parked call's tool; the task's tool and status message; the census's tool; the upstream's
    // and the session's revision; the failure's message and its two stderr lines; the name and the
    // detail of an entry left out of a list; a grant's principal (shown and in its revoke form) and scope.
    expect(page.split(ESCAPED).length - 1).toBe(14);
  });

  it('shows durations for people', () => {
    expect(duration(400)).toBe('0.4 s');
    expect(duration(12_000)).toBe('12 s');
    expect(duration(200_000)).toBe('3 min 20 s');
    expect(duration(7_500_000)).toBe('2 h 5 min');
  });

  it('shows the list cache hit rate, or – before any lookup', async () => {
    expect(hitRate({ hits: 3, misses: 1 })).toBe('75 % (3 of 4)');
    expect(hitRate({ hits: 0, misses: 0 })).toBe('–');
    expect(String(await renderPage(hostilePage()))).toContain('<td class="n">75 % (3 of 4)</td>');
  });
});

describe('adminAddressRefusal (the admin address rule)', () => {
  const REFUSED = 'Forbidden: without authentication the admin page is served to loopback clients only';
  it('auth "none": loopback peers (IPv4, IPv4-mapped IPv6, ::1) pass; every other or unknown peer is refused', () => {
    for (const a of ['127.0.0.1', '127.255.0.9', '::ffff:127.0.0.1', '::FFFF:127.0.0.2', '::1'])
      expect(adminAddressRefusal('none', a), a).toBeUndefined();
    for (const a of [
      '203.0.113.9',
      '10.0.0.1',
      '192.168.1.2',
      '::ffff:198.51.100.7',
      '2001:db8::1',
      '0.0.0.0',
      '::',
      'localhost',
      '',
      undefined,
    ]) {
      expect(adminAddressRefusal('none', a), String(a)).toBe(REFUSED);
    }
  });
  it('with authentication there is no address rule', () => {
    for (const mode of ['apiKeys', 'jwt']) expect(adminAddressRefusal(mode, '203.0.113.9')).toBeUndefined();
  });
});
