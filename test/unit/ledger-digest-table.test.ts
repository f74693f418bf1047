// Proves what the digest table promises beyond its users' tests: a lookup of a key that is not there costs no SHA-256 (only a matching quick hash does), and a test's quick hash is taken as a uint32 whatever number it returns.
import * as crypto from "node:crypto"
import { beforeEach, describe, expect, it, vi } from "vitest"
import { DigestTable } from "../../domain/ledger/digest-table.ts"

vi.mock("node:crypto", async (importOriginal) => {
  const actual = await importOriginal<typeof import("node:crypto")>()
  return { ...actual, hash: vi.fn(actual.hash) }
})

const hashCalls = () => vi.mocked(crypto.hash).mock.calls.length

describe("DigestTable", () => {
  beforeEach(() => {
    vi.mocked(crypto.hash).mockClear()
  })

  it("finds a missing key without a SHA-256, and an entry with one", () => {
    const table = new DigestTable(1)
    for (let index = 0; index < 20_000; index += 1) table.append(`present-${index}`)
    expect(hashCalls()).toBe(20_000)
    vi.mocked(crypto.hash).mockClear()
    for (let index = 0; index < 5_000; index += 1) expect(table.find(`absent-${index}`)).toBe(-1)
    // A miss compares about two entries' 32-bit quick hashes: all 5,000 meet an equal one with a
    // chance of about 2 in a million.
    expect(hashCalls()).toBeLessThanOrEqual(1)
    expect(table.find("present-123")).toBe(123)
    expect(hashCalls()).toBeGreaterThanOrEqual(1)
  })

  it("takes a quick hash as a uint32, however the test's hash returns it", () => {
    for (const quick_hash of [() => -5, () => 2 ** 32 + 3, (key: string) => (key.length << 28) | 0]) {
      const table = new DigestTable(1, quick_hash)
      for (let index = 0; index < 100; index += 1) expect(table.append(`key-${index}`)).toBe(index)
      for (let index = 0; index < 100; index += 1) expect(table.find(`key-${index}`)).toBe(index)
      expect(table.find("key-none")).toBe(-1)
    }
  })
})
