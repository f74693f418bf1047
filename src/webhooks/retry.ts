/**
 * When a failed delivery is tried again. The nominal delay after failed attempt n is
 * `min(delay_base_ms * 2^(n-1), delay_max_ms)`: 30 s, 1 min, 2, 4, 8, 16, 32 min, 1 h 4 min, 2 h 8 min,
 * 4 h 16 min, then 6 h each. "Equal jitter" waits a uniformly random time between half the nominal
 * delay and all of it, so endpoints that failed together (an outage) are not retried together.
 *
 * With the default 26 attempts (the first and 25 retries) the last attempt comes 49.3 to 98.5 hours
 * after the first, 73.9 hours (about 3 days) on average; then the delivery is `failed`. The worker
 * schedules each next attempt itself (a pg-boss job with `startAfter`, written in the transaction
 * that records the failed attempt), so the schedule is exactly this one and survives restarts.
 */
import { assert } from "../../domain/assert.ts"

export interface RetrySchedule {
  /** Attempts in all, the first included; after the last one fails the delivery is `failed`. */
  readonly attempt_count_max: number
  /** The nominal delay after the first failed attempt; it doubles after each further failure. */
  readonly delay_base_ms: number
  /** No nominal delay exceeds this. */
  readonly delay_max_ms: number
  /** `equal`: wait between half the nominal delay and all of it; `none`: exactly the nominal delay. */
  readonly jitter: "equal" | "none"
}

export const retrySchedule: RetrySchedule = {
  attempt_count_max: 26,
  delay_base_ms: 30_000,
  delay_max_ms: 6 * 60 * 60 * 1000,
  jitter: "equal",
}

/** Beyond this many doublings every delay is capped anyway; it keeps `2 ** n` finite. */
const doubling_count_max = 40

/**
 * The nominal delay (before jitter) after failed attempt `attempt` (1-based).
 * @example nominalRetryDelayMs(retrySchedule, 1) // 30_000
 * @example nominalRetryDelayMs(retrySchedule, 20) // 21_600_000 (6 h)
 */
export function nominalRetryDelayMs(schedule: RetrySchedule, attempt: number): number {
  assert(Number.isInteger(attempt) && attempt >= 1, "attempts count from 1")
  const doublings = Math.min(attempt - 1, doubling_count_max)
  return Math.min(schedule.delay_base_ms * 2 ** doublings, schedule.delay_max_ms)
}

/**
 * The delay to wait after failed attempt `attempt`, or `undefined` when it was the last one.
 * `random` is a number in [0, 1) (`Math.random()` in production, a constant in tests).
 * @example retryDelayMs(retrySchedule, 1, 0.5) // 22_500 (between 15 s and 30 s)
 * @example retryDelayMs(retrySchedule, 26, 0.5) // undefined: the delivery has failed
 */
export function retryDelayMs(schedule: RetrySchedule, attempt: number, random: number): number | undefined {
  if (attempt >= schedule.attempt_count_max) return undefined
  const nominal_ms = nominalRetryDelayMs(schedule, attempt)
  if (schedule.jitter === "none") return nominal_ms
  return Math.round(nominal_ms / 2 + (random * nominal_ms) / 2)
}

/**
 * How long after the first attempt the last one comes: the shortest and longest the jitter allows,
 * and the mean.
 * @example retryWindowMs(retrySchedule) // { min_ms: 177_345_000, mean_ms: 266_017_500, max_ms: 354_690_000 }
 */
export function retryWindowMs(schedule: RetrySchedule): {
  readonly min_ms: number
  readonly mean_ms: number
  readonly max_ms: number
} {
  let max_ms = 0
  for (let attempt = 1; attempt < schedule.attempt_count_max; attempt++) {
    max_ms += nominalRetryDelayMs(schedule, attempt)
  }
  if (schedule.jitter === "none") return { min_ms: max_ms, mean_ms: max_ms, max_ms }
  return { min_ms: max_ms / 2, mean_ms: (max_ms * 3) / 4, max_ms }
}

/**
 * Checks a schedule given as an option (tests use millisecond delays).
 * @example assertRetrySchedule({ attempt_count_max: 3, delay_base_ms: 10, delay_max_ms: 40, jitter: "none" })
 */
export function assertRetrySchedule(schedule: RetrySchedule): RetrySchedule {
  assert(
    Number.isInteger(schedule.attempt_count_max) && schedule.attempt_count_max >= 1,
    "attempt_count_max is at least 1",
  )
  assert(
    Number.isInteger(schedule.delay_base_ms) && schedule.delay_base_ms >= 1,
    "delay_base_ms is a positive integer",
  )
  assert(schedule.delay_max_ms >= schedule.delay_base_ms, "delay_max_ms is at least delay_base_ms")
  return schedule
}
