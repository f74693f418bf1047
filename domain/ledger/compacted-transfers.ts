/**
 * Final transfer records, kept compact: what a ledger must still know about a transfer that can no
 * longer change (a single-phase transfer, a post, a void, a reservation that was posted, voided or
 * expired) is only whether its id is taken, whether a retry repeats it, and, for a reservation,
 * how it ended and its amount. Held as objects in the state's persistent map, each such record
 * cost about 0.4 KB of heap that the garbage collector marks again at every full collection, for
 * ever; here it costs 56 bytes of typed arrays (plus the hash table's slots), which the collector
 * never looks into.
 *
 * - An entry (a `DigestTable` entry, digest-table.ts) is found by the transfer id and holds the
 *   SHA-256 of the fields a retry must repeat (`transferRetryDigest`, `postRetryDigest`,
 *   `voidRetryDigest`; first 16 bytes), the amount (u128) and the record's kind. Two different
 *   retries would have to collide in 128 bits to be confused.
 * - Entries are only appended, and numbered in order. A ledger state sees the first
 *   `compacted_count` of them (`find`'s `visible`), so states keep their value semantics: a state
 *   never sees an entry its own history did not put there, even when a later or a sibling state
 *   appended more to the same store (see `compactTransfers`, which copies on a real branch).
 */
import { assert } from "../assert.ts"
import { U128_MAX } from "../money/amount.ts"
import { type Digest, DigestTable, digestOf, quickHash } from "./digest-table.ts"

export { type Digest, sameDigest } from "./digest-table.ts"

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

/** A compacted record as the decider sees it (see the module comment). */
export interface CompactedTransfer {
  readonly kind: "compacted"
  readonly record_kind: CompactedKind
  readonly amount: bigint
  readonly retry_digest: Digest
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

/** One entry to append. */
export interface CompactedEntry {
  readonly transfer_id: string
  readonly record_kind: CompactedKind
  readonly amount: bigint
  readonly retry_digest: Digest
}

// Payload words of an entry: retry digest (4), amount (4, least significant first), kind (1).
const retryWord = 0
const amountWord = 4
const kindWord = 8
const payloadWords = 9

/**
 * The append-only store behind compacted records: a `DigestTable` of the transfer ids. A store is
 * shared by the states of one history; `copyOf` gives a branch its own.
 */
export class CompactedTransfers {
  /** The store of a state that never compacted; never appended to (`appendable` is false). */
  static readonly none = new CompactedTransfers(new DigestTable(payloadWords), false)

  readonly #table: DigestTable
  readonly appendable: boolean

  private constructor(table: DigestTable, appendable: boolean) {
    this.#table = table
    this.appendable = appendable
  }

  /**
   * A new, empty store. `quick_hash` is for tests only (see `DigestTable`): it changes how long a
   * lookup takes, never what it finds.
   */
  static create(quick_hash: (transfer_id: string) => number = quickHash): CompactedTransfers {
    return new CompactedTransfers(new DigestTable(payloadWords, quick_hash), true)
  }

  /** Entries appended so far, by every state sharing this store. */
  get count(): number {
    return this.#table.count
  }

  /** The entry number of `transfer_id` among the first `visible` entries, or -1. */
  find(transfer_id: string, visible: number): number {
    return this.#table.find(transfer_id, visible)
  }

  /** The record of entry number `entry`. */
  at(entry: number): CompactedTransfer {
    const table = this.#table
    let amount = 0n
    for (let word = 3; word >= 0; word -= 1)
      amount = (amount << 32n) | BigInt(table.read(entry, amountWord + word))
    return {
      kind: "compacted",
      record_kind: compactedKinds[table.read(entry, kindWord)] as CompactedKind,
      amount,
      retry_digest: [
        table.read(entry, retryWord),
        table.read(entry, retryWord + 1),
        table.read(entry, retryWord + 2),
        table.read(entry, retryWord + 3),
      ],
    }
  }

  /** Appends an entry (its id must not be among the entries yet); returns its number. */
  append(entry: CompactedEntry): number {
    assert(this.appendable, "the shared empty store is never appended to")
    assert(entry.amount >= 0n && entry.amount <= U128_MAX, "a compacted amount fits u128")
    const table = this.#table
    const number = table.append(entry.transfer_id)
    for (let word = 0; word < 4; word += 1)
      table.write(number, retryWord + word, entry.retry_digest[word] as number)
    let amount = entry.amount
    for (let word = 0; word < 4; word += 1) {
      table.write(number, amountWord + word, Number(amount & 0xffff_ffffn))
      amount >>= 32n
    }
    table.write(number, kindWord, compactedKinds.indexOf(entry.record_kind))
    return number
  }

  /** A new store holding this one's first `count` entries (a branch's own copy). */
  copyOf(count: number): CompactedTransfers {
    return new CompactedTransfers(this.#table.copyOf(count), true)
  }
}
