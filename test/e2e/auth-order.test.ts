// Mutation-review test of the documented order of refusals (README, Conventions): "without valid
// credentials the answer is 401 whatever else is wrong, then 403 for a missing scope, 429 over a
// rate limit, and only then 400, 413 or 415 (a refused request counts against the rate limits like
// any other)".
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import type { NewApiKey } from "../../src/http/api.ts"
import { expectOk } from "../support/api-expect.ts"
import {
  type ApiClient,
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

const tenantWithKeys = async (scopes: ReadonlyArray<ReadonlyArray<string> | undefined>) => {
  const { client, credentials } = await registerTenant(platform.url, "basic")
  const others: ApiClient[] = []
  for (const [n, scope] of scopes.entries()) {
    const made = expectOk(
      await client.post<typeof NewApiKey.Type>("/api/v1/api-keys", {
        name: `k${n}`,
        ...(scope === undefined ? {} : { scopes: scope }),
      }),
      201,
    )
    others.push(apiClient(platform.url, { tenant_id: credentials.tenant_id, api_key: made.api_key }))
  }
  return { client, others }
}

describe("the order of refusals", () => {
  it("counts requests refused 415 against the rate limits, and answers 429 before 415 past them", async () => {
    const { client: owner, credentials } = await registerTenant(platform.url, "basic")
    const made: string[] = []
    for (const n of [1, 2]) {
      made.push(
        expectOk(await owner.post<typeof NewApiKey.Type>("/api/v1/api-keys", { name: `m${n}` }), 201).api_key,
      )
    }
    const keys = [credentials.api_key, ...made]
    // A body in another charset: a refusal of the request's form (415) found before the credentials
    // are checked, answered after them.
    const otherCharset = (api_key: string) =>
      fetch(`${platform.url}/api/v1/wallets`, {
        method: "POST",
        headers: {
          authorization: `Bearer ${api_key}`,
          "x-tenant-id": credentials.tenant_id,
          "content-type": "application/json; charset=latin1",
        },
        body: "{}",
      }).then(async (response) => ({
        status: response.status,
        body: (await response.json()) as { error: { code: string } },
      }))
    await sleep(2_100)
    const started_ms = Date.now()
    const answers: Array<{ status: number; body: { error: { code: string } } }> = []
    for (let round = 0; round < 4 && !answers.some((a) => a.status === 429); round++) {
      answers.push(
        ...(await Promise.all(Array.from({ length: 450 }, (_, i) => otherCharset(keys[i % 3] as string)))),
      )
    }
    const elapsed_s = (Date.now() - started_ms) / 1000
    const refused415 = answers.filter((a) => a.status === 415).length
    const limited = answers.filter((a) => a.status === 429)
    expect(refused415 + limited.length).toBe(answers.length)
    expect(limited.length).toBeGreaterThan(0)
    expect(refused415).toBeLessThanOrEqual(200 + Math.ceil(elapsed_s * 100))
    expect(limited[0]?.body.error.code).toBe("rate_limited")
  })

  it("answers 403 for a missing scope before 429, even while the tenant is over its rate limit", async () => {
    const { client, others } = await tenantWithKeys([undefined, undefined, ["wallets:read"]])
    const [second, third, reader] = others as [ApiClient, ApiClient, ApiClient]
    const flooding = [client, second, third]
    await sleep(2_100)
    let flood_limited = 0
    const reader_statuses: number[] = []
    for (let round = 0; round < 6 && flood_limited === 0; round++) {
      // The reader's creations are spread through the flood, most of them behind the tenant's burst.
      const requests = Array.from({ length: 480 }, (_, i) =>
        i % 16 === 15
          ? reader.post("/api/v1/wallets", { external_id: `r-${round}-${i}`, label: "x", chain: "ethereum" })
          : flooding[i % 3]?.get("/api/v1/wallets?limit=1"),
      )
      const answers = await Promise.all(requests)
      for (const [i, answer] of answers.entries()) {
        if (answer === undefined) continue
        if (i % 16 === 15) reader_statuses.push(answer.status)
        else if (answer.status === 429) flood_limited++
      }
    }
    expect(flood_limited).toBeGreaterThan(0)
    expect(reader_statuses.length).toBeGreaterThan(0)
    expect(new Set(reader_statuses)).toEqual(new Set([403]))
  })
})
