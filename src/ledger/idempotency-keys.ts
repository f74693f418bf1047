/**
 * The idempotency keys a ledger's commands used, kept outside the garbage-collected heap: a key is
 * used for ever, so a writer that held each one as a string and an object in a `Map` grew its heap
 * by about 0.3 KB for every command sent with a key (309 bytes stand-alone), heap that every full
 * collection marked again.
 * Here a key costs a `DigestTable` entry (domain/ledger/digest-table.ts): the key's digest and
 * quick hash, the first 16 bytes of the SHA-256 of its command's fingerprint, and the versions of
 * the command's events (which a replay reads back from the store): 52 bytes, plus 8 bytes of
 * slots for each entry the table has room for, so 60 to 120 bytes a key as the table fills.
 */
import { type Digest, DigestTable, sameDigest, textDigest } from "../../domain/ledger/digest-table.ts"

/** What a used key answers. */
export interface IdempotencyEntry {
  /** The digest of the fingerprint of the command that used the key (`fingerprintDigest`). */
  readonly fingerprint: Digest
  /** The command's first event's version; `stream_version` + 1 when it recorded none. */
  readonly first_version: number
  readonly stream_version: number
}

/** The digest a key's fingerprint is stored and compared as. */
export const fingerprintDigest: (fingerprint: string) => Digest = textDigest

/** True when `fingerprint` is the one `entry` was stored with. */
export const sameFingerprint = (entry: IdempotencyEntry, fingerprint: string): boolean =>
  sameDigest(entry.fingerprint, fingerprintDigest(fingerprint))

// Payload words: fingerprint digest (4), first_version (2: high, low), stream_version (2).
const fingerprintWord = 0
const firstVersionWord = 4
const streamVersionWord = 6
const payloadWords = 8
const wordRange = 2 ** 32

/** See the module comment. Versions are integers up to 2^53 - 1. */
export class IdempotencyKeys {
  readonly #table: DigestTable

  /** `quick_hash` is for tests only (see `DigestTable`). */
  constructor(quick_hash?: (key: string) => number) {
    this.#table = new DigestTable(payloadWords, quick_hash)
  }

  /** Keys stored. */
  get size(): number {
    return this.#table.count
  }

  get(key: string): IdempotencyEntry | undefined {
    const table = this.#table
    const entry = table.find(key)
    if (entry < 0) return undefined
    return {
      fingerprint: [
        table.read(entry, fingerprintWord),
        table.read(entry, fingerprintWord + 1),
        table.read(entry, fingerprintWord + 2),
        table.read(entry, fingerprintWord + 3),
      ],
      first_version:
        table.read(entry, firstVersionWord) * wordRange + table.read(entry, firstVersionWord + 1),
      stream_version:
        table.read(entry, streamVersionWord) * wordRange + table.read(entry, streamVersionWord + 1),
    }
  }

  /** Stores what `key` answers; a key stored again answers the later entry, as a `Map` would. */
  set(
    key: string,
    entry: { readonly fingerprint: string; readonly first_version: number; readonly stream_version: number },
  ): void {
    checkVersion(entry.first_version)
    checkVersion(entry.stream_version)
    const table = this.#table
    const found = table.find(key)
    const number = found >= 0 ? found : table.append(key)
    const fingerprint = fingerprintDigest(entry.fingerprint)
    for (let word = 0; word < 4; word += 1)
      table.write(number, fingerprintWord + word, fingerprint[word] as number)
    writeVersion(table, number, firstVersionWord, entry.first_version)
    writeVersion(table, number, streamVersionWord, entry.stream_version)
  }
}

function checkVersion(version: number): void {
  if (!Number.isSafeInteger(version) || version < 0)
    throw new Error(`a stream version is a safe non-negative integer, got ${version}`)
}

function writeVersion(table: DigestTable, entry: number, word: number, version: number): void {
  table.write(entry, word, Math.floor(version / wordRange))
  table.write(entry, word + 1, version % wordRange)
}
