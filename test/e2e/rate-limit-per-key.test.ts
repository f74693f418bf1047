// Mutation-review test: the per-key bucket (basic: 50/s, burst 100) is enforced on its own, and a
// request the key's bucket refuses costs the tenant's bucket nothing, so a tenant's other keys
// keep their share.
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import type { NewApiKey } from "../../src/http/api.ts"
import { expectError, expectOk } from "../support/api-expect.ts"
import {
  apiClient,
  type RunningPlatform,
  registerTenant,
  startPlatform,
} from "../support/platform-process.ts"

let platform: RunningPlatform
beforeAll(async () => {
  platform = await startPlatform()
})
afterAll(async () => {
  await platform?.stop()
})

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms))

describe("per-key rate limit", () => {
  it("refuses one key past its own burst while the tenant has room, and its refusals leave the tenant's other keys their share", async () => {
    const { client: first, credentials } = await registerTenant(platform.url, "basic")
    const made = expectOk(
      await first.post<typeof NewApiKey.Type>("/api/v1/api-keys", { name: "second" }),
      201,
    )
    const second = apiClient(platform.url, { tenant_id: credentials.tenant_id, api_key: made.api_key })
    await sleep(2_100) // every bucket refills to its burst
    const started_ms = Date.now()
    // 300 requests at once with one key: the key's burst is 100, the tenant's 200.
    const burst = await Promise.all(Array.from({ length: 300 }, () => first.get("/api/v1/wallets?limit=1")))
    const elapsed_s = (Date.now() - started_ms) / 1000
    const ok = burst.filter((r) => r.status === 200).length
    const limited = burst.filter((r) => r.status === 429)
    expect(ok + limited.length).toBe(300)
    expect(ok).toBeGreaterThanOrEqual(100)
    // No more than the key's burst plus what its 50/s refilled meanwhile.
    expect(ok).toBeLessThanOrEqual(100 + Math.ceil(elapsed_s * 50))
    const error = expectError(limited[0] as (typeof burst)[number], 429, "rate_limited")
    expect(error.message).toContain("50/s per key")
    // The tenant's bucket lent only the requests that passed: ~100 of its 200 are left, so the
    // other key's 60 all pass.
    const others = await Promise.all(Array.from({ length: 60 }, () => second.get("/api/v1/wallets?limit=1")))
    expect(others.map((r) => r.status)).toEqual(Array(60).fill(200))
  })
})
