// Proves that wallets exist on all ten chains over HTTP against the real platform process: one
// wallet per chain, each address in its chain's own format (checked by the registry's
// `isValidAddress`), each wallet holding exactly the tokens its chain carries; and that
// GET /api/v2/chains lists the registry for the caller's environment, says plainly that gas
// estimates are unavailable, and is guarded like every other endpoint.
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { chainIdentifiers, chains, isValidAddress } from "../../domain/chains/registry.ts"
import type { Balance, ChainInfo, NewApiKey, Wallet } from "../../src/http/api.ts"
import { expectError, expectOk } from "../support/api-expect.ts"
import {
  type ApiClient,
  type Credentials,
  type RunningPlatform,
  registerTenant,
  startPlatform,
} from "../support/platform-process.ts"

type WalletView = typeof Wallet.Type
type BalanceView = typeof Balance.Type
type ChainView = typeof ChainInfo.Type

let platform: RunningPlatform
let client: ApiClient
let credentials: Credentials

beforeAll(async () => {
  platform = await startPlatform()
  ;({ client, credentials } = await registerTenant(platform.url))
})

afterAll(async () => {
  await platform?.stop()
})

describe("wallets on every chain", () => {
  const created = new Map<string, WalletView>()

  beforeAll(async () => {
    for (const chain of chainIdentifiers) {
      const wallet = expectOk(
        await client.post<WalletView>("/api/v1/wallets", {
          external_id: `user-${chain}`,
          label: chain,
          chain,
        }),
        201,
      )
      created.set(chain, wallet)
    }
  })

  for (const chain of chainIdentifiers) {
    it(`creates a ${chain} wallet whose address is well formed for ${chain}`, () => {
      const wallet = created.get(chain)
      expect(wallet?.chain).toBe(chain)
      expect(isValidAddress(chain, wallet?.address ?? "")).toBe(true)
    })
  }

  it("gives TON wallets the non-bounceable user-friendly form and no other family's format", () => {
    const ton = created.get("ton")?.address ?? ""
    expect(ton).toMatch(/^UQ[A-Za-z0-9_-]{46}$/)
    for (const other of ["ethereum", "solana", "tron"] as const)
      expect(isValidAddress(other, ton)).toBe(false)
  })

  it("opens each wallet with exactly the tokens its chain carries", async () => {
    for (const chain of chains) {
      const wallet = created.get(chain.chain)
      const balance = expectOk(await client.get<BalanceView>(`/api/v1/wallets/${wallet?.wallet_id}/balance`))
      expect(balance.tokens.map((token) => token.token).sort()).toEqual(
        chain.tokens.map((token) => token.symbol).sort(),
      )
    }
  })

  it("funds USDT on TON from the faucet and refuses USDC there, naming what TON carries", async () => {
    const ton = created.get("ton")
    const funded = expectOk(
      await client.post<BalanceView>("/api/v1/sandbox/faucet", {
        wallet_id: ton?.wallet_id,
        token: "USDT",
        amount: "12.5",
      }),
    )
    expect(funded.tokens).toEqual([{ token: "USDT", amount: "12.50", chain: "ton", reserved: "0.00" }])
    const refused = expectError(
      await client.post("/api/v1/sandbox/faucet", { wallet_id: ton?.wallet_id, token: "USDC", amount: "1" }),
      400,
      "unknown_token",
    )
    expect(refused.message).toContain("one of USDT")
  })

  it("still refuses a chain outside the registry, listing all ten", async () => {
    const error = expectError(
      await client.post("/api/v1/wallets", { external_id: "user-btc", label: "", chain: "bitcoin" }),
      400,
      "unsupported_chain",
    )
    for (const chain of chainIdentifiers) expect(error.message).toContain(chain)
  })
})

describe("GET /api/v2/chains", () => {
  it("lists the ten chains with sandbox tokens, null contracts and gas unavailable", async () => {
    const body = expectOk(await client.get<{ data: ReadonlyArray<ChainView> }>("/api/v2/chains"))
    expect(body.data.map((chain) => chain.chain)).toEqual([...chainIdentifiers])
    for (const view of body.data) {
      const definition = chains.find((chain) => chain.chain === view.chain)
      expect(view).toMatchObject({
        name: definition?.name,
        family: definition?.family,
        chain_id: definition?.chain_id,
        native_token: definition?.native_token,
        confirmations: definition?.confirmations,
        gas: null,
        gas_status: "unavailable",
      })
      expect(view.tokens).toEqual(
        definition?.tokens.map((token) => ({
          token: token.symbol,
          decimals: token.decimals,
          contract_address: null,
        })),
      )
    }
    const ethereum = body.data.find((chain) => chain.chain === "ethereum")
    expect(ethereum?.chain_id).toBe(1)
    expect(body.data.find((chain) => chain.chain === "ton")?.chain_id).toBeNull()
  })

  it("needs credentials and the wallets:read scope", async () => {
    const anonymous = await fetch(`${platform.url}/api/v2/chains`)
    expect(anonymous.status).toBe(401)
    const key = expectOk(
      await client.post<typeof NewApiKey.Type>("/api/v1/api-keys", {
        scopes: ["payments:read"],
        name: "payments only",
      }),
      201,
    )
    const payments_only = client.as({ tenant_id: credentials.tenant_id, api_key: key.api_key })
    expectError(await payments_only.get("/api/v2/chains"), 403, "insufficient_scope")
  })

  it("is described in the OpenAPI document, gas included", async () => {
    const openapi = (await fetch(`${platform.url}/openapi.json`).then((response) => response.json())) as {
      paths: Record<string, { get?: { description?: string } }>
    }
    expect(openapi.paths["/api/v2/chains"]?.get?.description).toContain("gas_status")
  })
})
