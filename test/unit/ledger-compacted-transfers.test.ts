// Proves the compacted transfers' store: entries survive growth and copies bit for bit, each is found by its id among the entries a state sees and never beyond them (the quick hash only places it: with every quick hash equal, the digests still decide), and amounts keep all 128 bits.
import { describe, expect, it } from "vitest"
import {
  type CompactedEntry,
  type CompactedKind,
  CompactedTransfers,
  compactedKinds,
  postRetryDigest,
  transferRetryDigest,
  voidRetryDigest,
} from "../../domain/ledger/compacted-transfers.ts"
import { quickHash } from "../../domain/ledger/digest-table.ts"
import { U128_MAX } from "../../domain/money/index.ts"

const entry = (index: number): CompactedEntry => ({
  transfer_id: `transfer-${index}`,
  record_kind: compactedKinds[index % compactedKinds.length] as CompactedKind,
  amount: index % 3 === 0 ? U128_MAX - BigInt(index) : BigInt(index) * 1_000_003n,
  retry_digest: voidRetryDigest(`pending-${index}`),
})

function filled(count: number, quick_hash = quickHash): CompactedTransfers {
  const store = CompactedTransfers.create(quick_hash)
  for (let index = 0; index < count; index += 1) expect(store.append(entry(index))).toBe(index)
  return store
}

describe("CompactedTransfers", () => {
  it("finds every entry after growing many times, with its kind, amount and retry digest", () => {
    const count = 20_000
    const store = filled(count)
    expect(store.count).toBe(count)
    for (let index = 0; index < count; index += 1) {
      const expected = entry(index)
      const found = store.find(expected.transfer_id, count)
      expect(found).toBe(index)
      expect(store.at(found)).toEqual({
        kind: "compacted",
        record_kind: expected.record_kind,
        amount: expected.amount,
        retry_digest: expected.retry_digest,
      })
    }
    expect(store.find("transfer-never", count)).toBe(-1)
  })

  it("a state sees only the entries it counts, and a copy holds only those", () => {
    const store = filled(1_000)
    expect(store.find(entry(600).transfer_id, 600)).toBe(-1)
    expect(store.find(entry(599).transfer_id, 600)).toBe(599)
    const copy = store.copyOf(600)
    expect(copy.count).toBe(600)
    expect(copy.find(entry(600).transfer_id, copy.count)).toBe(-1)
    expect(copy.at(599)).toEqual(store.at(599))
    // The copy grows on its own; the original is untouched.
    expect(copy.append(entry(5_000))).toBe(600)
    expect(store.find(entry(5_000).transfer_id, store.count)).toBe(-1)
    expect(store.at(600)).toEqual(filled(601).at(600))
  })

  it("tells ids apart by their digests when every quick hash collides, on copies too", () => {
    const count = 300
    const store = filled(count, () => 7)
    for (let index = 0; index < count; index += 1) {
      expect(store.find(entry(index).transfer_id, count)).toBe(index)
      expect(store.find(entry(index).transfer_id, index)).toBe(-1)
    }
    expect(store.find("transfer-never", count)).toBe(-1)
    // A lone surrogate and U+FFFD stay two ids (the digest hashes the id as JSON).
    const surrogates = CompactedTransfers.create(() => 1)
    surrogates.append({ ...entry(0), transfer_id: "t\uD800" })
    expect(surrogates.find("t\uFFFD", 1)).toBe(-1)
    expect(surrogates.find("t\uD800", 1)).toBe(0)
    const copy = store.copyOf(100)
    expect(copy.find(entry(99).transfer_id, copy.count)).toBe(99)
    expect(copy.find(entry(100).transfer_id, copy.count)).toBe(-1)
    expect(copy.append(entry(100))).toBe(100)
    expect(copy.find(entry(100).transfer_id, copy.count)).toBe(100)
  })

  it("quick hashes are uint32, differ for ids that differ in one code unit, and are the same for the same id", () => {
    const ids = ["", "a", "b", "ab", "ba", "t\uD800", "t\uFFFD", "txn_01a21ee961d57f618b6f2dda057cc5ca"]
    const hashes = ids.map(quickHash)
    for (const hash of hashes) expect(hash >>> 0).toBe(hash)
    expect(new Set(hashes).size).toBe(ids.length)
    expect(quickHash("txn_01a21ee961d57f618b6f2dda057cc5ca")).toBe(hashes[7])
  })

  it("keeps 0 and the largest u128 amount exactly", () => {
    const store = CompactedTransfers.create()
    store.append({ ...entry(1), amount: 0n })
    store.append({ ...entry(2), amount: U128_MAX })
    expect(store.at(0).amount).toBe(0n)
    expect(store.at(1).amount).toBe(U128_MAX)
    expect(() => store.append({ ...entry(3), amount: U128_MAX + 1n })).toThrow()
  })

  it("the shared empty store is never appended to", () => {
    expect(CompactedTransfers.none.appendable).toBe(false)
    expect(() => CompactedTransfers.none.append(entry(1))).toThrow()
  })

  it("retry digests tell every field apart, and null from the text 'null'", () => {
    const base = {
      pending_timeout_ms: null,
      debit_account_id: "a",
      credit_account_id: "b",
      amount: 5n,
      code: 1,
      user_data: null,
      linked_group_id: null,
    }
    const variants = [
      base,
      { ...base, pending_timeout_ms: 0 },
      { ...base, pending_timeout_ms: 1 },
      { ...base, debit_account_id: "b", credit_account_id: "a" },
      { ...base, amount: 6n },
      { ...base, code: 2 },
      { ...base, user_data: "null" },
      { ...base, user_data: "" },
      { ...base, linked_group_id: "null" },
    ]
    const digests = variants.map((fields) => transferRetryDigest(fields).join(","))
    digests.push(postRetryDigest("p", 5n).join(","), voidRetryDigest("p").join(","))
    expect(new Set(digests).size).toBe(digests.length)
    expect(transferRetryDigest({ ...base })).toEqual(transferRetryDigest(base))
  })
})
