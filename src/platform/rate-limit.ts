/**
 * Token buckets per tenant and per API key, in process memory. A bucket holds up to twice its
 * rate (a one-second burst on top of the steady rate) and refills continuously. Tenants never
 * share a bucket, so one tenant's traffic cannot throttle another. With several API processes each
 * enforces its own buckets: the documented limits are per process.
 */
export interface Bucket {
  tokens: number
  updated_ms: number
}

export interface RateDecision {
  readonly allowed: boolean
  /** Whole seconds until one token is available again (0 when allowed). */
  readonly retry_after_s: number
}

/** Buckets remembered at most; the least recently created are dropped beyond this. */
const bucket_count_max = 100_000

export const makeRateLimiter = () => {
  const buckets = new Map<string, Bucket>()
  const take = (key: string, rate_per_s: number, now_ms: number): RateDecision => {
    const capacity = rate_per_s * 2
    let bucket = buckets.get(key)
    if (bucket === undefined) {
      if (buckets.size >= bucket_count_max) {
        const oldest = buckets.keys().next().value
        if (oldest !== undefined) buckets.delete(oldest)
      }
      bucket = { tokens: capacity, updated_ms: now_ms }
      buckets.set(key, bucket)
    }
    bucket.tokens = Math.min(capacity, bucket.tokens + ((now_ms - bucket.updated_ms) / 1000) * rate_per_s)
    bucket.updated_ms = now_ms
    if (bucket.tokens >= 1) {
      bucket.tokens -= 1
      return { allowed: true, retry_after_s: 0 }
    }
    return { allowed: false, retry_after_s: Math.max(1, Math.ceil((1 - bucket.tokens) / rate_per_s)) }
  }
  return {
    /**
     * Takes one token from each bucket in `limits`, or none if any is empty.
     * @example limiter.admit([{ key: "tenant:ten_1", rate_per_s: 100 }], Date.now())
     */
    admit: (limits: ReadonlyArray<{ readonly key: string; readonly rate_per_s: number }>, now_ms: number) => {
      for (const [index, limit] of limits.entries()) {
        const decision = take(limit.key, limit.rate_per_s, now_ms)
        if (!decision.allowed) {
          // Give back what the earlier buckets lent, so a refused request costs nothing.
          for (const earlier of limits.slice(0, index)) {
            const bucket = buckets.get(earlier.key)
            if (bucket !== undefined) bucket.tokens += 1
          }
          return decision
        }
      }
      return { allowed: true, retry_after_s: 0 }
    },
    /**
     * Whether `key`'s bucket holds a token beyond `promised` ones, taking none: for limits counted
     * after the fact (a refusal is counted with `admit` once it happened), with the requests whose
     * outcome is still awaited as `promised`, so that a burst sent at once cannot all pass the check.
     */
    check: (key: string, rate_per_s: number, now_ms: number, promised = 0): RateDecision => {
      const bucket = buckets.get(key)
      const full = rate_per_s * 2
      const tokens =
        (bucket === undefined
          ? full
          : Math.min(full, bucket.tokens + ((now_ms - bucket.updated_ms) / 1000) * rate_per_s)) - promised
      return tokens >= 1
        ? { allowed: true, retry_after_s: 0 }
        : { allowed: false, retry_after_s: Math.max(1, Math.ceil((1 - tokens) / rate_per_s)) }
    },
  }
}
