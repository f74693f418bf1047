// Proves, through the API of the real platform, that the lists kept oldest first (wallets and
// identities) follow the order their items committed: a client that pages on from the last id it
// listed, while other requests create items concurrently, sees every item exactly once. (Listed by
// id, an item whose id was made before a later one's but committed after it was listed was never
// seen by such a client.)
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import type { Identity, Wallet } from "../../src/http/api.ts"
import { expectOk } from "../support/api-expect.ts"
import {
  type ApiClient,
  type RunningPlatform,
  registerTenant,
  startPlatform,
} from "../support/platform-process.ts"

type Page<T> = { readonly data: ReadonlyArray<T>; readonly has_more: boolean }

let platform: RunningPlatform
let client: ApiClient

beforeAll(async () => {
  platform = await startPlatform()
  ;({ client } = await registerTenant(platform.url, "enterprise"))
}, 120_000)

afterAll(async () => {
  await platform?.stop()
})

/**
 * Creates `rounds` rounds of `width` concurrent items while a follower pages on from the last id
 * it listed; answers the ids created, in order of creation answers, and the ids the follower saw,
 * in the order it saw them (each at most once: a repeat fails the test).
 */
const followWhileCreating = async (
  route: string,
  idOf: (item: Record<string, unknown>) => string,
  create: (round: number, slot: number) => Promise<string>,
  rounds = 15,
  width = 8,
) => {
  const seen: Array<string> = []
  let last = ""
  let creating = true
  const readOn = async () => {
    const page = expectOk(
      await client.get<Page<Record<string, unknown>>>(`${route}?limit=100&starting_after=${last}`),
    )
    for (const item of page.data) {
      expect(seen, "no item listed twice").not.toContain(idOf(item))
      seen.push(idOf(item))
    }
    const tail = page.data.at(-1)
    if (tail !== undefined) last = idOf(tail)
    return page.has_more
  }
  const follower = (async () => {
    while (creating) await readOn()
  })()
  const created: Array<string> = []
  try {
    for (let round = 0; round < rounds; round++) {
      created.push(...(await Promise.all(Array.from({ length: width }, (_, slot) => create(round, slot)))))
    }
  } finally {
    creating = false
    await follower
  }
  while (await readOn()) {}
  return { created, seen }
}

describe("lists kept oldest first, followed while items are created", () => {
  it("wallets: every wallet seen once, in the order of their derivation (commit) index", async () => {
    const { created, seen } = await followWhileCreating(
      "/api/v1/wallets",
      (item) => String(item.wallet_id),
      async (round, slot) =>
        expectOk(
          await client.post<typeof Wallet.Type>("/api/v1/wallets", {
            external_id: `follow-${round}-${slot}`,
            label: "follow",
            chain: "ethereum",
          }),
          201,
        ).wallet_id,
    )
    expect(new Set(seen)).toEqual(new Set(created))
    const byIndex = await platform.database.pool.query<{ wallet_id: string }>(
      "select wallet_id from platform.wallets where wallet_id = any($1) order by derivation_index",
      [created],
    )
    expect(seen).toEqual(byIndex.rows.map((row) => row.wallet_id))
  }, 240_000)

  it("identities: every identity seen once", async () => {
    const wallet = expectOk(
      await client.post<typeof Wallet.Type>("/api/v1/wallets", {
        external_id: "identities",
        label: "identities",
        chain: "ethereum",
      }),
      201,
    )
    const { created, seen } = await followWhileCreating(
      "/api/v1/identities",
      (item) => String(item.identity_id),
      async (round, slot) =>
        expectOk(
          await client.post<typeof Identity.Type>("/api/v1/identities", {
            wallet_id: wallet.wallet_id,
            kind: "email",
            value: `follow-${round}-${slot}@example.com`,
          }),
          201,
        ).identity_id,
    )
    expect(new Set(seen)).toEqual(new Set(created))
    expect(seen).toHaveLength(created.length)
  }, 240_000)
})
