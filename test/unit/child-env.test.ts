/**
 * What a stdio child prints is shown to callers and logs only with the values of its `env` hidden
 * (src/security/redact.ts): as given, and in the encodings common libraries print them in.
 */
import { describe, expect, it } from 'vitest';
import { secretRedactor } from '../../src/security/redact.js';

describe('secretRedactor', () => {
  const secret = "pa$$ w/ord!(é)<&>*'";
  const redact = secretRedactor({ DB_PASSWORD: secret });
  const strict = encodeURIComponent(secret).replace(/[!'()*]/g, (c) => `%${c.charCodeAt(0).toString(16).toUpperCase()}`);
  const json = JSON.stringify(secret).slice(1, -1);
  const forms: [string, string][] = [
    ['as given', secret],
    ['base64', Buffer.from(secret).toString('base64')],
    ['base64url', Buffer.from(secret).toString('base64url')],
    ['encodeURIComponent', encodeURIComponent(secret)],
    ['strict percent-encoding (Python quote(safe=""), Go QueryEscape without +)', strict],
    ['lowercase hex', strict.replace(/%[0-9A-F]{2}/g, (m) => m.toLowerCase())],
    ['Python quote (/ kept)', strict.replace(/%2F/g, '/')],
    ['form encoding (+ for a space)', strict.replace(/%20/g, '+')],
    ['JSON', json],
    ['Python json.dumps (non-ASCII escaped)', json.replace(/é/g, '\\u00e9')],
    ['Go encoding/json (<, >, & escaped)', json.replace(/</g, '\\u003c').replace(/>/g, '\\u003e').replace(/&/g, '\\u0026')],
    ['PHP json_encode (/ escaped)', json.replace(/é/g, '\\u00e9').replace(/\//g, '\\/')],
    [
      'Java URLEncoder, PHP urlencode, URLSearchParams (+ for a space, ~ encoded, * kept)',
      new URLSearchParams({ p: secret }).toString().slice(2),
    ],
    ['uppercase \\u escapes', json.replace(/é/g, '\\u00E9')],
  ];
  for (const [name, form] of forms) {
    it(`hides a value printed ${name}`, () => {
      expect(redact(`before ${form} after`)).toBe('before [redacted] after');
    });
  }

  it('leaves text without the value alone', () => {
    expect(redact('nothing secret here: pa$$ w')).toBe('nothing secret here: pa$$ w');
  });

  it('a value with a lone surrogate does not break the redactor, and its printed form (U+FFFD) is hidden', () => {
    const odd = secretRedactor({ API_KEY: 'ab\ud800cdef' });
    expect(odd('key ab\ufffdcdef end')).toBe('key [redacted] end');
  });

  it('blank values and switches of secret-named variables are not hidden (hiding them would cut ordinary words)', () => {
    const flags = secretRedactor({ AUTH_ENABLED: 'true', COOKIE_SECURE: 'false', DB_PASSWORD: '   ', PIN_PASSWORD: '4821' });
    expect(flags('started: true, cached: false,    indented; pin 4821')).toBe('started: true, cached: false,    indented; pin [redacted]');
  });
});
