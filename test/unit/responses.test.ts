/**
 * The check of an accepted form's `content` against its `requestedSchema` (src/cells/bridge/responses.ts):
 * MCP's primitive field constraints are enforced; what lies outside MCP's form schema is left to the
 * upstream, so that no upstream schema can make the gateway slow or mix up two schemas.
 */
import { describe, expect, it } from 'vitest';
import { invalidResponse } from '../../src/cells/bridge/responses.js';
import type { InputRequest } from '../../src/protocol/wire.js';

const form = (requestedSchema: Record<string, unknown>): InputRequest => ({
  method: 'elicitation/create',
  params: { mode: 'form', message: 'm', requestedSchema },
});
const accept = (content: Record<string, unknown>) => ({ action: 'accept', content });
const object = (properties: Record<string, unknown>, required?: string[]) => ({
  type: 'object',
  properties,
  ...(required ? { required } : {}),
});

describe('an accepted form is checked against the MCP part of its requestedSchema', () => {
  it('types, required, enums (plain, titled, multi-select), lengths, bounds and the four MCP formats', () => {
    const schema = form(
      object(
        {
          name: { type: 'string', minLength: 2, maxLength: 5 },
          age: { type: 'integer', minimum: 0, maximum: 150 },
          ok: { type: 'boolean' },
          color: { type: 'string', enum: ['red', 'green'] },
          size: {
            type: 'string',
            oneOf: [
              { const: 's', title: 'Small' },
              { const: 'l', title: 'Large' },
            ],
          },
          tags: { type: 'array', items: { type: 'string', enum: ['a', 'b'] }, maxItems: 2 },
          mail: { type: 'string', format: 'email' },
          site: { type: 'string', format: 'uri' },
          day: { type: 'string', format: 'date' },
          at: { type: 'string', format: 'date-time' },
        },
        ['name'],
      ),
    );
    const good = {
      name: 'Al',
      age: 40,
      ok: true,
      color: 'red',
      size: 'l',
      tags: ['a'],
      mail: 'a@example.com',
      site: 'https://example.com/x',
      day: '2026-12-03',
      at: '2026-12-03T10:00:00Z',
    };
    expect(invalidResponse(schema, accept(good))).toBeUndefined();
    const bad: [Record<string, unknown>, string][] = [
      [{ age: 1 }, "content must have required property 'name'"],
      [{ name: 'A' }, 'name must NOT have fewer than 2 characters'],
      [{ name: 'Al', age: 1.5 }, 'age must be integer'],
      [{ name: 'Al', age: 200 }, 'age must be <= 150'],
      [{ name: 'Al', color: 'blue' }, 'color must be equal to one of the allowed values'],
      [{ name: 'Al', size: 'm' }, 'size must be equal to one of the allowed values'],
      [{ name: 'Al', tags: ['c'] }, 'tags.0 must be equal to one of the allowed values'],
      [{ name: 'Al', mail: 'not-an-address' }, 'mail must match format "email"'],
      [{ name: 'Al', day: '03/12/2026' }, 'day must match format "date"'],
    ];
    for (const [content, message] of bad)
      expect(invalidResponse(schema, accept(content)), JSON.stringify(content)).toBe(
        `content does not match the requestedSchema: ${message}`,
      );
  });

  it('decline, cancel, accept without content and URL mode are not checked against the schema', () => {
    const schema = form(object({ name: { type: 'string' } }, ['name']));
    expect(invalidResponse(schema, { action: 'decline' })).toBeUndefined();
    expect(invalidResponse(schema, { action: 'cancel' })).toBeUndefined();
    expect(invalidResponse(schema, { action: 'accept' })).toBeUndefined();
    expect(
      invalidResponse(
        { method: 'elicitation/create', params: { mode: 'url', message: 'm', url: 'https://example.com', elicitationId: 'e' } },
        accept({}),
      ),
    ).toBeUndefined();
  });

  it("a backtracking pattern (outside MCP's form schema) is not run: the answer is left to the upstream at once", () => {
    const schema = form(object({ v: { type: 'string', pattern: '^(a+)+$', maxLength: 100 } }));
    // With the pattern run, this takes seconds (and doubles per extra "a").
    expect(invalidResponse(schema, accept({ v: `${'a'.repeat(40)}!` }))).toBeUndefined();
    expect(invalidResponse(schema, accept({ v: 7 }))).toBe('content does not match the requestedSchema: v must be string');
  });

  it("titled options are checked as an enum of their consts (so a repeated const is still one option), a deep items chain is cut at MCP's one level", () => {
    const options = Array.from({ length: 1000 }, (_, i) => ({ const: `o${i}`, title: `Option ${i}` }));
    const many = form(object({ pick: { type: 'string', oneOf: options }, multi: { type: 'array', items: { anyOf: options } } }));
    expect(invalidResponse(many, accept({ pick: 'o999', multi: ['o1', 'o2'] }))).toBeUndefined();
    expect(invalidResponse(many, accept({ pick: 'nope' }))).toBe(
      'content does not match the requestedSchema: pick must be equal to one of the allowed values',
    );
    expect(invalidResponse(many, accept({ multi: ['o1', 'nope'] }))).toBe(
      'content does not match the requestedSchema: multi.1 must be equal to one of the allowed values',
    );
    const repeated = form(
      object({
        pick: {
          type: 'string',
          oneOf: [
            { const: 'a', title: 'A' },
            { const: 'a', title: 'A again' },
          ],
        },
      }),
    );
    expect(invalidResponse(repeated, accept({ pick: 'a' }))).toBeUndefined();
    let deep: Record<string, unknown> = { type: 'string' };
    for (let i = 0; i < 5000; i++) deep = { type: 'array', items: deep };
    expect(invalidResponse(form(object({ d: deep })), accept({ d: 'x' }))).toBe(
      'content does not match the requestedSchema: d must be array',
    );
  });

  it('two schemas with the same $id are each checked against their own fields', () => {
    const first = form({ $id: 'urn:form', ...object({ n: { type: 'string' } }) });
    const second = form({ $id: 'urn:form', ...object({ n: { type: 'integer' } }) });
    expect(invalidResponse(first, accept({ n: 'x' }))).toBeUndefined();
    expect(invalidResponse(second, accept({ n: 'x' }))).toBe('content does not match the requestedSchema: n must be integer');
    expect(invalidResponse(second, accept({ n: 3 }))).toBeUndefined();
  });

  it('a schema of more than 100 fields is not checked; after many distinct schemas (the validator cache turning over) checks stay right', () => {
    const wide = Object.fromEntries(Array.from({ length: 101 }, (_, i) => [`f${i}`, { type: 'string' }]));
    expect(invalidResponse(form(object(wide, ['f0'])), accept({ f0: 1 }))).toBeUndefined();
    const kept = form(object({ n: { type: 'integer' } }));
    expect(invalidResponse(kept, accept({ n: 'x' }))).toBe('content does not match the requestedSchema: n must be integer');
    for (let i = 0; i < 1200; i++)
      expect(
        invalidResponse(form(object({ [`f${i}`]: { type: 'string', default: `d${i}` } })), accept({ [`f${i}`]: 'v' })),
      ).toBeUndefined();
    expect(invalidResponse(kept, accept({ n: 'x' }))).toBe('content does not match the requestedSchema: n must be integer');
    expect(invalidResponse(kept, accept({ n: 2 }))).toBeUndefined();
  });
});
