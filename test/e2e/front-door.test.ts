/**
 * The front door and the CLI around it, against real processes and sockets on 127.0.0.1.
 */
import { execFile } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { fixtureStdio } from '../helpers/fixture.js';
import { ROOT } from '../helpers/processes.js';

describe('LOG_LEVEL', () => {
  it('an unknown LOG_LEVEL → exit 2 with a one-line message naming it, no stack trace', async () => {
    const file = join(mkdtempSync(join(tmpdir(), 'mrtr-loglevel-')), 'gateway.config.json');
    writeFileSync(file, JSON.stringify({ upstreams: { f: fixtureStdio() } }));
    const r = await new Promise<{ code: number | null; stderr: string; stdout: string }>((resolve) => {
      execFile(process.execPath, ['--import', 'tsx', 'src/main.ts', '--config', file, '--port', '0'], { cwd: ROOT, env: { ...process.env, LOG_LEVEL: 'loud' }, timeout: 20_000 }, (err, stdout, stderr) =>
        resolve({ code: err ? ((err as { code?: number }).code ?? null) : 0, stdout, stderr }),
      );
    });
    expect(r.code).toBe(2);
    expect(r.stderr.trim().split('\n')).toHaveLength(1);
    expect(r.stderr).toMatch(/^mrtr-gateway: LOG_LEVEL must be one of fatal, error, warn, info, debug, trace, silent, got 'loud'$/m);
    expect(r.stderr).not.toContain('    at ');
    expect(r.stdout).toBe('');
  });
});
