// Two platform processes on one database. One Idempotency-Key sent to both at the same moment:
// within a process, duplicates wait for the first; across processes only the database can tell,
// and it does through the stored response: of two transactions storing one key, the second rolls
// back, and its request is answered from what the first stored (a replay of the same request, a
// 409 for another). And an API key revoked, rotated or suspended in one process stops working in
// the other at once (a PostgreSQL notification), not after the other's cache expires. A sandbox
// test event sent to both is one event.
import { randomBytes } from "node:crypto"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import type { Balance, Transaction, Wallet } from "../../src/http/api.ts"
import { expectError, expectOk } from "../support/api-expect.ts"
import { createWallet, withKeyHeldElsewhere } from "../support/api-fixtures.ts"
import {
  type ApiClient,
  type ApiResponse,
  apiClient,
  type Credentials,
  type RunningPlatform,
  registerTenant,
  startPlatform,
} from "../support/platform-process.ts"

let first: RunningPlatform
let second: RunningPlatform
let a: ApiClient
let b: ApiClient
let tenant_id: string

beforeAll(async () => {
  // One key-encryption key for both, as in any deployment of several processes.
  const env = { CUSTODY_KEK: randomBytes(32).toString("hex") }
  first = await startPlatform(env)
  second = await startPlatform(env, { database: first.database })
  const registered = await registerTenant(first.url)
  a = registered.client
  tenant_id = registered.credentials.tenant_id
  b = apiClient(second.url, registered.credentials satisfies Credentials)
  expectOk(
    await a.post("/api/v1/wallets", { external_id: "default", label: "default", chain: "ethereum" }),
    201,
  )
}, 120_000)
afterAll(async () => {
  await second?.stop()
  await first?.stop()
})

const rounds = 12

const walletsWith = async (external_id: string) =>
  expectOk(
    await a.get<{ data: Array<typeof Wallet.Type> }>(
      `/api/v1/wallets?external_id=${encodeURIComponent(external_id)}&limit=100`,
    ),
  ).data

describe("one Idempotency-Key in two processes at once", () => {
  it("the same request takes effect once, and both answers name that one effect", async () => {
    for (let round = 0; round < rounds; round += 1) {
      const external_id = `same-${round}`
      const body = { external_id, label: external_id, chain: "ethereum" }
      const headers = { "idempotency-key": `same-key-${round}` }
      const answers = await Promise.all([
        a.post<typeof Wallet.Type>("/api/v1/wallets", body, headers),
        b.post<typeof Wallet.Type>("/api/v1/wallets", body, headers),
      ])
      expect(answers.map((answer) => answer.status)).toEqual([201, 201])
      const created = await walletsWith(external_id)
      expect(created).toHaveLength(1)
      expect(answers.map((answer) => answer.body.wallet_id)).toEqual([
        created[0]?.wallet_id,
        created[0]?.wallet_id,
      ])
      // Exactly one of the two is marked as the replay it is.
      expect(answers.filter((answer) => answer.headers.get("idempotent-replayed") === "true")).toHaveLength(1)
    }
  })

  it("two different requests: one takes effect, the other is a 409 that changed nothing", async () => {
    const hooks = async () =>
      expectOk(await a.get<{ data: Array<{ url: string }> }>("/api/v1/webhooks?limit=100")).data
    for (let round = 0; round < rounds; round += 1) {
      const external_id = `cross-${round}`
      const url = `http://127.0.0.1:9/cross-${round}`
      const headers = { "idempotency-key": `cross-key-${round}` }
      const [wallet, webhook] = await Promise.all([
        a.post("/api/v1/wallets", { external_id, label: external_id, chain: "ethereum" }, headers),
        b.post(
          "/api/v1/webhooks",
          { url, events: ["payment.completed"], secret: "whsec_cross_test_secret" },
          headers,
        ),
      ])
      expect([wallet.status, webhook.status].sort()).toEqual([201, 409])
      const refused = wallet.status === 409 ? wallet : webhook
      expect(refused.body).toMatchObject({ error: { code: "idempotency_key_reused" } })
      const effects =
        (await walletsWith(external_id)).length + (await hooks()).filter((h) => h.url === url).length
      expect(effects).toBe(1)
    }
  })
  it("a sandbox test event sent to both: one event, and both answers name it", async () => {
    const events = async () =>
      Number(
        (
          await first.database.pool.query<{ n: string }>(
            "select count(*) as n from platform.webhook_events where tenant_id = $1",
            [tenant_id],
          )
        ).rows[0]?.n,
      )
    for (let round = 0; round < rounds; round += 1) {
      const before = await events()
      const headers = { "idempotency-key": `simulate-${round}` }
      const body = { event_type: "payment.completed" }
      const answers = await Promise.all([
        a.post<{ event_id: string }>("/api/v1/sandbox/webhooks/simulate", body, headers),
        b.post<{ event_id: string }>("/api/v1/sandbox/webhooks/simulate", body, headers),
      ])
      expect(answers.map((answer) => answer.status)).toEqual([202, 202])
      expect(answers[0]?.body.event_id).toBe(answers[1]?.body.event_id)
      expect((await events()) - before).toBe(1)
    }
  })

  it("a registration sent to both: one tenant, and both answers carry its key", async () => {
    for (let round = 0; round < 4; round += 1) {
      const body = {
        email: `twice-${round}-${Date.now()}@example.com`,
        password: "correct horse battery staple",
        company_name: "Twice",
        plan: "basic",
      }
      const headers = { "idempotency-key": `register-${round}` }
      const answers = await Promise.all([
        apiClient(first.url).post<Credentials>("/api/tenant/register", body, headers),
        apiClient(second.url).post<Credentials>("/api/tenant/register", body, headers),
      ])
      // The loser met the winner's e-mail as a conflict; it is answered from the stored response.
      expect(answers.map((answer) => answer.status)).toEqual([201, 201])
      expect(answers[0]?.body).toEqual(answers[1]?.body)
      const credentials = answers[0]?.body as Credentials
      expectOk(await apiClient(second.url, credentials).get("/api/v1/wallets"))
    }
  })
})

describe("one Idempotency-Key, one process, two operations in turn", () => {
  it("a request fingerprinted plainly, after one whose fingerprint is keyed (a webhook's), is a 409", async () => {
    const headers = { "idempotency-key": "after-sealed" }
    expectOk(
      await a.post(
        "/api/v1/webhooks",
        {
          url: "http://127.0.0.1:9/after-sealed",
          events: ["payment.completed"],
          secret: "whsec_after_sealed",
        },
        headers,
      ),
      201,
    )
    const wallet = await a.post(
      "/api/v1/wallets",
      { external_id: "after-sealed", label: "after-sealed", chain: "ethereum" },
      headers,
    )
    expect(wallet.status).toBe(409)
    expect(wallet.body).toMatchObject({ error: { code: "idempotency_key_reused" } })
    expect(await walletsWith("after-sealed")).toHaveLength(0)
  })
})

describe("a payment whose key another request stores while the payment is being written", () => {
  it("is rolled back and answered 409; a payment batched with it commits", async () => {
    const { client, credentials } = await registerTenant(first.url)
    const wallet = async (external_id: string) =>
      (await createWallet(client, "ethereum", external_id)).wallet_id
    const payer = await wallet("payer")
    const payee = await wallet("payee")
    expectOk(await client.post("/api/v1/sandbox/faucet", { wallet_id: payer, token: "USDC", amount: "100" }))
    expectOk(
      await client.post("/api/v1/identities", {
        wallet_id: payee,
        kind: "email",
        value: "payee@example.com",
      }),
      201,
    )
    const pay = (key: string, amount: string) =>
      client.post<typeof Transaction.Type>(
        "/api/social-payments/pay",
        { recipient: "payee@example.com", amount, token: "USDC", from_wallet: payer },
        { "idempotency-key": key },
      )
    // Another request's transaction holds the key, not yet committed: the payment finds no stored
    // response, is decided, and its transaction waits on the key's row; a bystander pays meanwhile.
    let bystander: ReturnType<typeof pay> | undefined
    const lost = await withKeyHeldElsewhere(
      first.database.pool,
      credentials.tenant_id,
      "contested",
      async (headers) => {
        const contested = client.post<typeof Transaction.Type>(
          "/api/social-payments/pay",
          { recipient: "payee@example.com", amount: "5", token: "USDC", from_wallet: payer },
          headers,
        )
        await new Promise((resolve) => setTimeout(resolve, 300))
        bystander = pay("bystander", "7")
        return await contested
      },
      600,
    )
    const kept = await (bystander as ReturnType<typeof pay>)
    expect(lost.status).toBe(409)
    expect(lost.body).toMatchObject({ error: { code: "idempotency_key_reused" } })
    expect(kept.status).toBe(200)
    expect(kept.body).toMatchObject({ status: "completed", amount: "7.00" })
    // Only the bystander moved money: 100 - 7 - 0.3 % fee.
    const balance = expectOk(await client.get<typeof Balance.Type>(`/api/v1/wallets/${payer}/balance`))
    expect(balance.tokens.find((token) => token.token === "USDC")?.amount).toBe("92.979")
    const listed = expectOk(
      await client.get<{ data: Array<typeof Transaction.Type> }>(`/api/v1/transactions?wallet_id=${payer}`),
    ).data
    expect(listed.map((payment) => payment.amount)).toEqual(["7.00"])
    // The key keeps the other request's response.
    expect((await pay("contested", "5")).status).toBe(409)
  })
})

describe("a default wallet, a revocation or a reconciliation run whose key another request stores meanwhile", () => {
  it("is answered from that request's stored response (409 for another request), and the change is rolled back", async () => {
    const { client, credentials } = await registerTenant(first.url)
    const first_wallet = await createWallet(client, "ethereum", "first")
    const other_wallet = await createWallet(client, "ethereum", "other")
    const key = expectOk(
      await client.post<{ key_id: string }>("/api/v1/api-keys", { scopes: ["wallets:read"] }),
      201,
    )
    const contested = (
      idempotency_key: string,
      send: (headers: Record<string, string>) => Promise<ApiResponse>,
    ) => withKeyHeldElsewhere(first.database.pool, credentials.tenant_id, idempotency_key, send)
    expectError(
      await contested("contested-default", (headers) =>
        client.post(`/api/v1/wallets/${other_wallet.wallet_id}/default`, {}, headers),
      ),
      409,
      "idempotency_key_reused",
    )
    const wallets = expectOk(await client.get<{ data: Array<typeof Wallet.Type> }>("/api/v1/wallets")).data
    expect(wallets.filter((wallet) => wallet.is_default).map((wallet) => wallet.wallet_id)).toEqual([
      first_wallet.wallet_id,
    ])
    expectError(
      await contested("contested-revoke", (headers) =>
        client.post(`/api/v1/api-keys/${key.key_id}/revoke`, {}, headers),
      ),
      409,
      "idempotency_key_reused",
    )
    const keys = expectOk(
      await client.get<{ data: Array<{ key_id: string; status: string }> }>("/api/v1/api-keys"),
    ).data
    expect(keys.find((listed) => listed.key_id === key.key_id)?.status).toBe("active")
    expectError(
      await contested("contested-run", (headers) => client.post("/api/v2/reconciliation/runs", {}, headers)),
      409,
      "idempotency_key_reused",
    )
  })
})

describe("an API key changed in one process", () => {
  const settle = () => new Promise((resolve) => setTimeout(resolve, 100))

  it("stops working in the other at once when revoked, not when the other's cached lookup expires", async () => {
    const { client, credentials } = await registerTenant(first.url)
    const key = expectOk(
      await client.post<{ key_id: string; api_key: string }>("/api/v1/api-keys", {
        scopes: ["wallets:read"],
      }),
      201,
    )
    const there = apiClient(second.url, { tenant_id: credentials.tenant_id, api_key: key.api_key })
    // Looked up, and cached, by the second process.
    expectOk(await there.get("/api/v1/wallets"))
    expectOk(await client.post(`/api/v1/api-keys/${key.key_id}/revoke`, {}))
    await settle()
    expectError(await there.get("/api/v1/wallets"), 401, "api_key_revoked")
  })

  it("is known as rotated in the other at once: it manages no keys there either", async () => {
    const { client, credentials } = await registerTenant(first.url)
    const key = expectOk(
      await client.post<{ key_id: string; api_key: string }>("/api/v1/api-keys", {
        scopes: ["wallets:read", "keys:manage"],
      }),
      201,
    )
    const there = apiClient(second.url, { tenant_id: credentials.tenant_id, api_key: key.api_key })
    expectOk(await there.get("/api/v1/api-keys"))
    expectOk(await client.post(`/api/v1/api-keys/${key.key_id}/rotate`, { grace_period_seconds: 600 }))
    await settle()
    expectOk(await there.get("/api/v1/wallets"))
    expectError(
      await there.post("/api/v1/api-keys", { scopes: ["wallets:read"] }),
      403,
      "api_key_rotated_out",
    )
  })
})
