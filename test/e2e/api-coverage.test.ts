// Promises no other test would notice broken (each was found by a mutation review: the mutation
// passed every test before): each write endpoint's own scope, a rotated key's scopes, the payee's
// side of the transactions filter, a pending payment whose fee rounds to 0, a plan in any letter
// case, the sandbox verifier's sanctions and level 3, identities kept apart by environment, and the
// length of a telegram handle.
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { apiScopes } from "../../domain/platform/scopes.ts"
import { expectError, expectOk } from "../support/api-expect.ts"
import { createWallet } from "../support/api-fixtures.ts"
import {
  type ApiClient,
  type RunningPlatform,
  registerTenant,
  startPlatform,
} from "../support/platform-process.ts"

let platform: RunningPlatform
let owner: { client: ApiClient; credentials: { tenant_id: string; api_key: string } }
beforeAll(async () => {
  platform = await startPlatform()
  owner = await registerTenant(platform.url)
}, 120_000)
afterAll(async () => {
  await platform?.stop()
})

const keyWith = async (scopes: ReadonlyArray<string>) => {
  const key = expectOk(
    await owner.client.post<{ key_id: string; api_key: string; scopes: string[] }>("/api/v1/api-keys", {
      scopes,
    }),
    201,
  )
  return { ...key, client: owner.client.as({ tenant_id: owner.credentials.tenant_id, api_key: key.api_key }) }
}

const fakeWallet = "wal_00000000000000000000000000000000"
const fakeIdentity = "idn_00000000000000000000000000000000"
const fakeWebhook = "whk_00000000000000000000000000000000"

describe("every endpoint needs its own scope: a key holding every other scope is 403", () => {
  const cases: ReadonlyArray<readonly [string, string, string, unknown]> = [
    [
      "POST",
      "/api/v2/transfers",
      "payments:write",
      { from_wallet: fakeWallet, to_address: "0x0", amount: "1", token: "USDC", chain: "ethereum" },
    ],
    [
      "POST",
      "/api/social-payments/pay",
      "payments:write",
      { recipient: "+14155550100", amount: "1", token: "USDC" },
    ],
    [
      "POST",
      "/api/v1/identities",
      "identities:write",
      { wallet_id: fakeWallet, kind: "phone", value: "+14155550100" },
    ],
    ["DELETE", `/api/v1/identities/${fakeIdentity}`, "identities:write", undefined],
    ["POST", `/api/v1/wallets/${fakeWallet}/default`, "wallets:write", {}],
    [
      "POST",
      "/api/v1/sandbox/faucet",
      "wallets:write",
      { wallet_id: fakeWallet, token: "USDC", amount: "1" },
    ],
    [
      "POST",
      "/api/v1/webhooks",
      "webhooks:write",
      { url: "http://127.0.0.1:9/x", events: ["wallet.created"], secret: "s".repeat(16) },
    ],
    ["PATCH", `/api/v1/webhooks/${fakeWebhook}`, "webhooks:write", { enabled: false }],
    ["DELETE", `/api/v1/webhooks/${fakeWebhook}`, "webhooks:write", undefined],
    [
      "POST",
      "/api/v1/tenant/verification",
      "tenant:manage",
      {
        legal_name: "x",
        registration_number: "1",
        country: "DE",
        representative: { name: "x", country: "DE" },
      },
    ],
  ]
  it.each(cases)("%s %s needs %s", async (method, path, scope, body) => {
    const { client } = await keyWith(apiScopes.filter((s) => s !== scope))
    const answer =
      method === "POST"
        ? await client.post(path, body)
        : method === "PATCH"
          ? await client.patch(path, body)
          : await client.delete(path)
    expectError(answer, 403, "insufficient_scope")
  })
})

describe("rotation", () => {
  it("gives the successor exactly the rotated key's scopes", async () => {
    const limited = await keyWith(["wallets:read"])
    const rotated = expectOk(
      await owner.client.post<{ new_key: { scopes: string[] } }>(
        `/api/v1/api-keys/${limited.key_id}/rotate`,
        {},
      ),
    )
    expect(rotated.new_key.scopes).toEqual(["wallets:read"])
  })
})

describe("transactions list", () => {
  it("lists a payment under its payee's wallet too", async () => {
    const payer = await createWallet(owner.client, "ethereum", "t-payer")
    const payee = await createWallet(owner.client, "ethereum", "t-payee")
    expectOk(
      await owner.client.post("/api/v1/sandbox/faucet", {
        wallet_id: payer.wallet_id,
        token: "USDC",
        amount: "10",
      }),
    )
    expectOk(
      await owner.client.post("/api/v1/identities", {
        wallet_id: payee.wallet_id,
        kind: "email",
        value: "payee-list@example.com",
      }),
      201,
    )
    const paid = expectOk(
      await owner.client.post<{ transaction_id: string }>("/api/social-payments/pay", {
        recipient: "payee-list@example.com",
        amount: "1",
        token: "USDC",
        from_wallet: payer.wallet_id,
      }),
    )
    const listed = expectOk(
      await owner.client.get<{ data: Array<{ transaction_id: string }> }>(
        `/api/v1/transactions?wallet_id=${payee.wallet_id}`,
      ),
    )
    expect(listed.data.map((t) => t.transaction_id)).toEqual([paid.transaction_id])
  })
})

describe("a pending payment whose fee rounds to 0", () => {
  it("completes on link", async () => {
    const payer = await createWallet(owner.client, "ethereum", "z-payer")
    const payee = await createWallet(owner.client, "ethereum", "z-payee")
    expectOk(
      await owner.client.post("/api/v1/sandbox/faucet", {
        wallet_id: payer.wallet_id,
        token: "USDC",
        amount: "1",
      }),
    )
    const pending = expectOk(
      await owner.client.post<{ transaction_id: string; status: string; fee: string }>(
        "/api/social-payments/pay",
        {
          recipient: "zero-fee@example.com",
          amount: "0.0001",
          token: "USDC",
          from_wallet: payer.wallet_id,
        },
      ),
    )
    expect(pending).toMatchObject({ status: "pending", fee: "0.00" })
    expectOk(
      await owner.client.post("/api/v1/identities", {
        wallet_id: payee.wallet_id,
        kind: "email",
        value: "zero-fee@example.com",
      }),
      201,
    )
    const done = expectOk(
      await owner.client.get<{ status: string }>(`/api/v1/transactions/${pending.transaction_id}`),
    )
    expect(done.status).toBe("completed")
  })
})

describe("registration and verification", () => {
  it("takes a plan in another letter case", async () => {
    const answer = await owner.client.post<{ tenant_id: string }>("/api/tenant/register", {
      email: `plan-case-${Date.now()}@example.com`,
      password: "correct horse battery staple",
      company_name: "Plan Case",
      plan: "Professional",
    })
    expectOk(answer, 201)
  })

  it("refuses a sanctioned company or representative, and verifies at level 3 with documents", async () => {
    const { client } = await registerTenant(platform.url)
    const submission = {
      legal_name: "Acme",
      registration_number: "HRB 12345",
      country: "DE",
      representative: { name: "Ada", country: "DE" },
    }
    for (const sanctioned of [
      { ...submission, country: "IR" },
      { ...submission, representative: { name: "Ada", country: "KP" } },
    ]) {
      const answer = expectOk(
        await client.post<{ verification: unknown }>("/api/v1/tenant/verification", sanctioned),
      )
      expect(answer.verification).toMatchObject({
        status: "rejected",
        kyc_level: 0,
        reason: "sanctioned_jurisdiction",
      })
    }
    const documented = expectOk(
      await client.post<{ verification: unknown }>("/api/v1/tenant/verification", {
        ...submission,
        documents: ["passport-1"],
      }),
    )
    expect(documented.verification).toMatchObject({ status: "verified", kyc_level: 3 })
  })
})

describe("environments", () => {
  it("keep identities apart: a production key neither reads nor unlinks a sandbox identity", async () => {
    const { client: sandbox, credentials } = await registerTenant(platform.url)
    expectOk(
      await sandbox.post("/api/v1/tenant/verification", {
        legal_name: "Acme",
        registration_number: "HRB 12345",
        country: "DE",
        representative: { name: "Ada", country: "DE" },
      }),
    )
    const live = expectOk(
      await sandbox.post<{ api_key: string }>("/api/v1/api-keys", { environment: "production" }),
      201,
    )
    const production = sandbox.as({ tenant_id: credentials.tenant_id, api_key: live.api_key })
    const wallet = await createWallet(sandbox, "ethereum", "env-w")
    const identity = expectOk(
      await sandbox.post<{ identity_id: string }>("/api/v1/identities", {
        wallet_id: wallet.wallet_id,
        kind: "email",
        value: "env@example.com",
      }),
      201,
    )
    expectError(await production.get(`/api/v1/identities/${identity.identity_id}`), 404, "identity_not_found")
    expectError(
      await production.delete(`/api/v1/identities/${identity.identity_id}`),
      404,
      "identity_not_found",
    )
    expect(
      expectOk(await sandbox.get<{ status: string }>(`/api/v1/identities/${identity.identity_id}`)).status,
    ).toBe("linked")
  })
})

describe("handles", () => {
  it("refuses a telegram handle of 33 characters", async () => {
    const wallet = await createWallet(owner.client, "ethereum", "h-w")
    expectError(
      await owner.client.post("/api/v1/identities", {
        wallet_id: wallet.wallet_id,
        kind: "handle",
        value: `@telegram:${"a".repeat(33)}`,
      }),
      400,
      "invalid_handle",
    )
  })
})
