/**
 * Final transfer records, kept compact: what a ledger must still know about a transfer that can no
 * longer change (a single-phase transfer, a post, a void, a reservation that was posted, voided or
 * expired) is only whether its id is taken, whether a retry repeats it, and, for a reservation,
 * how it ended and its amount. Held as objects in the state's persistent map, each such record
 * cost about 0.4 KB of heap that the garbage collector marks again at every full collection, for
 * ever; here it costs 53 bytes of typed arrays (plus the hash table's slots), which the collector
 * never looks into.
 *
 * - An entry holds the SHA-256 of the transfer id (first 16 bytes), the SHA-256 of the fields a
 *   retry must repeat (`transferRetryDigest`, `postRetryDigest`, `voidRetryDigest`; first 16
 *   bytes), the amount (u128) and the record's kind. Two different ids or two different retries
 *   would have to collide in 128 bits to be confused.
 * - The hash table is keyed by a cheap 32-bit hash of the id (`quickHash`), which every entry also
 *   keeps: most lookups are of new ids (the decider checks every transfer's id is unused), and
 *   they end at an empty slot without a SHA-256. Only an entry whose quick hash matches costs the
 *   id's digest, which alone decides; so quick hashes that collide cost time, never an answer.
 * - Entries are only appended, and numbered in order. A ledger state sees the first
 *   `compacted_count` of them (`find`'s `visible`), so states keep their value semantics: a state
 *   never sees an entry its own history did not put there, even when a later or a sibling state
 *   appended more to the same store (see `compactTransfers`, which copies on a real branch).
 */
import { hash, randomBytes } from "node:crypto"
import { assert } from "../assert.ts"
import { U128_MAX } from "../money/amount.ts"

/** How a compacted record ended; reservations keep their final status. */
export type CompactedKind =
  | "single_phase"
  | "pending_posted"
  | "pending_voided"
  | "pending_expired"
  | "post"
  | "void"

/** Every kind, in the order of the codes an entry stores. */
export const compactedKinds: ReadonlyArray<CompactedKind> = [
  "single_phase",
  "pending_posted",
  "pending_voided",
  "pending_expired",
  "post",
  "void",
]

/** The first 16 bytes of a SHA-256, as four little-endian 32-bit words. */
export type Digest = readonly [number, number, number, number]

/** A compacted record as the decider sees it (see the module comment). */
export interface CompactedTransfer {
  readonly kind: "compacted"
  readonly record_kind: CompactedKind
  readonly amount: bigint
  readonly retry_digest: Digest
}

const digestOf = (text: string): Digest => {
  const bytes = hash("sha256", text, "buffer")
  return [bytes.readUInt32LE(0), bytes.readUInt32LE(4), bytes.readUInt32LE(8), bytes.readUInt32LE(12)]
}

/** The digest that tells ids apart. */
export function idDigest(transfer_id: string): Digest {
  // As JSON, which escapes a lone surrogate: SHA-256 hashes UTF-8, where every lone surrogate
  // becomes U+FFFD, so "t\uD800" and "t\uFFFD" would share a digest.
  return digestOf(JSON.stringify(transfer_id))
}

// Per process: the table's layout differs between processes, never its answers. A seed nobody
// outside knows keeps ids chosen to collide from piling up in one run of slots.
const quickSeed = randomBytes(4).readUInt32LE(0)

/**
 * A cheap 32-bit hash of an id's UTF-16 code units (FNV-1a from a per-process seed, then
 * MurmurHash3's finaliser to spread the bits), which places an entry in the table; the id's
 * digest confirms a match.
 */
export function quickHash(transfer_id: string): number {
  let h = (quickSeed ^ 0x811c9dc5) | 0
  for (let index = 0; index < transfer_id.length; index += 1)
    h = Math.imul(h ^ transfer_id.charCodeAt(index), 0x01000193)
  h ^= h >>> 16
  h = Math.imul(h, 0x85ebca6b)
  h ^= h >>> 13
  h = Math.imul(h, 0xc2b2ae35)
  h ^= h >>> 16
  return h >>> 0
}

/** What a retried transfer must repeat, as the decider compares it (kind and timeout included). */
export interface TransferRetryFields {
  /** Null for a single-phase transfer. */
  readonly pending_timeout_ms: number | null
  readonly debit_account_id: string
  readonly credit_account_id: string
  readonly amount: bigint
  readonly code: number
  readonly user_data: string | null
  readonly linked_group_id: string | null
}

/** The retry digest of a single-phase or pending transfer. */
export function transferRetryDigest(fields: TransferRetryFields): Digest {
  return digestOf(
    JSON.stringify([
      fields.pending_timeout_ms === null ? "single_phase" : "pending",
      fields.pending_timeout_ms,
      fields.debit_account_id,
      fields.credit_account_id,
      fields.amount.toString(),
      fields.code,
      fields.user_data,
      fields.linked_group_id,
    ]),
  )
}

/** The retry digest of a post: the reservation it settles and the amount it posted. */
export function postRetryDigest(pending_id: string, amount: bigint): Digest {
  return digestOf(JSON.stringify(["post", pending_id, amount.toString()]))
}

/** The retry digest of a void: the reservation it released. */
export function voidRetryDigest(pending_id: string): Digest {
  return digestOf(JSON.stringify(["void", pending_id]))
}

export function sameDigest(a: Digest, b: Digest): boolean {
  return a[0] === b[0] && a[1] === b[1] && a[2] === b[2] && a[3] === b[3]
}

/** One entry to append. */
export interface CompactedEntry {
  readonly transfer_id: string
  readonly record_kind: CompactedKind
  readonly amount: bigint
  readonly retry_digest: Digest
}

// Per entry: id digest (4 words), retry digest (4), amount (4, least significant first), the id's
// quick hash (1).
const entryWords = 13
const quickWord = 12
const initialCapacity = 64

/**
 * The append-only store behind compacted records: entries in typed arrays, found by an open-
 * addressing hash table (linear probing, at most half full) of entry numbers, keyed by the ids'
 * quick hashes.
 */
export class CompactedTransfers {
  /** The store of a state that never compacted; never appended to (`appendable` is false). */
  static readonly none = new CompactedTransfers(0, false, quickHash)

  /** `quickHash`, or in tests a worse one, to prove the digests decide. */
  readonly #quickHash: (transfer_id: string) => number
  #words: Uint32Array
  #kinds: Uint8Array
  /** Entry number + 1; 0 is an empty slot. */
  #slots: Int32Array
  #count = 0
  readonly appendable: boolean

  /** `capacity` is a power of two (or 0), so the slots' count is one too and masks a hash. */
  private constructor(capacity: number, appendable: boolean, quick_hash: (transfer_id: string) => number) {
    assert(capacity === 0 || (capacity & (capacity - 1)) === 0, "a capacity is a power of two")
    this.#quickHash = quick_hash
    this.#words = new Uint32Array(capacity * entryWords)
    this.#kinds = new Uint8Array(capacity)
    this.#slots = new Int32Array(Math.max(2, capacity * 2))
    this.appendable = appendable
  }

  /**
   * A new, empty store. `quick_hash` is for tests only: it must return a uint32 and may collide at
   * will (a constant puts every entry in one run of slots), which changes how long a lookup takes,
   * never what it finds.
   */
  static create(quick_hash: (transfer_id: string) => number = quickHash): CompactedTransfers {
    return new CompactedTransfers(initialCapacity, true, quick_hash)
  }

  /** Entries appended so far, by every state sharing this store. */
  get count(): number {
    return this.#count
  }

  /** The entry number of `transfer_id` among the first `visible` entries, or -1. */
  find(transfer_id: string, visible: number): number {
    const quick = this.#quickHash(transfer_id)
    const slots = this.#slots
    const words = this.#words
    const mask = slots.length - 1
    let digest: Digest | undefined
    for (let slot = quick & mask; ; slot = (slot + 1) & mask) {
      const stored = slots[slot] as number
      if (stored === 0) return -1
      const entry = stored - 1
      if (entry < visible && words[entry * entryWords + quickWord] === quick) {
        digest ??= idDigest(transfer_id)
        if (this.#idAt(entry, digest)) return entry
      }
    }
  }

  /** The record of entry number `entry`. */
  at(entry: number): CompactedTransfer {
    assert(entry >= 0 && entry < this.#count, "a compacted entry exists")
    const words = this.#words
    const base = entry * entryWords
    let amount = 0n
    for (let word = 3; word >= 0; word -= 1)
      amount = (amount << 32n) | BigInt(words[base + 8 + word] as number)
    return {
      kind: "compacted",
      record_kind: compactedKinds[this.#kinds[entry] as number] as CompactedKind,
      amount,
      retry_digest: [
        words[base + 4] as number,
        words[base + 5] as number,
        words[base + 6] as number,
        words[base + 7] as number,
      ],
    }
  }

  /** Appends an entry (its id must not be among the entries yet); returns its number. */
  append(entry: CompactedEntry): number {
    assert(this.appendable, "the shared empty store is never appended to")
    assert(entry.amount >= 0n && entry.amount <= U128_MAX, "a compacted amount fits u128")
    if (this.#count === this.#kinds.length) this.#grow()
    const number = this.#count
    const words = this.#words
    const base = number * entryWords
    words.set(idDigest(entry.transfer_id), base)
    words.set(entry.retry_digest, base + 4)
    let amount = entry.amount
    for (let word = 0; word < 4; word += 1) {
      words[base + 8 + word] = Number(amount & 0xffff_ffffn)
      amount >>= 32n
    }
    words[base + quickWord] = this.#quickHash(entry.transfer_id)
    this.#kinds[number] = compactedKinds.indexOf(entry.record_kind)
    this.#count += 1
    this.#index(number)
    return number
  }

  /** A new store holding this one's first `count` entries (a branch's own copy). */
  copyOf(count: number): CompactedTransfers {
    assert(count >= 0 && count <= this.#count, "a copy takes entries that exist")
    let capacity = initialCapacity
    while (capacity < count) capacity *= 2
    const copy = new CompactedTransfers(capacity, true, this.#quickHash)
    copy.#words.set(this.#words.subarray(0, count * entryWords))
    copy.#kinds.set(this.#kinds.subarray(0, count))
    copy.#count = count
    for (let entry = 0; entry < count; entry += 1) copy.#index(entry)
    return copy
  }

  #idAt(entry: number, id: Digest): boolean {
    const words = this.#words
    const base = entry * entryWords
    return (
      words[base] === id[0] &&
      words[base + 1] === id[1] &&
      words[base + 2] === id[2] &&
      words[base + 3] === id[3]
    )
  }

  #index(entry: number): void {
    const slots = this.#slots
    const mask = slots.length - 1
    const quick = this.#words[entry * entryWords + quickWord] as number
    for (let slot = quick & mask; ; slot = (slot + 1) & mask) {
      if (slots[slot] === 0) {
        slots[slot] = entry + 1
        return
      }
    }
  }

  #grow(): void {
    const capacity = Math.max(initialCapacity, this.#kinds.length * 2)
    const words = new Uint32Array(capacity * entryWords)
    words.set(this.#words)
    const kinds = new Uint8Array(capacity)
    kinds.set(this.#kinds)
    this.#words = words
    this.#kinds = kinds
    this.#slots = new Int32Array(capacity * 2)
    for (let entry = 0; entry < this.#count; entry += 1) this.#index(entry)
  }
}
