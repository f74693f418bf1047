/**
 * An append-only table of entries found by a text key, kept in typed arrays that the garbage
 * collector never looks into: the ledger's compacted transfer records (compacted-transfers.ts) and
 * the writer's used idempotency keys (src/ledger/idempotency-keys.ts), both of which only grow.
 *
 * - An entry holds the first 16 bytes of the SHA-256 of its key (`textDigest`), the key's quick
 *   hash, and a fixed number of 32-bit words of the caller's (its payload). Two different keys
 *   would have to collide in 128 bits to be confused.
 * - Entries are found through an open-addressing hash table (linear probing, at most half full)
 *   keyed by the quick hash (`quickHash`, 32 bits, cheap): most lookups are of new keys, and they
 *   end at an empty slot without a SHA-256. Only an entry whose quick hash matches costs the key's
 *   digest, which alone decides; so quick hashes that collide cost time, never an answer.
 * - Entries are numbered in the order they were appended, and a lookup may be limited to the first
 *   `visible` of them (a ledger state sees only the entries its own history put there).
 */
import { hash, randomBytes } from "node:crypto"
import { assert } from "../assert.ts"

/** The first 16 bytes of a SHA-256, as four little-endian 32-bit words. */
export type Digest = readonly [number, number, number, number]

/** The digest of `text`'s UTF-8. Use `textDigest` for keys that may hold lone surrogates. */
export const digestOf = (text: string): Digest => {
  const bytes = hash("sha256", text, "buffer")
  return [bytes.readUInt32LE(0), bytes.readUInt32LE(4), bytes.readUInt32LE(8), bytes.readUInt32LE(12)]
}

/** The digest that tells keys apart. */
export function textDigest(text: string): Digest {
  // As JSON, which escapes a lone surrogate: SHA-256 hashes UTF-8, where every lone surrogate
  // becomes U+FFFD, so "t\uD800" and "t\uFFFD" would share a digest.
  return digestOf(JSON.stringify(text))
}

export function sameDigest(a: Digest, b: Digest): boolean {
  return a[0] === b[0] && a[1] === b[1] && a[2] === b[2] && a[3] === b[3]
}

// Per process: the table's layout differs between processes, never its answers. A seed nobody
// outside knows keeps keys chosen to collide from piling up in one run of slots.
const quickSeed = randomBytes(4).readUInt32LE(0)

/**
 * A cheap 32-bit hash of a key's UTF-16 code units (FNV-1a from a per-process seed, then
 * MurmurHash3's finaliser to spread the bits), which places an entry in the table; the key's
 * digest confirms a match.
 */
export function quickHash(text: string): number {
  let h = (quickSeed ^ 0x811c9dc5) | 0
  for (let index = 0; index < text.length; index += 1) h = Math.imul(h ^ text.charCodeAt(index), 0x01000193)
  h ^= h >>> 16
  h = Math.imul(h, 0x85ebca6b)
  h ^= h >>> 13
  h = Math.imul(h, 0xc2b2ae35)
  h ^= h >>> 16
  return h >>> 0
}

// Per entry: the key's digest (4 words), its quick hash (1), then the payload.
const quickWord = 4
const headerWords = 5
const initialCapacity = 64

/** See the module comment. */
export class DigestTable {
  readonly #payloadWords: number
  readonly #entryWords: number
  /** `quickHash`, or in tests a worse one, to prove the digests decide. */
  readonly #quickHash: (text: string) => number
  #words: Uint32Array
  /** Entry number + 1; 0 is an empty slot. */
  #slots: Int32Array
  #capacity: number
  #count = 0

  /**
   * An empty table whose entries carry `payload_words` words each. `quick_hash` is for tests
   * only: its result is taken as a uint32, and it may collide at will (a constant puts every entry in one run
   * of slots), which changes how long a lookup takes, never what it finds.
   */
  constructor(payload_words: number, quick_hash: (text: string) => number = quickHash, capacity = 0) {
    assert(capacity === 0 || (capacity & (capacity - 1)) === 0, "a capacity is a power of two")
    this.#payloadWords = payload_words
    this.#entryWords = headerWords + payload_words
    this.#quickHash = quick_hash
    this.#capacity = capacity
    this.#words = new Uint32Array(capacity * this.#entryWords)
    this.#slots = new Int32Array(Math.max(2, capacity * 2))
  }

  /** Entries appended so far. */
  get count(): number {
    return this.#count
  }

  /** The entry number of `key` among the first `visible` entries (all by default), or -1. */
  find(key: string, visible: number = this.#count): number {
    // As a uint32, the way the entry's word stores it (a test's hash may return any number).
    const quick = this.#quickHash(key) >>> 0
    const slots = this.#slots
    const words = this.#words
    const entryWords = this.#entryWords
    const mask = slots.length - 1
    let digest: Digest | undefined
    for (let slot = quick & mask; ; slot = (slot + 1) & mask) {
      const stored = slots[slot] as number
      if (stored === 0) return -1
      const entry = stored - 1
      if (entry < visible && words[entry * entryWords + quickWord] === quick) {
        digest ??= textDigest(key)
        const base = entry * entryWords
        if (
          words[base] === digest[0] &&
          words[base + 1] === digest[1] &&
          words[base + 2] === digest[2] &&
          words[base + 3] === digest[3]
        )
          return entry
      }
    }
  }

  /** Appends an entry for `key` with an all-zero payload (fill it with `write`); returns its number. */
  append(key: string): number {
    if (this.#count === this.#capacity) this.#grow()
    const entry = this.#count
    const base = entry * this.#entryWords
    this.#words.set(textDigest(key), base)
    this.#words[base + quickWord] = this.#quickHash(key) >>> 0
    this.#count += 1
    this.#index(entry)
    return entry
  }

  /** Word `index` of entry `entry`'s payload. */
  read(entry: number, index: number): number {
    assert(entry >= 0 && entry < this.#count, "an entry exists")
    assert(index >= 0 && index < this.#payloadWords, "a payload word exists")
    return this.#words[entry * this.#entryWords + headerWords + index] as number
  }

  /** Sets word `index` of entry `entry`'s payload to `value` (a uint32). */
  write(entry: number, index: number, value: number): void {
    assert(entry >= 0 && entry < this.#count, "an entry exists")
    assert(index >= 0 && index < this.#payloadWords, "a payload word exists")
    assert(value >>> 0 === value, "a payload word is a uint32")
    this.#words[entry * this.#entryWords + headerWords + index] = value
  }

  /** A new table holding this one's first `count` entries. */
  copyOf(count: number): DigestTable {
    assert(count >= 0 && count <= this.#count, "a copy takes entries that exist")
    let capacity = initialCapacity
    while (capacity < count) capacity *= 2
    const copy = new DigestTable(this.#payloadWords, this.#quickHash, capacity)
    copy.#words.set(this.#words.subarray(0, count * this.#entryWords))
    copy.#count = count
    for (let entry = 0; entry < count; entry += 1) copy.#index(entry)
    return copy
  }

  #index(entry: number): void {
    const slots = this.#slots
    const mask = slots.length - 1
    const quick = this.#words[entry * this.#entryWords + quickWord] as number
    for (let slot = quick & mask; ; slot = (slot + 1) & mask) {
      if (slots[slot] === 0) {
        slots[slot] = entry + 1
        return
      }
    }
  }

  #grow(): void {
    const capacity = Math.max(initialCapacity, this.#capacity * 2)
    const words = new Uint32Array(capacity * this.#entryWords)
    words.set(this.#words)
    this.#words = words
    this.#capacity = capacity
    this.#slots = new Int32Array(capacity * 2)
    for (let entry = 0; entry < this.#count; entry += 1) this.#index(entry)
  }
}
