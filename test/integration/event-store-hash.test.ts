// Pins the event hash chain that every event-store adapter writes and the auditor verifies: the
// canonical JSON rules (including the ugly inputs it must refuse) and known-answer hashes, checked
// once against `sha256sum` of the same bytes. A change here invalidates every recorded chain.
import fc from "fast-check"
import { describe, expect, it } from "vitest"
import {
  CanonicalJsonError,
  canonicalEventBytes,
  canonicalJson,
  canonicalJsonExact,
  eventHash,
  eventHashCanonical,
  eventHashesCanonical,
  GENESIS_HASH,
  type HashedEventFields,
} from "../../adapters/eventstore/hash.ts"

describe("canonicalJson", () => {
  it.each([
    {
      name: "sorts keys, recursively",
      value: { b: 1, a: { d: [], c: {} } },
      json: '{"a":{"c":{},"d":[]},"b":1}',
    },
    {
      name: "sorts keys by UTF-16 code units",
      value: { é: 1, z: 2, Z: 3, "10": 4, "9": 5 },
      json: '{"10":4,"9":5,"Z":3,"z":2,"é":1}',
    },
    {
      name: "escapes strings as JSON.stringify does",
      value: ['"\\\n\t\u0001', "😀é"],
      json: '["\\"\\\\\\n\\t\\u0001","😀é"]',
    },
    {
      name: "writes numbers as JSON.stringify does",
      value: [0, -0, 1.5, 1e21, -1e-7, 2 ** 53],
      json: "[0,0,1.5,1e+21,-1e-7,9007199254740992]",
    },
    {
      name: "keeps null and booleans",
      value: { n: null, t: true, f: false },
      json: '{"f":false,"n":null,"t":true}',
    },
    { name: "omits keys whose value is undefined", value: { a: undefined, b: 1 }, json: '{"b":1}' },
    {
      name: "accepts objects without a prototype",
      value: Object.assign(Object.create(null) as object, { a: 1 }),
      json: '{"a":1}',
    },
  ])("$name", ({ value, json }) => {
    expect(canonicalJson(value)).toBe(json)
    expect(JSON.parse(json)).toEqual(JSON.parse(JSON.stringify(value)))
  })

  const deep = (depth: number): unknown => (depth === 0 ? 1 : [deep(depth - 1)])
  const cyclic: Record<string, unknown> = {}
  cyclic.self = cyclic
  it.each([
    { name: "NaN", value: { a: Number.NaN } },
    { name: "Infinity", value: [Number.POSITIVE_INFINITY] },
    { name: "bigint", value: { amount: 10n } },
    { name: "undefined in an array", value: [1, undefined] },
    { name: "a hole in an array", value: new Array<number>(2) },
    { name: "a Date", value: { at: new Date(0) } },
    { name: "a Map", value: new Map([["a", 1]]) },
    { name: "a function", value: { f: () => 1 } },
    { name: "a symbol", value: Symbol("s") },
    { name: "undefined at the top", value: undefined },
    { name: "nesting deeper than 64", value: deep(65) },
    { name: "a cycle", value: cyclic },
  ])("refuses $name", ({ value }) => {
    expect(() => canonicalJson(value)).toThrow(CanonicalJsonError)
  })

  // Written out by hand: an object cannot hold integer-like keys in sorted order for stringify.
  const reference = (value: unknown): string =>
    Array.isArray(value)
      ? `[${value.map(reference).join(",")}]`
      : value !== null && typeof value === "object"
        ? `{${Object.keys(value)
            .filter((key) => (value as Record<string, unknown>)[key] !== undefined)
            .sort()
            .map((key) => `${JSON.stringify(key)}:${reference((value as Record<string, unknown>)[key])}`)
            .join(",")}}`
        : JSON.stringify(value)

  it("is JSON.stringify with every object's keys sorted, for any JSON value", () => {
    fc.assert(
      fc.property(fc.jsonValue({ maxDepth: 6 }), (value) => {
        expect(canonicalJson(value)).toBe(reference(value))
        expect(JSON.parse(canonicalJson(value))).toEqual(JSON.parse(JSON.stringify(value)))
      }),
      { numRuns: 500 },
    )
  })

  it("gives the same text for objects built with their keys in sorted order (the native path)", () => {
    // Every object rebuilt with its keys inserted in sorted order, as the ledger builds its events;
    // some leaves are -0 or undefined, which the native path must leave to the sorting walk.
    const leaf = fc.oneof(fc.jsonValue({ maxDepth: 0 }), fc.constant(-0), fc.constant(undefined))
    const tree = fc.letrec((tie) => ({
      node: fc.oneof(
        { depthSize: "small" },
        leaf,
        fc.array(tie("node").filter((item) => item !== undefined)),
        fc.dictionary(fc.string(), tie("node")),
      ),
    })).node
    const sortedCopy = (value: unknown): unknown =>
      Array.isArray(value)
        ? value.map(sortedCopy)
        : value !== null && typeof value === "object"
          ? Object.fromEntries(
              Object.keys(value)
                .sort()
                .map((key) => [key, sortedCopy((value as Record<string, unknown>)[key])]),
            )
          : value
    fc.assert(
      fc.property(
        tree.filter((value) => value !== undefined),
        (value) => {
          const sorted = sortedCopy(value)
          const { json, exact } = canonicalJsonExact(sorted)
          expect(json).toBe(reference(value))
          expect(json).toBe(canonicalJson(value))
          if (exact) expect(JSON.parse(json)).toEqual(sorted)
        },
      ),
      { numRuns: 500 },
    )
    expect(canonicalJsonExact({ a: 1, b: -0 })).toEqual({ json: '{"a":1,"b":0}', exact: false })
    expect(canonicalJsonExact({ a: undefined, b: 1 })).toEqual({ json: '{"b":1}', exact: false })
    expect(canonicalJsonExact({ a: 1, b: [2, { c: 3, d: 4 }] })).toEqual({
      json: '{"a":1,"b":[2,{"c":3,"d":4}]}',
      exact: true,
    })
  })

  it("says whether its text gives the value back exactly (no undefined key, no -0)", () => {
    // Same keys (an undefined value counts), same primitives by Object.is; prototypes aside.
    const same = (a: unknown, b: unknown): boolean => {
      if (typeof a !== "object" || a === null || typeof b !== "object" || b === null) return Object.is(a, b)
      if (Array.isArray(a) !== Array.isArray(b)) return false
      const keys = Object.keys(a)
      return (
        keys.length === Object.keys(b).length &&
        keys.every(
          (key) =>
            Object.hasOwn(b, key) &&
            same((a as Record<string, unknown>)[key], (b as Record<string, unknown>)[key]),
        )
      )
    }
    const values = fc.oneof(
      fc.jsonValue({ maxDepth: 4 }),
      fc.dictionary(
        fc.string(),
        fc.oneof(fc.constant(undefined), fc.constant(-0), fc.integer(), fc.string()),
      ),
    )
    fc.assert(
      fc.property(values, (value) => {
        const { json, exact } = canonicalJsonExact(value)
        expect(json).toBe(canonicalJson(value))
        expect(exact).toBe(same(JSON.parse(json), value))
      }),
      { numRuns: 500 },
    )
  })

  it("accepts nesting of exactly 64", () => {
    expect(canonicalJson(deep(64))).toBe(`${"[".repeat(64)}1${"]".repeat(64)}`)
  })
})

describe("eventHash", () => {
  const event: HashedEventFields = {
    stream_id: "ledger-t1-sandbox",
    stream_version: 1,
    event_id: "01938e5e-7b1a-7c3e-9f00-000000000001",
    event_type: "AccountOpened",
    schema_version: 1,
    data: { b: [1, "x"], a: null, é: 1.5 },
    metadata: { tenant: "t1", actor: "a" },
    recorded_at: "2025-01-02T03:04:05.678Z",
  }

  it("hashes the canonical JSON of exactly the recorded fields", () => {
    const withExtras = { ...event, global_position: 7n, hash: "ignored", prev_hash: GENESIS_HASH }
    expect(new TextDecoder().decode(canonicalEventBytes(withExtras))).toBe(
      '{"data":{"a":null,"b":[1,"x"],"é":1.5},"event_id":"01938e5e-7b1a-7c3e-9f00-000000000001",' +
        '"event_type":"AccountOpened","metadata":{"actor":"a","tenant":"t1"},' +
        '"recorded_at":"2025-01-02T03:04:05.678Z","schema_version":1,"stream_id":"ledger-t1-sandbox","stream_version":1}',
    )
  })

  it("matches known answers, chained from the genesis hash", () => {
    const first = eventHash(GENESIS_HASH, event)
    expect(first).toBe("a799cf2319adcfc027b5704c0b2493e5c683a2b663f23c49010cc3071f01394e")
    expect(eventHash(first, { ...event, stream_version: 2 })).toBe(
      "56be617d448a3ce2354f9328131725dcba88fc7e3349f0b1865e7aac8860b710",
    )
  })

  it.each([
    { name: "the previous hash", change: (e: HashedEventFields) => ({ prev: "1".repeat(64), event: e }) },
    {
      name: "a data value",
      change: (e: HashedEventFields) => ({ prev: GENESIS_HASH, event: { ...e, data: { ...e.data, a: 0 } } }),
    },
    {
      name: "a metadata value",
      change: (e: HashedEventFields) => ({
        prev: GENESIS_HASH,
        event: { ...e, metadata: { tenant: "t2", actor: "a" } },
      }),
    },
    {
      name: "recorded_at",
      change: (e: HashedEventFields) => ({
        prev: GENESIS_HASH,
        event: { ...e, recorded_at: "2025-01-02T03:04:05.679Z" },
      }),
    },
    {
      name: "the stream",
      change: (e: HashedEventFields) => ({
        prev: GENESIS_HASH,
        event: { ...e, stream_id: "ledger-t2-sandbox" },
      }),
    },
  ])("changes when $name changes", ({ change }) => {
    const { prev, event: changed } = change(event)
    expect(eventHash(prev, changed)).not.toBe(eventHash(GENESIS_HASH, event))
  })

  it.each(["", "00", "A".repeat(64), "g".repeat(64)])("refuses the previous hash %j", (prev) => {
    expect(() => eventHash(prev, event)).toThrow(TypeError)
  })
})

describe("eventHashCanonical", () => {
  it("equals eventHash for any JSON data and metadata (the append path uses its run form)", () => {
    fc.assert(
      fc.property(
        fc.dictionary(fc.string(), fc.jsonValue()),
        fc.dictionary(fc.string(), fc.jsonValue()),
        fc.string(),
        fc.integer({ min: 1, max: 2 ** 40 }),
        (data, metadata, stream_id, stream_version) => {
          const plain = JSON.parse(JSON.stringify({ data, metadata })) as {
            data: Record<string, unknown>
            metadata: Record<string, unknown>
          }
          const fields = {
            stream_id,
            stream_version,
            event_id: "0190a5a4-0000-7000-8000-000000000000",
            event_type: "Something",
            schema_version: 1,
            recorded_at: "2026-11-22T01:02:03.456Z",
          }
          expect(
            eventHashCanonical(
              GENESIS_HASH,
              fields,
              canonicalJson(plain.data),
              canonicalJson(plain.metadata),
            ),
          ).toBe(eventHash(GENESIS_HASH, { ...fields, data: plain.data, metadata: plain.metadata }))
        },
      ),
    )
  })
})

describe("eventHashesCanonical", () => {
  const fieldsAt = (stream_version: number) => ({
    stream_id: "ledger-1",
    stream_version,
    event_id: `0190a5a4-0000-7000-8000-${String(stream_version).padStart(12, "0")}`,
    event_type: "Something",
    schema_version: 1,
    recorded_at: "2026-11-22T01:02:03.456Z",
  })

  it("chains a run as eventHashCanonical does, one event on the next", () => {
    fc.assert(
      fc.property(
        fc.array(fc.dictionary(fc.string(), fc.jsonValue()), { maxLength: 6 }),
        fc.constantFrom(GENESIS_HASH, "ab".repeat(32)),
        (datas, head) => {
          const run = datas.map((data, index) => ({
            fields: fieldsAt(index + 1),
            data_json: canonicalJson(JSON.parse(JSON.stringify(data))),
            metadata_json: "{}",
          }))
          let previous = head
          const one_by_one = run.map((event) => {
            previous = eventHashCanonical(previous, event.fields, event.data_json, event.metadata_json)
            return previous
          })
          expect(eventHashesCanonical(head, run)).toEqual(one_by_one)
        },
      ),
    )
  })

  it.each(["", "00", "A".repeat(64), "g".repeat(64)])("refuses the previous hash %j", (prev) => {
    expect(() => eventHashesCanonical(prev, [])).toThrow(TypeError)
  })
})
