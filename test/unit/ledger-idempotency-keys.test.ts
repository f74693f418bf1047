// Proves the writer's store of used idempotency keys: every key answers its own fingerprint and versions (all 53 bits of them) after many growths, an unused key answers nothing, colliding quick hashes never mix keys up, and a key stored again answers the later entry as a Map did.
import { describe, expect, it } from "vitest"
import { fingerprintDigest, IdempotencyKeys, sameFingerprint } from "../../src/ledger/idempotency-keys.ts"

const entryOf = (index: number) => ({
  fingerprint: `fingerprint-${index % 7}`,
  first_version: index * 3 + 1,
  stream_version: index % 5 === 0 ? Number.MAX_SAFE_INTEGER - index : index * 3 + 2,
})

describe("IdempotencyKeys", () => {
  for (const [name, quick_hash] of [
    ["with the quick hash", undefined],
    ["with every quick hash equal", () => 3],
  ] as const) {
    it(`answers every key with its own entry and unused keys with nothing, ${name}`, () => {
      const keys = new IdempotencyKeys(quick_hash)
      const count = quick_hash === undefined ? 20_000 : 300
      for (let index = 0; index < count; index += 1) keys.set(`key-${index}`, entryOf(index))
      expect(keys.size).toBe(count)
      for (let index = 0; index < count; index += 1) {
        const expected = entryOf(index)
        const found = keys.get(`key-${index}`)
        expect(found).toEqual({
          fingerprint: fingerprintDigest(expected.fingerprint),
          first_version: expected.first_version,
          stream_version: expected.stream_version,
        })
        expect(sameFingerprint(found as never, expected.fingerprint)).toBe(true)
        expect(sameFingerprint(found as never, `${expected.fingerprint}x`)).toBe(false)
      }
      expect(keys.get("key-never")).toBeUndefined()
      expect(keys.get("")).toBeUndefined()
    })
  }

  it("tells a lone surrogate from U+FFFD in keys and fingerprints", () => {
    const keys = new IdempotencyKeys(() => 1)
    keys.set("k\uD800", { fingerprint: "f\uD800", first_version: 1, stream_version: 1 })
    expect(keys.get("k\uFFFD")).toBeUndefined()
    const found = keys.get("k\uD800")
    expect(found).toBeDefined()
    expect(sameFingerprint(found as never, "f\uFFFD")).toBe(false)
    expect(sameFingerprint(found as never, "f\uD800")).toBe(true)
  })

  it("a key stored again answers the later entry", () => {
    const keys = new IdempotencyKeys()
    keys.set("k", { fingerprint: "a", first_version: 1, stream_version: 2 })
    keys.set("k", { fingerprint: "b", first_version: 5, stream_version: 4 })
    expect(keys.size).toBe(1)
    expect(keys.get("k")).toEqual({
      fingerprint: fingerprintDigest("b"),
      first_version: 5,
      stream_version: 4,
    })
  })

  it("refuses versions it cannot hold exactly", () => {
    const keys = new IdempotencyKeys()
    for (const version of [-1, 1.5, Number.MAX_SAFE_INTEGER + 1, Number.NaN])
      expect(() => keys.set("k", { fingerprint: "a", first_version: version, stream_version: 1 })).toThrow(
        /stream version/,
      )
    expect(keys.size).toBe(0)
    expect(keys.get("k")).toBeUndefined()
  })
})
