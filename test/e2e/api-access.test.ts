// Proves who may do what through the Platform API, over HTTP against the real platform process:
// tenants never see or touch each other's resources and never share a rate limit; API keys are
// scoped, rotate with a grace period and revoke at once; production credentials need a verified
// tenant and a production ledger that shares nothing with the sandbox; lists page by cursor.
import * as net from "node:net"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import type {
  ApiKey,
  Balance,
  Identity,
  NewApiKey,
  Tenant,
  Transaction,
  Wallet,
  Webhook,
} from "../../src/http/api.ts"
import { expectError, expectOk, requestIdOf } from "../support/api-expect.ts"
import { createWallet } from "../support/api-fixtures.ts"
import {
  type ApiClient,
  type ApiResponse,
  apiClient,
  type Credentials,
  type RunningPlatform,
  registerTenant,
  startPlatform,
} from "../support/platform-process.ts"

type WalletView = typeof Wallet.Type
type BalanceView = typeof Balance.Type
type IdentityView = typeof Identity.Type
type TransactionView = typeof Transaction.Type
type WebhookView = typeof Webhook.Type
type KeyView = typeof ApiKey.Type
type NewKeyView = typeof NewApiKey.Type
type TenantView = typeof Tenant.Type
interface Page<T> {
  readonly data: ReadonlyArray<T>
  readonly has_more: boolean
  readonly next_cursor: string | null
}

let platform: RunningPlatform
beforeAll(async () => {
  platform = await startPlatform()
})
afterAll(async () => {
  await platform?.stop()
})

/** Sends `request` as raw bytes and reads the whole answer (the server closes the connection). */
const rawExchange = (request: string) =>
  new Promise<{ status: number; headers: string; body: unknown }>((resolve, reject) => {
    const { port } = new URL(platform.url)
    const socket = net.connect(Number(port), "127.0.0.1")
    const chunks: Array<Buffer> = []
    socket.on("data", (chunk) => chunks.push(chunk))
    socket.on("error", reject)
    socket.on("close", () => {
      const [head = "", body = ""] = Buffer.concat(chunks).toString("utf8").split("\r\n\r\n")
      resolve({ status: Number(head.split(" ")[1]), headers: head.toLowerCase(), body: JSON.parse(body) })
    })
    socket.write(request)
  })

const fund = async (api: ApiClient, wallet_id: string, amount: string) =>
  expectOk(await api.post<BalanceView>("/api/v1/sandbox/faucet", { wallet_id, token: "USDC", amount }))

const usdcOf = async (api: ApiClient, wallet_id: string) => {
  const tokens = expectOk(await api.get<BalanceView>(`/api/v1/wallets/${wallet_id}/balance`)).tokens
  const usdc = tokens.find((t) => t.token === "USDC")
  return { amount: usdc?.amount, reserved: usdc?.reserved }
}

const createKey = async (api: ApiClient, body: Record<string, unknown>) =>
  expectOk(await api.post<NewKeyView>("/api/v1/api-keys", body), 201)

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms))

// --- 4. tenant isolation ----------------------------------------------------------------------

describe("tenant isolation", () => {
  let a: { client: ApiClient; credentials: Credentials }
  let b: { client: ApiClient; credentials: Credentials }

  beforeAll(async () => {
    a = await registerTenant(platform.url, "basic")
    b = await registerTenant(platform.url, "basic")
  })

  it("answers 404 to tenant B for every resource of tenant A, never lists A's items to B, and leaves A's resources untouched", async () => {
    const payer = await createWallet(a.client, "ethereum", "a-payer")
    const payee = await createWallet(a.client, "ethereum", "a-payee")
    await fund(a.client, payer.wallet_id, "100")
    const identity = expectOk(
      await a.client.post<IdentityView>("/api/v1/identities", {
        wallet_id: payee.wallet_id,
        kind: "email",
        value: "a-payee@example.com",
      }),
      201,
    )
    const paid = expectOk(
      await a.client.post<TransactionView>("/api/social-payments/pay", {
        recipient: "a-payee@example.com",
        amount: "10",
        token: "USDC",
      }),
    )
    const hook = expectOk(
      await a.client.post<WebhookView>("/api/v1/webhooks", {
        url: "http://127.0.0.1:9/a",
        events: ["wallet.created"],
        secret: "a-secret-0123456789",
      }),
      201,
    )
    const own = await createWallet(b.client, "ethereum", "b-wallet")
    await fund(b.client, own.wallet_id, "100")

    const attempts: ReadonlyArray<readonly [string, () => Promise<ApiResponse>, string]> = [
      ["get wallet", () => b.client.get(`/api/v1/wallets/${payer.wallet_id}`), "wallet_not_found"],
      ["balance", () => b.client.get(`/api/v1/wallets/${payer.wallet_id}/balance`), "wallet_not_found"],
      ["make default", () => b.client.post(`/api/v1/wallets/${payer.wallet_id}/default`), "wallet_not_found"],
      [
        "get identity",
        () => b.client.get(`/api/v1/identities/${identity.identity_id}`),
        "identity_not_found",
      ],
      ["unlink", () => b.client.delete(`/api/v1/identities/${identity.identity_id}`), "identity_not_found"],
      [
        "link to A's wallet",
        () =>
          b.client.post("/api/v1/identities", {
            wallet_id: payee.wallet_id,
            kind: "email",
            value: "b@example.com",
          }),
        "wallet_not_found",
      ],
      [
        "get transaction",
        () => b.client.get(`/api/v1/transactions/${paid.transaction_id}`),
        "transaction_not_found",
      ],
      [
        "transactions of A's wallet",
        () => b.client.get(`/api/v1/transactions?wallet_id=${payer.wallet_id}`),
        "wallet_not_found",
      ],
      [
        "identities of A's wallet",
        () => b.client.get(`/api/v1/identities?wallet_id=${payee.wallet_id}`),
        "wallet_not_found",
      ],
      ["get webhook", () => b.client.get(`/api/v1/webhooks/${hook.webhook_id}`), "webhook_not_found"],
      [
        "update webhook",
        () => b.client.patch(`/api/v1/webhooks/${hook.webhook_id}`, { enabled: false }),
        "webhook_not_found",
      ],
      ["delete webhook", () => b.client.delete(`/api/v1/webhooks/${hook.webhook_id}`), "webhook_not_found"],
      [
        "deliveries",
        () => b.client.get(`/api/v1/webhooks/${hook.webhook_id}/deliveries`),
        "webhook_not_found",
      ],
      [
        "simulate to A's webhook",
        () =>
          b.client.post("/api/v1/sandbox/webhooks/simulate", {
            event_type: "wallet.created",
            webhook_id: hook.webhook_id,
          }),
        "webhook_not_found",
      ],
      [
        "faucet to A's wallet",
        () =>
          b.client.post("/api/v1/sandbox/faucet", { wallet_id: payer.wallet_id, token: "USDC", amount: "5" }),
        "wallet_not_found",
      ],
      [
        "pay from A's wallet",
        () =>
          b.client.post("/api/social-payments/pay", {
            recipient: "+14155550199",
            amount: "1",
            token: "USDC",
            from_wallet: payer.wallet_id,
          }),
        "wallet_not_found",
      ],
    ]
    for (const [what, attempt, code] of attempts) {
      const response = await attempt()
      expect({ what, status: response.status }).toEqual({ what, status: 404 })
      expectError(response, 404, code)
    }

    const lists = [
      "/api/v1/wallets",
      "/api/v1/identities",
      "/api/v1/transactions",
      "/api/v1/webhooks",
      "/api/v2/deposits",
    ]
    const aIds = [
      payer.wallet_id,
      payee.wallet_id,
      identity.identity_id,
      paid.transaction_id,
      hook.webhook_id,
    ]
    for (const route of lists) {
      const text = JSON.stringify(expectOk(await b.client.get(`${route}?limit=100`)))
      for (const id of aIds) expect(text, `${route} of B`).not.toContain(id)
    }
    expect(
      expectOk(await b.client.get<Page<WalletView>>("/api/v1/wallets")).data.map((w) => w.wallet_id),
    ).toEqual([own.wallet_id])

    // A's resources are as they were.
    expect(await usdcOf(a.client, payer.wallet_id)).toEqual({ amount: "89.97", reserved: "0.00" })
    expect(await usdcOf(a.client, payee.wallet_id)).toEqual({ amount: "10.00", reserved: "0.00" })
    expect(await usdcOf(b.client, own.wallet_id)).toEqual({ amount: "100.00", reserved: "0.00" })
    expect(
      expectOk(await a.client.get<IdentityView>(`/api/v1/identities/${identity.identity_id}`)).status,
    ).toBe("linked")
    expect(expectOk(await a.client.get<WebhookView>(`/api/v1/webhooks/${hook.webhook_id}`)).enabled).toBe(
      true,
    )
    expect(expectOk(await a.client.get<WalletView>(`/api/v1/wallets/${payer.wallet_id}`)).is_default).toBe(
      true,
    )
  })

  it("refuses B's key presented with A's X-Tenant-Id with 401", async () => {
    const crossed = apiClient(platform.url, {
      tenant_id: a.credentials.tenant_id,
      api_key: b.credentials.api_key,
    })
    const refused = await crossed.get("/api/v1/wallets")
    expectError(refused, 401, "invalid_api_key")
    // Every 401 names the scheme that authenticates.
    expect(refused.headers.get("www-authenticate")).toBe('Bearer realm="api"')
    expectError(await crossed.get("/api/v1/tenant"), 401, "invalid_api_key")
    const anonymous = await apiClient(platform.url).get("/api/v1/tenant")
    expectError(anonymous, 401, "missing_api_key")
    expect(anonymous.headers.get("www-authenticate")).toBe('Bearer realm="api"')
    // Health checks take any query string (a probe's cache buster).
    expectOk(await apiClient(platform.url).get("/health?probe=1"))
  })

  it("throttles tenant A with 429 rate_limited and Retry-After while B, on the same plan at the same time, is never throttled", async () => {
    // basic: 100/s per tenant (burst 200), 50/s per key (burst 100). Three keys of A can offer 300
    // requests at once, so the tenant's bucket is what refuses them.
    const aKeys = [
      a.client,
      ...(await Promise.all(
        [1, 2].map(async (n) => {
          const key = await createKey(a.client, { name: `burst-${n}` })
          return apiClient(platform.url, { tenant_id: a.credentials.tenant_id, api_key: key.api_key })
        }),
      )),
    ]
    await sleep(2_100) // every bucket refills to its burst
    const burst = () =>
      Promise.all(Array.from({ length: 450 }, (_, i) => aKeys[i % 3]?.get("/api/v1/wallets?limit=1")))
    const started_ms = Date.now()
    const [firstBurst, bResponses] = await Promise.all([
      burst(),
      Promise.all(Array.from({ length: 60 }, () => b.client.get("/api/v1/wallets?limit=1"))),
    ])
    // A host slow enough to take 2.5 s over the first 450 lets the bucket refill them all; A then
    // keeps going at once, as a client that overruns its limit would, until it is refused.
    const aResponses = [...firstBurst]
    for (let round = 1; round < 6 && !aResponses.some((r) => r?.status === 429); round++) {
      aResponses.push(...(await burst()))
    }
    const elapsed_s = (Date.now() - started_ms) / 1000
    const aOk = aResponses.filter((r) => r?.status === 200).length
    const limited = aResponses.filter((r) => r?.status === 429)
    expect(aOk + limited.length).toBe(aResponses.length)
    expect(limited.length).toBeGreaterThan(0)
    // No more than the tenant's burst plus what refilled meanwhile.
    expect(aOk).toBeGreaterThanOrEqual(200)
    expect(aOk).toBeLessThanOrEqual(200 + Math.ceil(elapsed_s * 100))
    for (const response of limited) {
      if (response === undefined) continue
      const error = expectError(response, 429, "rate_limited")
      expect(error.type).toBe("rate_limit_error")
      expect(response.headers.get("retry-after")).toMatch(/^[1-9][0-9]*$/)
    }
    expect(bResponses.map((r) => r.status)).toEqual(Array(60).fill(200))
    for (const response of bResponses) requestIdOf(response)

    const retry_after_s = Number(limited[0]?.headers.get("retry-after"))
    await sleep(retry_after_s * 1000)
    expectOk(await a.client.get("/api/v1/wallets?limit=1"))
  })

  it("keeps a tenant's production out of its sandbox's throttling: one bucket per environment", async () => {
    const { client: sandbox, credentials } = await registerTenant(platform.url, "basic")
    expectOk(
      await sandbox.post("/api/v1/tenant/verification", {
        legal_name: "Acme Payments GmbH",
        registration_number: "HRB 12345",
        country: "DE",
        representative: { name: "Ada Example", country: "DE" },
      }),
    )
    const live = await createKey(sandbox, { environment: "production" })
    const production = apiClient(platform.url, { tenant_id: credentials.tenant_id, api_key: live.api_key })
    const keys = [
      sandbox,
      ...(await Promise.all(
        [1, 2, 3].map(async (n) => {
          const key = await createKey(sandbox, { name: `sandbox-burst-${n}` })
          return apiClient(platform.url, { tenant_id: credentials.tenant_id, api_key: key.api_key })
        }),
      )),
    ]
    await sleep(2_100)
    // Four sandbox keys offer 400 requests at once, past the tenant's sandbox burst of 200.
    // Production asks alongside each round, after the sandbox's requests were sent.
    let refused = 0
    for (let round = 0; round < 6 && refused === 0; round++) {
      const sandboxed = Array.from({ length: 400 }, (_, i) => keys[i % 4]?.get("/api/v1/wallets?limit=1"))
      const live_answers = Array.from({ length: 5 }, () => production.get("/api/v1/wallets?limit=1"))
      const answers = await Promise.all(sandboxed)
      refused = answers.filter((answer) => answer?.status === 429).length
      for (const answer of await Promise.all(live_answers)) expectOk(answer)
    }
    expect(refused).toBeGreaterThan(0)
  })
})

// --- 7. API keys ------------------------------------------------------------------------------

describe("API keys", () => {
  let owner: { client: ApiClient; credentials: Credentials }
  const as = (api_key: string) => apiClient(platform.url, { tenant_id: owner.credentials.tenant_id, api_key })

  beforeAll(async () => {
    owner = await registerTenant(platform.url)
  })

  it("limits a key to its scopes: outside them every endpoint is 403 insufficient_scope", async () => {
    const key = await createKey(owner.client, { scopes: ["wallets:read"], name: "reader" })
    expect(key).toMatchObject({
      environment: "sandbox",
      scopes: ["wallets:read"],
      name: "reader",
      status: "active",
      expires_at: null,
      revoked_at: null,
    })
    expect(key.api_key).toMatch(/^sk_sandbox_[A-Za-z0-9_-]{43}$/)
    const reader = as(key.api_key)
    expectOk(await reader.get("/api/v1/wallets"))
    expectError(
      await reader.post("/api/v1/wallets", { external_id: "x", label: "x", chain: "ethereum" }),
      403,
      "insufficient_scope",
    )
    expectError(await reader.get("/api/v1/transactions"), 403, "insufficient_scope")
    expectError(
      await reader.post("/api/social-payments/pay", { recipient: "+14155550100", amount: 1, token: "USDC" }),
      403,
      "insufficient_scope",
    )
    expectError(await reader.get("/api/v1/api-keys"), 403, "insufficient_scope")
    expectError(await reader.post("/api/v1/api-keys", {}), 403, "insufficient_scope")
    expectError(await reader.get("/api/v1/tenant"), 403, "insufficient_scope")
    expectError(await reader.get("/api/v1/webhooks"), 403, "insufficient_scope")
    expectError(
      await owner.client.post("/api/v1/api-keys", { scopes: ["wallets:fly"] }),
      400,
      "invalid_scope",
    )
  })

  it("rotates a key: the new key works, the old one too for its 2-second grace period, then 401 api_key_expired", async () => {
    const old = await createKey(owner.client, { name: "rotating" })
    const sent_ms = Date.now()
    const rotated = expectOk(
      await owner.client.post<{ new_key: NewKeyView; old_key: KeyView }>(
        `/api/v1/api-keys/${old.key_id}/rotate`,
        {
          grace_period_seconds: 5,
        },
      ),
    )
    const rotated_ms = Date.now()
    expect(rotated.old_key).toMatchObject({ key_id: old.key_id, status: "expiring" })
    // The grace period runs from the rotation, made while the request was in flight (two clocks of
    // one machine: allow 100 ms of skew).
    const expires_ms = Date.parse(rotated.old_key.expires_at ?? "")
    expect(expires_ms).toBeGreaterThanOrEqual(sent_ms + 5_000 - 100)
    expect(expires_ms).toBeLessThanOrEqual(rotated_ms + 5_000 + 100)
    expect(rotated.new_key).toMatchObject({ name: "rotating", scopes: old.scopes, status: "active" })
    expect(rotated.new_key.api_key).not.toBe(old.api_key)

    expectOk(await as(rotated.new_key.api_key).get("/api/v1/wallets"))
    expectOk(await as(old.api_key).get("/api/v1/wallets"))
    await sleep(Math.max(0, rotated_ms + 6_000 - Date.now()))
    expectError(await as(old.api_key).get("/api/v1/wallets"), 401, "api_key_expired")
    expectOk(await as(rotated.new_key.api_key).get("/api/v1/wallets"))
    const listed = expectOk(await owner.client.get<{ data: ReadonlyArray<KeyView> }>("/api/v1/api-keys")).data
    expect(listed.find((k) => k.key_id === old.key_id)?.status).toBe("expired")
    expect(JSON.stringify(listed)).not.toContain(old.api_key)
  })

  it("revokes a key at once: its next request is 401 api_key_revoked", async () => {
    const key = await createKey(owner.client, { name: "doomed" })
    const doomed = as(key.api_key)
    expectOk(await doomed.get("/api/v1/wallets"))
    const revoked = expectOk(await owner.client.post<KeyView>(`/api/v1/api-keys/${key.key_id}/revoke`))
    expect(revoked).toMatchObject({ key_id: key.key_id, status: "revoked" })
    expect(revoked.revoked_at).not.toBeNull()
    expectError(await doomed.get("/api/v1/wallets"), 401, "api_key_revoked")
    expectError(await doomed.post("/api/v1/api-keys", {}), 401, "api_key_revoked")
  })

  it("puts X-Request-Id on every response, echoing a client's own", async () => {
    const echoed = await owner.client.get("/api/v1/wallets", { "x-request-id": "client-trace-0001" })
    expect(requestIdOf(echoed)).toBe("client-trace-0001")
    const responses = [
      await owner.client.get("/api/v1/wallets"),
      await apiClient(platform.url).get("/health"),
      await apiClient(platform.url).get("/api/v1/wallets"),
      await owner.client.get("/api/v1/wallets/wal_00000000000000000000000000000000"),
    ]
    expect(responses.map((r) => r.status)).toEqual([200, 200, 401, 404])
    const ids = responses.map(requestIdOf)
    expect(new Set(ids).size).toBe(ids.length)
  })
})

// --- 8. KYC and environments ------------------------------------------------------------------

describe("a key passes on only its own scopes", () => {
  it("creates keys with at most the creating key's scopes, and rotates or revokes only keys whose scopes it holds", async () => {
    const owner = await registerTenant(platform.url)
    const manager = await createKey(owner.client, {
      scopes: ["keys:manage", "wallets:read"],
      name: "manager",
    })
    const limited = apiClient(platform.url, {
      tenant_id: owner.credentials.tenant_id,
      api_key: manager.api_key,
    })
    // Without scopes, the new key gets the creating key's own, not every scope.
    const inherited = await createKey(limited, {})
    expect([...inherited.scopes].sort()).toEqual(["keys:manage", "wallets:read"])
    expect((await createKey(limited, { scopes: ["wallets:read"] })).scopes).toEqual(["wallets:read"])
    const escalation = expectError(
      await limited.post("/api/v1/api-keys", { scopes: ["keys:manage", "payments:write"] }),
      403,
      "scope_not_held",
    )
    expect(escalation.message).toContain("payments:write")
    // The owner's key has every scope: the limited key may not rotate it into a successor.
    const keys_before = expectOk(
      await owner.client.get<{ data: ReadonlyArray<{ key_id: string; scopes: ReadonlyArray<string> }> }>(
        "/api/v1/api-keys?limit=100",
      ),
    ).data
    const owner_key = keys_before.find((key) => key.scopes.length > 2)
    expect(owner_key).toBeDefined()
    expectError(await limited.post(`/api/v1/api-keys/${owner_key?.key_id}/rotate`, {}), 403, "scope_not_held")
    // Nor revoke it.
    expectError(await limited.post(`/api/v1/api-keys/${owner_key?.key_id}/revoke`), 403, "scope_not_held")
    const after = expectOk(
      await owner.client.get<{ data: ReadonlyArray<{ key_id: string; status: string }> }>(
        "/api/v1/api-keys?limit=100",
      ),
    ).data
    expect(after).toHaveLength(keys_before.length)
    expect(after.find((key) => key.key_id === owner_key?.key_id)?.status).toBe("active")
    // Its own kind of key it rotates.
    expectOk(await limited.post(`/api/v1/api-keys/${inherited.key_id}/rotate`, {}))
  })
})

describe("verification and the production environment", () => {
  it("leaves production to the sandbox keys of a tenant whose production keys cannot manage it, so it never locks itself out", async () => {
    const { client: sandbox } = await registerTenant(platform.url)
    const submission = {
      legal_name: "Least Privilege Ltd",
      registration_number: "HRB 4321",
      country: "DE",
      representative: { name: "Ada Example", country: "DE" },
    }
    expectOk(await sandbox.post("/api/v1/tenant/verification", submission))
    const limited = expectOk(
      await sandbox.post<{ key_id: string }>("/api/v1/api-keys", {
        environment: "production",
        scopes: ["wallets:read"],
      }),
      201,
    )
    // No production key may manage keys or the verification: the sandbox key still does both.
    const rejected = await sandbox.post<TenantView>("/api/v1/tenant/verification", {
      ...submission,
      registration_number: "HRB 0000",
    })
    expect(expectOk(rejected).verification.status).toBe("rejected")
    expect(
      expectOk(await sandbox.post<TenantView>("/api/v1/tenant/verification", submission)).verification.status,
    ).toBe("verified")
    expect(
      expectOk(await sandbox.post<{ status: string }>(`/api/v1/api-keys/${limited.key_id}/revoke`, {}))
        .status,
    ).toBe("revoked")
  })

  describe("a production key whose secret the tenant does not hold", () => {
    const submission = {
      legal_name: "Lost Key GmbH",
      registration_number: "HRB 4242",
      country: "DE",
      representative: { name: "Ada Example", country: "DE" },
    }
    const verifiedTenant = async () => {
      const registered = await registerTenant(platform.url)
      expectOk(await registered.client.post("/api/v1/tenant/verification", submission))
      return registered
    }
    const production = async (sandbox: ApiClient) =>
      expectOk(await sandbox.post<NewKeyView>("/api/v1/api-keys", { environment: "production" }), 201)

    it("keeps the sandbox keys out for 24 hours unused, then leaves it to them to revoke it or make another", async () => {
      const { client: sandbox, credentials } = await verifiedTenant()
      // Its answer lost on the way back: the key was never sent.
      const lost = await production(sandbox)
      const revoke = () => sandbox.post(`/api/v1/api-keys/${lost.key_id}/revoke`, {})
      expectError(await revoke(), 403, "production_key_required")
      expectError(
        await sandbox.post("/api/v1/api-keys", { environment: "production" }),
        403,
        "production_key_required",
      )
      // Past the 24 hours its answer may be replayed, never used: the sandbox key revokes it and makes another.
      await platform.database.pool.query(
        "update platform.api_keys set created_at = created_at - interval '24 hours 1 minute' where key_id = $1",
        [lost.key_id],
      )
      expect(expectOk(await sandbox.post<KeyView>(`/api/v1/api-keys/${lost.key_id}/revoke`, {})).status).toBe(
        "revoked",
      )
      const next = await production(sandbox)
      // One that was used (its secret arrived) keeps the sandbox keys out however old it is.
      expectOk(await sandbox.as({ ...credentials, api_key: next.api_key }).get("/api/v1/wallets"))
      await platform.database.pool.query(
        "update platform.api_keys set created_at = created_at - interval '30 days' where key_id = $1",
        [next.key_id],
      )
      expectError(
        await sandbox.post("/api/v1/api-keys", { environment: "production" }),
        403,
        "production_key_required",
      )
    })

    it("leaves a rotation's successor whose secret was lost to the sandbox keys after 24 hours unused", async () => {
      const { client: sandbox, credentials } = await verifiedTenant()
      const only = await production(sandbox)
      const live = sandbox.as({ ...credentials, api_key: only.api_key })
      const rotated = expectOk(
        await live.post<{ new_key: NewKeyView }>(`/api/v1/api-keys/${only.key_id}/rotate`, {
          grace_period_seconds: 604_800,
        }),
      )
      const lost = rotated.new_key.key_id
      // The old key manages nothing (a leaked one, rotated, must not end its successor)...
      expectError(await live.post(`/api/v1/api-keys/${lost}/revoke`, {}), 403, "api_key_rotated_out")
      // ...and the successor, new, keeps the sandbox keys out...
      expectError(await sandbox.post(`/api/v1/api-keys/${lost}/revoke`, {}), 403, "production_key_required")
      // ...for the 24 hours its answer may be replayed, and the old key while its grace lasts (the
      // tenant may still run on it); never used, and the old key's grace over, they do not.
      await platform.database.pool.query(
        "update platform.api_keys set created_at = created_at - interval '24 hours 1 minute' where key_id = $1",
        [lost],
      )
      expectError(await sandbox.post(`/api/v1/api-keys/${lost}/revoke`, {}), 403, "production_key_required")
      await platform.database.pool.query(
        "update platform.api_keys set expires_at = now() - interval '1 second' where key_id = $1",
        [only.key_id],
      )
      expect(expectOk(await sandbox.post<KeyView>(`/api/v1/api-keys/${lost}/revoke`, {})).status).toBe(
        "revoked",
      )
      const next = await production(sandbox)
      expectOk(await sandbox.as({ ...credentials, api_key: next.api_key }).get("/api/v1/wallets"))
    })

    it("leaves production to the sandbox keys when a successor is revoked during its predecessor's grace period", async () => {
      const { client: sandbox, credentials } = await verifiedTenant()
      const only = await production(sandbox)
      const live = sandbox.as({ ...credentials, api_key: only.api_key })
      const rotated = expectOk(
        await live.post<{ new_key: NewKeyView }>(`/api/v1/api-keys/${only.key_id}/rotate`, {
          grace_period_seconds: 604_800,
        }),
      )
      const successor = sandbox.as({ ...credentials, api_key: rotated.new_key.api_key })
      // It leaked: revoked by itself.
      expectOk(await successor.post(`/api/v1/api-keys/${rotated.new_key.key_id}/revoke`, {}))
      expectError(await live.post("/api/v1/api-keys", {}), 403, "api_key_rotated_out")
      await production(sandbox)
    })
  })

  it("grants production keys (sk_live_) only to a verified tenant, whose production ledger, wallets and webhooks share nothing with the sandbox", async () => {
    const { client: sandbox, credentials } = await registerTenant(platform.url)
    const tenant = expectOk(await sandbox.get<TenantView>("/api/v1/tenant"))
    expect(tenant.verification).toEqual({
      status: "unverified",
      kyc_level: 0,
      reason: null,
      decided_at: null,
    })
    expectError(
      await sandbox.post("/api/v1/api-keys", { environment: "production" }),
      403,
      "tenant_not_verified",
    )

    const submission = {
      legal_name: "Acme Payments GmbH",
      registration_number: "HRB 10000",
      country: "DE",
      representative: { name: "Ada Example", country: "DE" },
    }
    const rejected = expectOk(await sandbox.post<TenantView>("/api/v1/tenant/verification", submission))
    expect(rejected.verification).toMatchObject({
      status: "rejected",
      kyc_level: 0,
      reason: "registry_mismatch",
    })
    expectError(
      await sandbox.post("/api/v1/api-keys", { environment: "production" }),
      403,
      "tenant_not_verified",
    )
    const verifying = { ...submission, registration_number: "HRB 12345" }
    const verified_answer = await sandbox.post<TenantView>("/api/v1/tenant/verification", verifying, {
      "idempotency-key": "verify-1",
    })
    const verified = expectOk(verified_answer)
    expect(verified.verification).toMatchObject({ status: "verified", kyc_level: 2, reason: null })

    // The first production key comes from a sandbox key, made with an Idempotency-Key while
    // verified: its retry below is a replay whatever changed.
    const keyed = { environment: "production", name: "keyed" }
    const made = await sandbox.post<{ key_id: string; api_key: string }>("/api/v1/api-keys", keyed, {
      "idempotency-key": "live-1",
    })
    const key = expectOk(made, 201)
    expect(key.api_key).toMatch(/^sk_live_/)
    expect(key).toMatchObject({ environment: "production", status: "active" })
    const production = apiClient(platform.url, { tenant_id: credentials.tenant_id, api_key: key.api_key })
    expect(expectOk(await production.get<TenantView>("/api/v1/tenant")).environment).toBe("production")
    // Once one works, production keys are managed with production keys: a sandbox key that leaks
    // reaches no production credential.
    for (const refused of [
      await sandbox.post("/api/v1/api-keys", { environment: "production", name: "second" }),
      await sandbox.post(`/api/v1/api-keys/${key.key_id}/rotate`, {}),
      await sandbox.post(`/api/v1/api-keys/${key.key_id}/revoke`, {}),
    ])
      expectError(refused, 403, "production_key_required")
    const second = expectOk(
      await production.post<{ key_id: string }>("/api/v1/api-keys", { name: "second" }),
      201,
    )
    expectOk(await production.post(`/api/v1/api-keys/${second.key_id}/rotate`, { grace_period_seconds: 60 }))

    // Production hangs on the verification: once a production key works, only one may change it.
    expectError(await sandbox.post("/api/v1/tenant/verification", submission), 403, "production_key_required")
    expect(expectOk(await production.get<TenantView>("/api/v1/tenant")).verification.status).toBe("verified")
    // A retry of the sandbox key's own submission, made before, is answered with what was done.
    const replayed = await sandbox.post("/api/v1/tenant/verification", verifying, {
      "idempotency-key": "verify-1",
    })
    expect(replayed.headers.get("idempotent-replayed")).toBe("true")
    expect({ status: replayed.status, text: replayed.text }).toEqual({
      status: verified_answer.status,
      text: verified_answer.text,
    })

    // A later rejected submission suspends the production keys (and their rotation) until verified again.
    expectOk(await production.post<TenantView>("/api/v1/tenant/verification", submission))
    await sleep(1_100)
    // Suspended, production keys still reach what recovers the tenant; a sandbox key reaches none of
    // it (a leaked one could otherwise revoke the production keys, verify and mint its own).
    expectError(
      await sandbox.post(`/api/v1/api-keys/${second.key_id}/revoke`, {}),
      403,
      "production_key_required",
    )
    expect(expectOk(await production.get<TenantView>("/api/v1/tenant")).verification).toMatchObject({
      status: "rejected",
      reason: "registry_mismatch",
    })
    expectOk(await production.get("/api/v1/api-keys"))
    expect(
      expectOk(await production.post<{ status: string }>(`/api/v1/api-keys/${second.key_id}/revoke`, {}))
        .status,
    ).toBe("revoked")
    // A retry answers what was done: the tenant's state as it is now counts for new requests only.
    const again = await sandbox.post("/api/v1/api-keys", keyed, { "idempotency-key": "live-1" })
    expect(again.headers.get("idempotent-replayed")).toBe("true")
    expect({ status: again.status, text: again.text }).toEqual({ status: made.status, text: made.text })
    expectError(
      await sandbox.post("/api/v1/api-keys", keyed, { "idempotency-key": "live-2" }),
      403,
      "tenant_not_verified",
    )
    expectError(await production.get("/api/v1/wallets"), 403, "tenant_not_verified")
    // A real key, not a guess: a burst of them stays 403, never the refused-keys 429.
    const suspended = await Promise.all(Array.from({ length: 60 }, () => production.get("/api/v1/wallets")))
    expect(new Set(suspended.map((answer) => answer.status))).toEqual(new Set([403]))
    expectError(await sandbox.post(`/api/v1/api-keys/${key.key_id}/rotate`, {}), 403, "tenant_not_verified")
    expectError(
      await sandbox.post("/api/v1/api-keys", { environment: "production" }),
      403,
      "tenant_not_verified",
    )
    expectError(
      await sandbox.post("/api/v1/tenant/verification", { ...submission, registration_number: "HRB 12345" }),
      403,
      "production_key_required",
    )
    expectOk(
      await production.post<TenantView>("/api/v1/tenant/verification", {
        ...submission,
        registration_number: "HRB 12345",
      }),
    )
    await sleep(1_100)
    expect(expectOk(await production.get<TenantView>("/api/v1/tenant")).environment).toBe("production")

    const test = await createWallet(sandbox, "ethereum", "same-user")
    await fund(sandbox, test.wallet_id, "100")
    const live = await createWallet(production, "ethereum", "same-user")
    expect(live.is_default).toBe(true)
    expect(live.address).not.toBe(test.address)

    expectError(
      await production.post("/api/v1/sandbox/faucet", {
        wallet_id: live.wallet_id,
        token: "USDC",
        amount: "5",
      }),
      403,
      "sandbox_only",
    )
    expectError(
      await production.post("/api/v1/sandbox/webhooks/simulate", { event_type: "wallet.created" }),
      403,
      "sandbox_only",
    )
    const hook = { events: ["identity.linked"], secret: "live-secret-0123456789" }
    expect(
      expectError(
        await production.post("/api/v1/webhooks", { ...hook, url: "http://example.com/hooks" }),
        400,
        "invalid_url",
      ).param,
    ).toBe("url")
    const secure = expectOk(
      await production.post<WebhookView>("/api/v1/webhooks", { ...hook, url: "https://example.com/hooks" }),
      201,
    )
    expect(secure.environment).toBe("production")
    expectError(await sandbox.get(`/api/v1/webhooks/${secure.webhook_id}`), 404, "webhook_not_found")

    // Each environment sees only its own wallets; the sandbox's money never reaches production.
    expectError(await production.get(`/api/v1/wallets/${test.wallet_id}`), 404, "wallet_not_found")
    expectError(await production.get(`/api/v1/wallets/${test.wallet_id}/balance`), 404, "wallet_not_found")
    expectError(await sandbox.get(`/api/v1/wallets/${live.wallet_id}`), 404, "wallet_not_found")
    const paySandboxWallet = {
      recipient: "+14155550100",
      amount: "1",
      token: "USDC",
      from_wallet: test.wallet_id,
    }
    expectError(await production.post("/api/social-payments/pay", paySandboxWallet), 404, "wallet_not_found")
    expectError(
      await production.post("/api/social-payments/pay", {
        recipient: "+14155550100",
        amount: "1",
        token: "USDC",
      }),
      422,
      "insufficient_funds",
    )
    expect(await usdcOf(production, live.wallet_id)).toEqual({ amount: "0.00", reserved: "0.00" })
    expect(await usdcOf(sandbox, test.wallet_id)).toEqual({ amount: "100.00", reserved: "0.00" })
    const ids = async (api: ApiClient) =>
      expectOk(await api.get<Page<WalletView>>("/api/v1/wallets")).data.map((w) => w.wallet_id)
    expect(await ids(production)).toEqual([live.wallet_id])
    expect(await ids(sandbox)).toEqual([test.wallet_id])
    const environments = expectOk(
      await sandbox.get<{ data: ReadonlyArray<KeyView> }>("/api/v1/api-keys"),
    ).data.map((k) => k.environment)
    // The sandbox key, and in production `key`, `keyed` and the successor of its rotation.
    expect(environments.sort()).toEqual(["production", "production", "production", "sandbox"])
  })
})

// --- 9. lists ---------------------------------------------------------------------------------

describe("lists", () => {
  it("pages wallets by cursor (limit, starting_after, has_more, next_cursor) and refuses limit 0 and 101 with 400", async () => {
    const { client } = await registerTenant(platform.url)
    const chains = ["ethereum", "solana", "polygon", "bsc", "ethereum"]
    const created: Array<WalletView> = []
    for (const [i, chain] of chains.entries()) created.push(await createWallet(client, chain, `user-${i}`))
    const expected = created.map((w) => w.wallet_id).sort()

    const pages: Array<Page<WalletView>> = []
    let cursor: string | null = null
    do {
      const query: string = cursor === null ? "limit=2" : `limit=2&starting_after=${cursor}`
      const page: Page<WalletView> = expectOk(await client.get<Page<WalletView>>(`/api/v1/wallets?${query}`))
      pages.push(page)
      cursor = page.next_cursor
    } while (cursor !== null && pages.length < 10)
    expect(pages.map((p) => [p.data.length, p.has_more, p.next_cursor])).toEqual([
      [2, true, expected[1]],
      [2, true, expected[3]],
      [1, false, null],
    ])
    expect(pages.flatMap((p) => p.data.map((w) => w.wallet_id))).toEqual(expected)
    const all = expectOk(await client.get<Page<WalletView>>("/api/v1/wallets"))
    expect(all).toEqual({
      data: [...created].sort((x, y) => (x.wallet_id < y.wallet_id ? -1 : 1)),
      has_more: false,
      next_cursor: null,
    })
    expect(
      expectOk(await client.get<Page<WalletView>>("/api/v1/wallets?external_id=user-2")).data.map(
        (w) => w.chain,
      ),
    ).toEqual(["polygon"])

    expect(expectError(await client.get("/api/v1/wallets?limit=0"), 400, "invalid_limit").param).toBe("limit")
    expect(expectError(await client.get("/api/v1/wallets?limit=101"), 400, "invalid_limit").param).toBe(
      "limit",
    )
    expect(expectOk(await client.get<Page<WalletView>>("/api/v1/wallets?limit=100")).data).toHaveLength(5)
  })
})

describe("routes and methods", () => {
  it("answers a method a path does not take with 405 and Allow, an unknown path with 404, both in the error shape", async () => {
    const ask = async (method: string, path: string) => {
      const response = await fetch(`${platform.url}${path}`, { method })
      const body =
        method === "HEAD"
          ? undefined
          : ((await response.json()) as { error: { code: string; message: string } })
      return {
        status: response.status,
        allow: response.headers.get("allow"),
        body,
        id: response.headers.get("x-request-id"),
      }
    }
    for (const [method, path, allow] of [
      ["PUT", "/api/v1/wallets", "GET, HEAD, POST"],
      ["DELETE", "/api/v1/wallets/wal_00000000000000000000000000000000", "GET, HEAD"],
      ["GET", "/api/social-payments/pay", "POST"],
      ["OPTIONS", "/api/v1/webhooks/whk_00000000000000000000000000000000", "DELETE, GET, HEAD, PATCH"],
      ["POST", "/openapi.json", "GET, HEAD"],
    ] as const) {
      const answer = await ask(method, path)
      expect({
        method,
        path,
        status: answer.status,
        allow: answer.allow,
        code: answer.body?.error.code,
      }).toEqual({
        method,
        path,
        status: 405,
        allow,
        code: "method_not_allowed",
      })
      // The message names what Allow does (it left HEAD out).
      if (answer.allow !== null)
        expect(answer.body?.error.message).toContain(`this path takes ${answer.allow}.`)
      expect(answer.id).toMatch(/^req_/)
    }
    const unknown = await ask("GET", "/api/v1/nothing-here")
    expect({ status: unknown.status, allow: unknown.allow, code: unknown.body?.error.code }).toEqual({
      status: 404,
      allow: null,
      code: "route_not_found",
    })
  })

  it("answers what Node's HTTP parser refuses in the error shape with an X-Request-Id, not a bare status line", async () => {
    const cases = [
      [`GET /api/v1/wallets?q=${"a".repeat(17_000)} HTTP/1.1\r\nHost: x\r\n\r\n`, 431, "headers_too_large"],
      [`GET /health HTTP/1.1\r\nHost: x\r\nX-Big: ${"b".repeat(17_000)}\r\n\r\n`, 431, "headers_too_large"],
      ["FOO /health HTTP/1.1\r\nHost: x\r\n\r\n", 400, "malformed_request"],
      ["GET /health HTTP/1.1\r\nBad Header: x\r\n\r\n", 400, "malformed_request"],
    ] as const
    for (const [request, status, code] of cases) {
      const answer = await rawExchange(request)
      expect({ status: answer.status, body: answer.body }).toEqual({
        status,
        body: {
          error: {
            type: "invalid_request_error",
            code,
            message: expect.any(String),
            request_id: expect.stringMatching(/^req_/),
          },
        },
      })
      expect(answer.headers).toContain(
        `x-request-id: ${(answer.body as { error: { request_id: string } }).error.request_id}`,
      )
    }
  })
})

describe("keys that are not valid", () => {
  it("are refused 401 until an address has sent too many, then 429 with Retry-After, while valid keys from it still pass", async () => {
    const { client: valid } = await registerTenant(platform.url)
    expectOk(await valid.get("/api/v1/wallets"))
    const guess = (index: number) =>
      apiClient(platform.url, {
        tenant_id: `ten_guess${index}`,
        api_key: `sk_sandbox_${index}_${Math.random().toString(36).slice(2)}`,
      }).get("/api/v1/wallets")
    // Ten at a time against 20/s with a burst of 40: the limit is met within a few rounds on any
    // host that answers faster than 20 guesses a second, and the rounds go on until it is.
    const statuses: Array<number> = []
    let limited: ApiResponse | undefined
    for (let round = 0; round < 40 && limited === undefined; round++) {
      for (const answer of await Promise.all(Array.from({ length: 10 }, (_, i) => guess(round * 10 + i)))) {
        statuses.push(answer.status)
        if (answer.status === 429) limited ??= answer
      }
    }
    expect(statuses.slice(0, 30)).toEqual(Array(30).fill(401))
    expect(statuses.filter((status) => status === 429).length).toBeGreaterThan(0)
    expect(statuses.every((status) => status === 401 || status === 429)).toBe(true)
    expectError(limited as ApiResponse, 429, "rate_limited")
    expect(Number(limited?.headers.get("retry-after"))).toBeGreaterThanOrEqual(1)
    // A valid key from the same address is not one of them.
    expectOk(await valid.get("/api/v1/wallets"))
    // Nor is it once its cached lookup is too old to trust (it is checked again, and passes) while
    // the address is refused again.
    await sleep(1_100)
    let refusedAgain = false
    for (let round = 0; round < 10 && !refusedAgain; round++) {
      // The valid request is sent last, among guesses still being looked up.
      const answers = await Promise.all([
        ...Array.from({ length: 60 }, (_, i) => guess(500 + round * 60 + i)),
        valid.get("/api/v1/wallets"),
      ])
      expectOk(answers.at(-1) as ApiResponse)
      refusedAgain = answers.some((answer) => answer.status === 429)
    }
    expect(refusedAgain).toBe(true)
    await sleep(2_500)
    expect((await guess(1_000)).status).toBe(401)
    // Sent all at once, a burst gets no more lookups than the budget holds (40, and what refills
    // while they run: 20/s), however many it is.
    await sleep(2_500)
    const burst_started_ms = Date.now()
    const burst = await Promise.all(Array.from({ length: 120 }, (_, i) => guess(2_000 + i)))
    const burst_s = (Date.now() - burst_started_ms) / 1_000
    const looked_up = burst.filter((answer) => answer.status === 401).length
    expect(looked_up).toBeGreaterThanOrEqual(30)
    expect(looked_up).toBeLessThanOrEqual(40 + Math.ceil(burst_s * 20) + 1)
    expect(burst.filter((answer) => answer.status === 429).length).toBe(120 - looked_up)
    await sleep(2_500) // the address's budget refills for the tests after this one
  })

  it("count when the same bad key is sent again and again: answered from the cache, past the budget they are 429 too", async () => {
    const same = apiClient(platform.url, { tenant_id: "ten_guess", api_key: "sk_sandbox_the_same_bad_key" })
    const statuses: Array<number> = []
    for (let round = 0; round < 40 && !statuses.includes(429); round++) {
      for (const answer of await Promise.all(Array.from({ length: 10 }, () => same.get("/api/v1/wallets")))) {
        statuses.push(answer.status)
      }
    }
    expect(statuses.slice(0, 30)).toEqual(Array(30).fill(401))
    expect(statuses).toContain(429)
    expect(statuses.every((status) => status === 401 || status === 429)).toBe(true)
    await sleep(2_500) // the address's budget refills for the tests after this one
  })
})

describe("credentials before form", () => {
  it("answers a request without valid credentials 401 whatever its form, a key without the scope 403, and only then the form's 400", async () => {
    const { client: owner, credentials } = await registerTenant(platform.url)
    const reader = await createKey(owner, { scopes: ["wallets:read"], name: "reader" })
    const readerClient = owner.as({ tenant_id: credentials.tenant_id, api_key: reader.api_key })
    const anonymous = apiClient(platform.url)
    const guessed = owner.as({ tenant_id: credentials.tenant_id, api_key: "sk_sandbox_not_a_key" })
    // A query parameter given twice, one the endpoint does not take, a key named twice in a body,
    // a body on an endpoint that takes none.
    const twice = (api: ApiClient) => api.get("/api/v1/wallets?limit=1&limit=2")
    const unknown = (api: ApiClient) => api.get("/api/v1/wallets?wallet=1")
    const keyTwice = (api: ApiClient) => api.post("/api/v1/wallets", '{"chain":"ethereum","chain":"solana"}')
    const bodyOnAction = (api: ApiClient) => api.post("/api/v1/api-keys/key_0123/revoke", { reason: "x" })
    for (const send of [twice, unknown, keyTwice, bodyOnAction]) {
      expectError(await send(anonymous), 401, "missing_api_key")
      expectError(await send(guessed), 401, "invalid_api_key")
    }
    // The reader may list wallets, so its malformed list gets the 400; it may not write, so 403.
    expectError(await twice(readerClient), 400, "invalid_parameter")
    expectError(await unknown(readerClient), 400, "invalid_parameter")
    expectError(await keyTwice(readerClient), 403, "insufficient_scope")
    expectError(await bodyOnAction(readerClient), 403, "insufficient_scope")
    expectError(await keyTwice(owner), 400, "duplicate_key")
    expectError(await bodyOnAction(owner), 400, "invalid_parameter")
    // Endpoints that take no credentials refuse the form at once.
    expectError(
      await anonymous.post("/api/tenant/register", '{"email":"a@example.com","email":"b@example.com"}'),
      400,
      "duplicate_key",
    )
    expect(expectOk(await owner.get<Page<WalletView>>("/api/v1/wallets")).data).toEqual([])
  })
})

describe("credentials headers given twice", () => {
  /** A GET with `headers` written as given (fetch would join a repeated header into one). */
  const rawGet = async (path: string, headers: ReadonlyArray<readonly [string, string]>) => {
    const lines = headers.map(([name, value]) => `${name}: ${value}\r\n`).join("")
    const answer = await rawExchange(`GET ${path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n${lines}\r\n`)
    return answer as typeof answer & { readonly body: { error?: { code: string; message: string } } }
  }

  it("refuses two Authorization or two X-Tenant-Id headers 401 duplicate_credentials, even when both are right", async () => {
    const a = await registerTenant(platform.url)
    const b = await registerTenant(platform.url)
    const bearer = (key: string) => ["Authorization", `Bearer ${key}`] as const
    const tenant = (id: string) => ["X-Tenant-Id", id] as const
    const own = [bearer(a.credentials.api_key), tenant(a.credentials.tenant_id)] as const
    // Node kept the first Authorization (the second was never looked at) and joined the tenant ids.
    for (const headers of [
      [...own, bearer(b.credentials.api_key)],
      [...own, bearer(a.credentials.api_key)],
      [...own, tenant(b.credentials.tenant_id)],
      [...own, ["x-tenant-id", a.credentials.tenant_id] as const],
    ]) {
      const answer = await rawGet("/api/v1/wallets", headers)
      expect({ status: answer.status, code: answer.body.error?.code }).toEqual({
        status: 401,
        code: "duplicate_credentials",
      })
      expect(answer.body.error?.message).toMatch(/(Authorization|X-Tenant-Id) header is given more than once/)
    }
    const once = await rawGet("/api/v1/wallets", own)
    expect(once.status).toBe(200)
  })
})

describe("DELETE with a body", () => {
  it("takes none, {} or null, and refuses any other body as the bodyless POSTs do, deleting nothing", async () => {
    const { client, credentials } = await registerTenant(platform.url)
    const hook = expectOk(
      await client.post<WebhookView>("/api/v1/webhooks", {
        url: "http://127.0.0.1:9/hook",
        events: ["wallet.created"],
        secret: "whsec_delete_with_a_body_0123456789",
      }),
      201,
    )
    const remove = (body: string, type = "application/json") =>
      fetch(`${platform.url}/api/v1/webhooks/${hook.webhook_id}`, {
        method: "DELETE",
        headers: {
          authorization: `Bearer ${credentials.api_key}`,
          "x-tenant-id": credentials.tenant_id,
          "content-type": type,
        },
        body,
      }).then(async (response) => {
        const text = await response.text()
        return { status: response.status, headers: response.headers, body: JSON.parse(text) as unknown, text }
      })
    expectError(await remove("not json at all"), 400, "invalid_json")
    expect(expectError(await remove('{"really":true}'), 400, "invalid_parameter").param).toBe("really")
    expectError(await remove("x", "text/plain"), 415, "unsupported_media_type")
    expect(expectOk(await client.get<WebhookView>(`/api/v1/webhooks/${hook.webhook_id}`)).webhook_id).toBe(
      hook.webhook_id,
    )
    expect((await remove("{}")).status).toBe(200)
    expectError(await client.get(`/api/v1/webhooks/${hook.webhook_id}`), 404, "webhook_not_found")
  })
})
