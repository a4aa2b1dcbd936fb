/** Tests that need installed programs: run with them, skip without, fail without in CI. */
import { describe, expect, it } from 'vitest';
import { inCi, verdict } from '../helpers/installed.js';

describe('tests that need installed programs', () => {
  const none = () => false;
  const all = () => true;

  it('run when every program is installed, in CI or not', () => {
    expect(verdict(['redis-server', 'haproxy'], {}, all)).toEqual({ run: true });
    expect(verdict(['chromium'], { CI: 'true' }, all)).toEqual({ run: true });
  });

  it('are skipped without a program outside CI, and fail in CI', () => {
    const onlyRedis = (p: string) => p === '/usr/bin/redis-server';
    expect(verdict(['redis-server', 'haproxy'], {}, onlyRedis)).toEqual({ run: false, fail: false, missing: ['haproxy'] });
    expect(verdict(['redis-server', 'haproxy'], { CI: 'true' }, onlyRedis)).toEqual({ run: false, fail: true, missing: ['haproxy'] });
    expect(verdict(['chromium'], { CI: '1' }, none)).toEqual({ run: false, fail: true, missing: ['chromium'] });
  });

  it('CI counts as set unless empty, 0 or false', () => {
    expect([undefined, '', '0', 'false', 'FALSE'].map((v) => inCi(v === undefined ? {} : { CI: v }))).toEqual([
      false,
      false,
      false,
      false,
      false,
    ]);
    expect(['true', '1', 'yes', 'github'].map((v) => inCi({ CI: v }))).toEqual([true, true, true, true]);
  });
});
