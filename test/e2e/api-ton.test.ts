// TON end to end against the real platform process with its local TON chain (SANDBOX_TON=true,
// @ton/sandbox inside the platform, USDT as the platform jetton): GET /api/v2/chains shows TON's live
// fee and the jetton minter; the faucet credits the ledger and mints on chain; POST /api/v2/transfers
// sends USDT to another custody wallet of the tenant and completes with the chain's proof and a
// payment.completed webhook; the recipient's side is a deposit, credited once with deposit.confirmed
// (the faucet's mint is not one); GET /api/v1/transactions/{id}/verify re-reads the jetton transfer;
// the reconciliation of USDT on TON matches. The chain lives inside the platform process, so the
// test sees it only through the API: balances, proofs, verification and reconciliation.
import { Address } from "@ton/core"
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest"
import { jettonWalletAddress } from "../../adapters/chains/ton/jetton.ts"
import { paymentFee } from "../../domain/ledger/fee.ts"
import { formatAmount } from "../../domain/money/amount.ts"
import type {
  Balance,
  ChainInfo,
  ChainTransfer,
  ReconciliationReport,
  TransactionVerification,
  Wallet,
} from "../../src/http/api.ts"
import { expectError, expectOk } from "../support/api-expect.ts"
import {
  type ApiClient,
  type RunningPlatform,
  registerTenant,
  startPlatform,
} from "../support/platform-process.ts"
import { startWebhookReceiver, type WebhookReceiver } from "../support/webhook-receiver.ts"

type TransferView = typeof ChainTransfer.Type

const secret = "whsec_ton_e2e_secret"
/** Waits return as soon as the chain is done; the bound only matters on a slow, busy host. */
const wait_ms_max = 60_000
// Tests that wait on chains more than once may take several such bounds on a slow host.
vi.setConfig({ testTimeout: 180_000 })

let platform: RunningPlatform
let client: ApiClient
let receiver: WebhookReceiver
let sender: typeof Wallet.Type
let recipient: typeof Wallet.Type

const usdtOf = async (wallet_id: string) =>
  expectOk(await client.get<typeof Balance.Type>(`/api/v1/wallets/${wallet_id}/balance`)).tokens.find(
    (token) => token.token === "USDT",
  )

beforeAll(async () => {
  receiver = await startWebhookReceiver(secret)
  platform = await startPlatform({ SANDBOX_TON: "true" })
  ;({ client } = await registerTenant(platform.url))
  expectOk(
    await client.post("/api/v1/webhooks", {
      url: receiver.url,
      events: ["payment.completed", "deposit.confirmed"],
      secret,
    }),
    201,
  )
  const wallet = async (external_id: string) =>
    expectOk(
      await client.post<typeof Wallet.Type>("/api/v1/wallets", {
        external_id,
        label: external_id,
        chain: "ton",
      }),
      201,
    )
  sender = await wallet("ton-sender")
  recipient = await wallet("ton-recipient")
})

afterAll(async () => {
  await platform?.stop()
  await receiver?.close()
})

describe("TON in the sandbox", () => {
  it("lists TON with a live fee and the USDT jetton minter", async () => {
    const body = expectOk(await client.get<{ data: ReadonlyArray<typeof ChainInfo.Type> }>("/api/v2/chains"))
    const ton = body.data.find((chain) => chain.chain === "ton")
    expect(ton?.gas_status).toBe("live")
    expect(Number(ton?.gas?.native)).toBeGreaterThan(0)
    expect(ton?.tokens).toEqual([
      { token: "USDT", decimals: 6, contract_address: expect.stringMatching(/^EQ[A-Za-z0-9_-]{46}$/) },
    ])
  })

  it("sends USDT on chain: completed with a proof, a deposit on the other side, verified, reconciled", async () => {
    expectOk(
      await client.post("/api/v1/sandbox/faucet", {
        wallet_id: sender.wallet_id,
        token: "USDT",
        amount: "50",
      }),
    )
    const requested = expectOk(
      await client.post<TransferView>("/api/v2/transfers", {
        from_wallet: sender.wallet_id,
        // The raw spelling of the recipient's address: stored as its wallet writes it (UQ...).
        to_address: Address.parse(recipient.address).toRawString(),
        amount: "12.5",
        token: "USDT",
        chain: "ton",
      }),
      202,
    )
    expect(requested).toMatchObject({
      status: "pending",
      amount: "12.50",
      chain: "ton",
      to_address: recipient.address,
    })

    const completed = await receiver.waitFor(
      (request) =>
        request.body.event_type === "payment.completed" &&
        request.body.data.transaction_id === requested.transaction_id,
      wait_ms_max,
    )
    expect(completed.status).toBe(200)
    const transfer = expectOk(await client.get<TransferView>(`/api/v2/transfers/${requested.transaction_id}`))
    expect(transfer.status).toBe("completed")
    expect(transfer.proof).toMatchObject({ tx_hash: transfer.tx_hash, log_index: 0 })
    expect(transfer.proof?.confirmations).toBeGreaterThanOrEqual(1)

    const spent = 12_500_000n + paymentFee(12_500_000n)
    expect((await usdtOf(sender.wallet_id))?.amount).toBe(formatAmount(50_000_000n - spent, 6))

    // The recipient is a custody wallet: the same jetton transfer is its deposit, credited once.
    const deposit = await receiver.waitFor(
      (request) =>
        request.body.event_type === "deposit.confirmed" &&
        request.body.data.wallet_id === recipient.wallet_id,
      wait_ms_max,
    )
    expect(deposit.body.data).toMatchObject({ chain: "ton", token: "USDT", amount: "12.50" })
    expect((await usdtOf(recipient.wallet_id))?.amount).toBe("12.50")
    const deposits = expectOk(
      await client.get<{ data: ReadonlyArray<{ wallet_id: string }> }>("/api/v2/deposits"),
    )
    // The faucet's mint to the sender is no deposit.
    expect(deposits.data.map((row) => row.wallet_id)).toEqual([recipient.wallet_id])

    const verified = expectOk(
      await client.get<typeof TransactionVerification.Type>(
        `/api/v1/transactions/${requested.transaction_id}/verify`,
      ),
    )
    expect(verified).toMatchObject({
      chain: "ton",
      tx_hash: transfer.tx_hash,
      checks: { amount: true, token: true, sender: true, receiver: true },
      matches: true,
    })

    const reports = expectOk(
      await client.post<{ data: ReadonlyArray<typeof ReconciliationReport.Type> }>(
        "/api/v2/reconciliation/runs",
        {},
      ),
    ).data
    // 50 minted; 12.50 moved between two custody wallets; the fee stays in the sender's address.
    expect(reports.find((report) => report.chain === "ton" && report.token === "USDT")).toMatchObject({
      status: "matched",
      ledger_balance: "50.00",
      on_chain_balance: "50.00",
    })
  })

  it("refuses an address that is not TON's, a token TON does not carry, the sender's own address and a masterchain one", async () => {
    const body = { from_wallet: sender.wallet_id, amount: "1", chain: "ton" }
    expectError(
      await client.post("/api/v2/transfers", { ...body, token: "USDT", to_address: "0x1234" }),
      400,
      "invalid_address",
    )
    expectError(
      await client.post("/api/v2/transfers", { ...body, token: "USDC", to_address: recipient.address }),
      400,
      "unknown_token",
    )
    // The sender's own account in its raw spelling is still the sender.
    expectError(
      await client.post("/api/v2/transfers", {
        ...body,
        token: "USDT",
        to_address: Address.parse(sender.address).toRawString(),
      }),
      422,
      "same_address",
    )
    // A masterchain account holds no jetton wallet: the transfer reverted after paying its gas.
    for (const to_address of [`-1:${"33".repeat(32)}`, new Address(-1, Buffer.alloc(32, 0x33)).toString()]) {
      expect(
        expectError(
          await client.post("/api/v2/transfers", { ...body, token: "USDT", to_address }),
          422,
          "masterchain_address",
        ).param,
      ).toBe("to_address")
    }
  })

  it("refuses the jetton wallet of a platform wallet, deployed or not, in any spelling", async () => {
    const chains = expectOk(
      await client.get<{ data: ReadonlyArray<typeof ChainInfo.Type> }>("/api/v2/chains"),
    )
    const minter = chains.data.find((chain) => chain.chain === "ton")?.tokens[0]?.contract_address ?? ""
    const jettonWalletOf = (owner: string) => jettonWalletAddress(Address.parse(owner), Address.parse(minter))
    // Another tenant's wallet that never held a jetton: its jetton wallet is not deployed, so the
    // chain cannot tell it from a wallet; jettons sent there would be held by a contract only that
    // wallet's messages move, and credited to no one.
    const other = await registerTenant(platform.url)
    const stranger = expectOk(
      await other.client.post<typeof Wallet.Type>("/api/v1/wallets", {
        external_id: "ton-stranger",
        label: "stranger",
        chain: "ton",
      }),
      201,
    )
    const undeployed = jettonWalletOf(stranger.address)
    // The sender's own jetton wallet, deployed by the faucet's mint in the test before.
    const deployed = jettonWalletOf(sender.address)
    const body = { from_wallet: sender.wallet_id, amount: "1", chain: "ton", token: "USDT" }
    for (const to_address of [
      undeployed.toString({ bounceable: false }),
      undeployed.toString({ bounceable: true }),
      undeployed.toRawString(),
      deployed.toString({ bounceable: false }),
    ]) {
      const error = expectError(
        await client.post("/api/v2/transfers", { ...body, to_address }),
        422,
        "token_account_address",
      )
      expect(error.param).toBe("to_address")
      expect(error.message).toContain("jetton wallet")
    }
    // Nothing was reserved for any of them.
    const listed = expectOk(
      await client.get<{ data: ReadonlyArray<TransferView> }>("/api/v2/transfers?limit=100"),
    )
    expect(listed.data.filter((transfer) => transfer.to_address !== recipient.address)).toEqual([])
  })
})
