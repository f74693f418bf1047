/**
 * The ledger clock is epoch milliseconds inside and an ISO 8601 UTC string in events. Both
 * conversions are pure functions of their input, so deciding and replaying stay deterministic.
 */
import { assert } from "../assert.ts"
import { ledgerTimeMsMax } from "./limits.ts"

const isoPattern = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/

/** Asserts a command's clock reading is a whole millisecond the ledger can record. */
export function assertLedgerTime(ms: number): void {
  assert(Number.isSafeInteger(ms) && ms >= 0 && ms <= ledgerTimeMsMax, "ledger time is an integer in range")
}

// One-entry memos: the events of a command, and of a replayed batch, mostly share one time, and
// converting showed up in profiles. Both functions stay pure; the memo only skips repeated work.
let formatted = { ms: Number.NaN, iso: "" }
let parsed = { iso: "", ms: Number.NaN }

/**
 * Event form of a ledger time.
 * @example isoFromMs(0) // "1970-01-01T00:00:00.000Z"
 */
export function isoFromMs(ms: number): string {
  if (ms !== formatted.ms) formatted = { ms, iso: new Date(ms).toISOString() }
  return formatted.iso
}

/**
 * Ledger time of an event timestamp; crashes on anything `isoFromMs` could not have written, since
 * such an event did not come from this ledger's decider.
 */
export function msFromIso(iso: string): number {
  if (iso === parsed.iso) return parsed.ms
  assert(isoPattern.test(iso), "event time is ISO 8601 UTC with milliseconds")
  const ms = Date.parse(iso)
  assertLedgerTime(ms)
  parsed = { iso, ms }
  return ms
}
