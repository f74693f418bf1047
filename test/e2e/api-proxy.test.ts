// Behind a proxy (TRUSTED_PROXY_HOPS=1) the platform tells clients apart by X-Forwarded-For, the
// entry the proxy appended: one client's refused keys use up its own budget, not every client's
// (all of whom reach the platform from the proxy's address); entries the client wrote itself are
// not trusted. Without the setting, the socket's address is the client, whatever the header says.
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { expectError } from "../support/api-expect.ts"
import {
  type ApiResponse,
  apiClient,
  type RunningPlatform,
  startPlatform,
} from "../support/platform-process.ts"

let platform: RunningPlatform

beforeAll(async () => {
  platform = await startPlatform({ TRUSTED_PROXY_HOPS: "1" })
}, 120_000)
afterAll(async () => {
  await platform?.stop()
})

const guess = (index: number, forwarded: string) =>
  apiClient(platform.url, {
    tenant_id: `ten_guess${index}`,
    api_key: `sk_sandbox_${index}_${Math.random().toString(36).slice(2)}`,
  }).get("/api/v1/wallets", { "x-forwarded-for": forwarded })

/** Guesses from `forwarded` until one is refused 429 (the budget: 20/s, burst 40). */
const exhaust = async (forwarded: string, from: number): Promise<ApiResponse | undefined> => {
  for (let round = 0; round < 40; round++) {
    const answers = await Promise.all(
      Array.from({ length: 10 }, (_, i) => guess(from + round * 10 + i, forwarded)),
    )
    const limited = answers.find((answer) => answer.status === 429)
    if (limited !== undefined) return limited
  }
  return undefined
}

describe("the refused-keys budget behind a trusted proxy", () => {
  it("is one client's, by the address the proxy appended to X-Forwarded-For", async () => {
    const limited = await exhaust("203.0.113.7", 0)
    expectError(limited as ApiResponse, 429, "rate_limited")
    // A client cannot pose as another by writing entries of its own in front of the proxy's: its
    // guesses still draw on its own spent budget (a burst, past what refills meanwhile).
    const posing = await Promise.all(
      Array.from({ length: 40 }, (_, i) => guess(800 + i, "198.51.100.9, 203.0.113.7")),
    )
    expect(posing.some((answer) => answer.status === 429)).toBe(true)
    // Another client behind the same proxy still gets its keys looked up.
    expect((await guess(900, "198.51.100.9")).status).toBe(401)
  })
})
