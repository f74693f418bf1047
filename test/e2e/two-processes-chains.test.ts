// Proves what a tenant sees when its requests are spread over two platform processes on one
// database, run as the README says: the first runs the sandbox's chains, the second none. A retried
// on-chain transfer that reaches the second is answered as the transfer it made (not refused for
// the chain the second does not run); the second refuses a new one, naming the process; a transfer
// refused for its on-chain balance names the right reason when the other process paid the wallet
// meanwhile; and one payment sent to both at once is made once, one answer marked as its replay.
import { randomBytes } from "node:crypto"
import { privateKeyToAccount } from "viem/accounts"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import type { ChainTransfer } from "../../src/http/api.ts"
import { expectError, expectOk } from "../support/api-expect.ts"
import { createWallet } from "../support/api-fixtures.ts"
import {
  type ApiClient,
  apiClient,
  type RunningPlatform,
  registerTenant,
  startPlatform,
} from "../support/platform-process.ts"

let owner: RunningPlatform
let other: RunningPlatform
/** The same tenant through the process that runs the chains, and through the one that does not. */
let a: ApiClient
let b: ApiClient

beforeAll(async () => {
  const kek = randomBytes(32).toString("hex")
  owner = await startPlatform({ CUSTODY_KEK: kek, SANDBOX_EVM_CHAINS: "ethereum" })
  other = await startPlatform({ CUSTODY_KEK: kek }, { database: owner.database })
  const registered = await registerTenant(owner.url)
  a = registered.client
  b = apiClient(other.url, registered.credentials)
}, 180_000)
afterAll(async () => {
  await other?.stop()
  await owner?.stop()
})

const recipient = privateKeyToAccount(`0x${"11".repeat(32)}`).address

describe("two platform processes on one database, one running the sandbox's chains", () => {
  it("answers a transfer retried through the process without the chain as the transfer it made", async () => {
    const wallet = await createWallet(a, "ethereum", "retried")
    expectOk(
      await a.post("/api/v1/sandbox/faucet", { wallet_id: wallet.wallet_id, token: "USDC", amount: "10" }),
    )
    const body = {
      from_wallet: wallet.wallet_id,
      to_address: recipient,
      amount: "1",
      token: "USDC",
      chain: "ethereum",
    }
    const headers = { "idempotency-key": "transfer-retried-elsewhere" }
    const made = await a.post<typeof ChainTransfer.Type>("/api/v2/transfers", body, headers)
    expect(made.status).toBe(202)
    const retried = await b.post<typeof ChainTransfer.Type>("/api/v2/transfers", body, headers)
    expect(retried.status).toBe(202)
    expect(retried.headers.get("idempotent-replayed")).toBe("true")
    expect(retried.body.transaction_id).toBe(made.body.transaction_id)
    // A new one there is refused, naming the process.
    const refused = expectError(await b.post("/api/v2/transfers", body), 400, "chain_unavailable")
    expect(refused.message).toBe(
      "On-chain transfers of USDC on ethereum are not available in sandbox on this platform process.",
    )
  }, 60_000)

  it("refuses a transfer short on chain for that reason when the other process paid the wallet meanwhile", async () => {
    const sender = await createWallet(a, "ethereum", "short-on-chain")
    // 10 on chain and in the ledger, through the process that runs the chain...
    expectOk(
      await a.post("/api/v1/sandbox/faucet", { wallet_id: sender.wallet_id, token: "USDC", amount: "10" }),
    )
    // ...then 50 more in the ledger only, paid through the other process (the money stays at the
    // payer's address on chain).
    const payer = await createWallet(b, "ethereum", "payer-elsewhere")
    expectOk(
      await b.post("/api/v1/sandbox/faucet", { wallet_id: payer.wallet_id, token: "USDC", amount: "100" }),
    )
    expectOk(
      await b.post("/api/v1/identities", {
        wallet_id: sender.wallet_id,
        kind: "email",
        value: "short@example.com",
      }),
      201,
    )
    const paid = expectOk(
      await b.post<{ status: string }>("/api/social-payments/pay", {
        recipient: "short@example.com",
        amount: "50",
        token: "USDC",
        from_wallet: payer.wallet_id,
      }),
    )
    expect(paid.status).toBe("completed")
    // The ledger covers 30 (60 available), the chain does not (10).
    const refused = expectError(
      await a.post("/api/v2/transfers", {
        from_wallet: sender.wallet_id,
        to_address: recipient,
        amount: "30",
        token: "USDC",
        chain: "ethereum",
      }),
      422,
      "onchain_balance_short",
    )
    expect(refused.message).toContain("holds 10.00 USDC at its address on chain")
  }, 60_000)

  it("makes one payment sent to both at once under one Idempotency-Key, one answer marked as its replay", async () => {
    const payer = await createWallet(a, "ethereum", "payer-both")
    const payee = await createWallet(a, "ethereum", "payee-both")
    expectOk(
      await a.post("/api/v1/sandbox/faucet", { wallet_id: payer.wallet_id, token: "USDC", amount: "1000" }),
    )
    expectOk(
      await a.post("/api/v1/identities", {
        wallet_id: payee.wallet_id,
        kind: "email",
        value: "both@example.com",
      }),
      201,
    )
    const body = { recipient: "both@example.com", amount: "1", token: "USDC", from_wallet: payer.wallet_id }
    // Both processes have read the ledger once.
    expectOk(await b.post("/api/social-payments/pay", body))
    expectOk(await a.post("/api/social-payments/pay", body))
    const marked: Array<number> = []
    for (let round = 0; round < 10; round += 1) {
      const headers = { "idempotency-key": `pay-both-${round}` }
      const answers = await Promise.all([
        a.post<{ transaction_id: string }>("/api/social-payments/pay", body, headers),
        b.post<{ transaction_id: string }>("/api/social-payments/pay", body, headers),
      ])
      expect(answers.map((answer) => answer.status)).toEqual([200, 200])
      expect(answers[0]?.body.transaction_id).toBe(answers[1]?.body.transaction_id)
      marked.push(answers.filter((answer) => answer.headers.get("idempotent-replayed") === "true").length)
    }
    expect(marked).toEqual(Array(10).fill(1))
    // Twelve payments of 1 and their fees, nothing twice.
    const balance = expectOk(
      await a.get<{ tokens: Array<{ token: string; amount: string }> }>(
        `/api/v1/wallets/${payer.wallet_id}/balance`,
      ),
    )
    expect(balance.tokens.find((token) => token.token === "USDC")?.amount).toBe("987.964")
  }, 120_000)
})
