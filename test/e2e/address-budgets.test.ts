// Mutation-review test of the budgets kept per client address (README, Conventions: Rate limits):
// "Registration: 20/s per client address", and for keys that are not valid "20 refusals/s per
// client address (burst 40) ... lookups still running count against it, so a burst of keys sent at
// once gets no more lookups than it holds".
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

describe("budgets per client address", () => {
  it("admits registrations at 20/s per address (burst 40): 120 at once get at most about 40", async () => {
    const anonymous = apiClient(platform.url)
    const started_ms = Date.now()
    // A well-formed body with an e-mail address that is not one: refused 400 after the budget is
    // taken, so nothing is written.
    const answers = await Promise.all(
      Array.from({ length: 120 }, (_, i) =>
        anonymous.post("/api/tenant/register", {
          email: `not-an-address-${i}`,
          password: "correct horse battery staple",
          company_name: "Budget",
          plan: "basic",
        }),
      ),
    )
    const elapsed_s = (Date.now() - started_ms) / 1000
    const admitted = answers.filter((a) => a.status === 400).length
    const limited = answers.filter((a) => a.status === 429).length
    expect(admitted + limited).toBe(120)
    expect(admitted).toBeGreaterThanOrEqual(40)
    expect(admitted).toBeLessThanOrEqual(40 + Math.ceil(elapsed_s * 20) + 1)
  })

  it("gives a burst of keys no more lookups than the budget holds while they run: past it, even a valid key this server never saw is 429", async () => {
    await sleep(2_500) // the address's budgets refill
    const { client: owner, credentials } = await registerTenant(platform.url, "basic")
    const made = expectOk(
      await owner.post<typeof NewApiKey.Type>("/api/v1/api-keys", { name: "unseen" }),
      201,
    )
    const unseen = apiClient(platform.url, { tenant_id: credentials.tenant_id, api_key: made.api_key })
    await sleep(2_500)
    const guess = (index: number) =>
      apiClient(platform.url, {
        tenant_id: `ten_burst${index}`,
        api_key: `sk_sandbox_burst_${index}_${Math.random().toString(36).slice(2)}`,
      }).get("/api/v1/wallets")
    // Hold every key lookup: the whole burst arrives while none has finished.
    const holder = await platform.database.pool.connect()
    await holder.query("begin")
    await holder.query("lock table platform.api_keys in access exclusive mode")
    const guesses = Promise.all(Array.from({ length: 60 }, (_, i) => guess(i)))
    await sleep(300)
    const valid = unseen.get("/api/v1/wallets")
    await sleep(700)
    await holder.query("rollback")
    holder.release()
    const burst = await guesses
    const looked_up = burst.filter((answer) => answer.status === 401).length
    expect(burst.every((answer) => answer.status === 401 || answer.status === 429)).toBe(true)
    expect(looked_up).toBeGreaterThanOrEqual(30)
    expect(looked_up).toBeLessThanOrEqual(40 + 20 + 1)
    // 60 lookups were running when it came: the budget (40) was spent, so it got none.
    expectError(await valid, 429, "rate_limited")
  })
})
