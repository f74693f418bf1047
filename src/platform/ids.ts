/**
 * Public resource ids: a readable prefix and a UUID v7 in hex (`wal_0193...`), so an id says what
 * it names and ids sort by creation time.
 */
import { uuidv7 } from "../ids.ts"

export const idPrefixes = {
  tenant: "ten",
  key: "key",
  wallet: "wal",
  identity: "idn",
  transaction: "txn",
  deposit: "dep",
} as const

/** @example newId("wal") // "wal_0193a0b1c2d37e4f8a9b0c1d2e3f4a5b" */
export const newId = (prefix: string, now_ms: number = Date.now()): string =>
  `${prefix}_${uuidv7(now_ms).replaceAll("-", "")}`

/** True when `id` looks like an id with `prefix` (32 lower-case hex digits after it). */
export const isIdOf = (prefix: string, id: string): boolean =>
  id.length === prefix.length + 33 &&
  id.startsWith(`${prefix}_`) &&
  /^[0-9a-f]{32}$/.test(id.slice(prefix.length + 1))
