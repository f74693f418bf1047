// Proves the sandbox's local chains end to end against the real platform process (one anvil,
// SANDBOX_EVM_CHAINS=ethereum, and the LiteSVM Solana chain, SANDBOX_SOLANA=true): GET /api/v2/chains
// shows a live gas figure and the sandbox's token contracts (mints) for ethereum and solana only; the
// faucet credits the ledger and mints on chain; POST
// /api/v2/transfers sends to a fresh address and completes with the chain's proof within seconds:
// the recipient holds exactly the amount on chain, the wallet's ledger balance fell by amount + fee,
// and a payment.completed webhook arrives. A transfer to another custody wallet of the tenant is a
// deposit there: credited once, announced by deposit.confirmed and listed by GET /api/v2/deposits,
// while the faucet's mint is not a deposit. GET /api/v1/transactions/{id}/verify re-reads the chain
// and confirms the completed transfer with the same proof. The same holds for a Solana transfer, whose
// chain lives inside the platform process: the verification is the test's window onto it. A production
// transfer on ethereum is refused (chain_unavailable): only the sandbox runs it here. Bad requests get
// the platform's error shape (an unknown chain is unsupported_chain). An Idempotency-Key used by a
// transfer is taken for every endpoint, and its retries are marked replays showing the transfer now.
// An all-upper-case EVM address is sent to in its checksummed spelling; a transfer that failed before
// it was broadcast is answered never_broadcast by the verification.

import { base58 } from "@scure/base"
import { generateKeyPairSigner, isAddress, address as solanaAddress } from "@solana/kit"
import { findAssociatedTokenPda, TOKEN_PROGRAM_ADDRESS } from "@solana-program/token"
import pg from "pg"
import { type Address, createPublicClient, erc20Abi, http } from "viem"
import { generatePrivateKey, privateKeyToAccount } from "viem/accounts"
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest"
import { chains } from "../../domain/chains/registry.ts"
import { paymentFee } from "../../domain/ledger/fee.ts"
import { formatAmount } from "../../domain/money/amount.ts"
import type {
  Balance,
  ChainInfo,
  ChainTransfer,
  Deposit,
  Identity,
  Transaction,
  TransactionVerification,
  Wallet,
} from "../../src/http/api.ts"
import { expectError, expectOk } from "../support/api-expect.ts"
import {
  type ApiClient,
  apiClient,
  type RunningPlatform,
  registerTenant,
  startPlatform,
} from "../support/platform-process.ts"
import { startWebhookReceiver, type WebhookReceiver } from "../support/webhook-receiver.ts"

type ChainView = typeof ChainInfo.Type
type TransferView = typeof ChainTransfer.Type

const secret = "whsec_transfers_e2e"
/** Waits return as soon as the chain is done; the bound only matters on a slow, busy host. */
const completion_wait_ms_max = 60_000
// Tests that wait on chains more than once may take several such bounds on a slow host.
vi.setConfig({ testTimeout: 180_000 })

let platform: RunningPlatform
let client: ApiClient
let receiver: WebhookReceiver
let wallet: typeof Wallet.Type
let usdc: Address
let rpc_url: string
/** The transfer the settlement test completed; the verification tests re-read it from the chain. */
let completed: TransferView | undefined

/** The local chain's RPC URL, from the platform's "sandbox chain running" log line. */
const sandboxRpcUrl = (output: string): string => {
  for (const line of output.split("\n")) {
    if (!line.includes("sandbox chain running")) continue
    const match = /"rpc_url":"([^"]+)"/.exec(line)
    if (match?.[1] !== undefined) return match[1]
  }
  throw new Error(`no sandbox chain in the platform's log:\n${output}`)
}

/** A wallet of the tenant (or of the client `as` calls with), created through the API. */
const createWallet = async (external_id: string, label: string, chain: string, as: ApiClient = client) =>
  expectOk(await as.post<typeof Wallet.Type>("/api/v1/wallets", { external_id, label, chain }), 201)

/** Test USDC from the sandbox faucet (minted on the wallet's local chain). */
const faucet = async (wallet_id: string, amount: string) =>
  expectOk(await client.post("/api/v1/sandbox/faucet", { wallet_id, token: "USDC", amount }))

const tokenBalance = (owner: Address) =>
  createPublicClient({ transport: http(rpc_url) }).readContract({
    address: usdc,
    abi: erc20Abi,
    functionName: "balanceOf",
    args: [owner],
  })

beforeAll(async () => {
  receiver = await startWebhookReceiver(secret)
  platform = await startPlatform({
    SANDBOX_EVM_CHAINS: "ethereum",
    SANDBOX_SOLANA: "true",
    GAS_USD_RATES: "ethereum=3500,solana=150",
    LOG_LEVEL: "info",
  })
  rpc_url = sandboxRpcUrl(platform.output())
  ;({ client } = await registerTenant(platform.url))
  expectOk(
    await client.post("/api/v1/webhooks", {
      url: receiver.url,
      events: ["payment.completed", "deposit.confirmed"],
      secret,
    }),
    201,
  )
  wallet = await createWallet("sender", "sender", "ethereum")
})

afterAll(async () => {
  await platform?.stop()
  await receiver?.close()
})

describe("GET /api/v2/chains with a local ethereum and a local solana", () => {
  it("shows live gas (native and USD) and the sandbox's contracts for ethereum and solana only", async () => {
    const body = expectOk(await client.get<{ data: ReadonlyArray<ChainView> }>("/api/v2/chains"))
    const ethereum = body.data.find((chain) => chain.chain === "ethereum")
    expect(ethereum?.gas_status).toBe("live")
    expect(Number(ethereum?.gas?.native)).toBeGreaterThan(0)
    expect(Number(ethereum?.gas?.usd)).toBeGreaterThan(0)
    const contracts = ethereum?.tokens.map((token) => token.contract_address) ?? []
    expect(contracts).toHaveLength(2)
    for (const contract of contracts) expect(contract).toMatch(/^0x[0-9a-fA-F]{40}$/)
    expect(new Set(contracts).size).toBe(2)
    usdc = ethereum?.tokens.find((token) => token.token === "USDC")?.contract_address as Address

    // One signature at LiteSVM's 5,000 lamports, at 150 USD per SOL.
    const solana = body.data.find((chain) => chain.chain === "solana")
    expect(solana).toMatchObject({ gas_status: "live", gas: { native: "0.000005", usd: "0.00075" } })
    const mints = solana?.tokens.map((token) => token.contract_address) ?? []
    expect(mints).toHaveLength(2)
    for (const mint of mints) expect(isAddress(mint ?? "")).toBe(true)
    expect(new Set(mints).size).toBe(2)
    // The sandbox's own mints, not mainnet's.
    expect(mints).not.toContain("EPjFWdd5AufqSSqeM2qN1xzybapC8G4wEGGkZwyTDt1v")

    // The depth the local chains are final at, which their transfers' proofs show (mainnet's was
    // shown: 64 blocks on ethereum, while sandbox transfers completed at 1).
    expect(ethereum?.confirmations).toMatchObject({ count: 1, unit: "blocks" })
    expect(ethereum?.confirmations.reason).toMatch(/final at 1; on mainnet the platform waits 64/)
    expect(solana?.confirmations).toMatchObject({ count: 2, unit: "slots" })

    for (const other of body.data.filter((chain) => !["ethereum", "solana"].includes(chain.chain))) {
      expect(other).toMatchObject({ gas: null, gas_status: "unavailable" })
      for (const token of other.tokens) expect(token.contract_address).toBeNull()
      // No chain runs here: the registry's policy, as production would wait.
      expect(other.confirmations.count).toBe(
        chains.find((chain) => chain.chain === other.chain)?.confirmations.count,
      )
    }
  })
})

describe("POST /api/v2/transfers on the local chain", () => {
  it("funds on chain with the faucet, then sends to a fresh address with a proof", async () => {
    expectOk(
      await client.post<typeof Balance.Type>("/api/v1/sandbox/faucet", {
        wallet_id: wallet.wallet_id,
        token: "USDC",
        amount: "100",
      }),
    )
    expect(await tokenBalance(wallet.address as Address)).toBe(100_000_000n)
    const recipient = privateKeyToAccount(generatePrivateKey()).address
    /** The request under one Idempotency-Key, with `metadata`. */
    const send = (metadata: Record<string, string>) =>
      client.post<TransferView>(
        "/api/v2/transfers",
        {
          from_wallet: wallet.wallet_id,
          to_address: recipient,
          amount: "25",
          token: "USDC",
          chain: "ethereum",
          metadata,
        },
        { "idempotency-key": "transfer-e2e-1" },
      )
    const requested = expectOk(await send({ order_id: "ord_1", customer: "c-7" }), 202)
    expect(requested).toMatchObject({
      status: "pending",
      amount: "25.00",
      token: "USDC",
      to_address: recipient,
      metadata: { order_id: "ord_1", customer: "c-7" },
    })

    // The same object, its keys in another order: the same request.
    const retry = () => send({ customer: "c-7", order_id: "ord_1" })
    const replayed = await retry()
    expect(expectOk(replayed, 202).transaction_id).toBe(requested.transaction_id)
    expect(replayed.headers.get("idempotent-replayed")).toBe("true")
    // The key is taken for every endpoint: another request with it is refused, the transfer's retry
    // is still its replay.
    expectError(
      await client.post(
        "/api/v1/wallets",
        { external_id: "key-thief", label: "x", chain: "ethereum" },
        { "idempotency-key": "transfer-e2e-1" },
      ),
      409,
      "idempotency_key_reused",
    )
    // Other metadata is another request.
    expectError(await send({ order_id: "ord_2", customer: "c-7" }), 409, "idempotency_key_reused")
    const again = await retry()
    expect(expectOk(again, 202).transaction_id).toBe(requested.transaction_id)
    expect(again.headers.get("idempotent-replayed")).toBe("true")

    const started = Date.now()
    let current = requested
    while (current.status === "pending" && Date.now() - started < completion_wait_ms_max) {
      await new Promise((resolve) => setTimeout(resolve, 200))
      current = expectOk(await client.get<TransferView>(`/api/v2/transfers/${requested.transaction_id}`))
    }
    expect(current.status).toBe("completed")
    completed = current
    // The social payments' endpoint points to where the transfer is.
    const elsewhere = expectError(
      await client.get(`/api/v1/transactions/${requested.transaction_id}`),
      404,
      "transaction_not_found",
    )
    expect(elsewhere.message).toContain(`GET /api/v2/transfers/${requested.transaction_id}`)
    expect(current.proof?.tx_hash).toBe(current.tx_hash)
    expect(current.proof?.confirmations).toBeGreaterThanOrEqual(1)
    expect(await tokenBalance(recipient)).toBe(25_000_000n)

    const balance = expectOk(
      await client.get<typeof Balance.Type>(`/api/v1/wallets/${wallet.wallet_id}/balance`),
    )
    const expected = 100_000_000n - 25_000_000n - paymentFee(25_000_000n)
    expect(balance.tokens.find((token) => token.token === "USDC")?.amount).toBe(formatAmount(expected, 6))

    const webhook = await receiver.waitFor(
      (request) => request.body.data.transaction_id === requested.transaction_id,
      completion_wait_ms_max,
    )
    expect(webhook.body.event_type).toBe("payment.completed")
    expect(webhook.body.data).toMatchObject({
      status: "completed",
      tx_hash: current.tx_hash,
      metadata: { order_id: "ord_1", customer: "c-7" },
    })
    expect(current.metadata).toEqual({ order_id: "ord_1", customer: "c-7" })

    // A retry answers the transfer as it is now, not its first (pending) answer.
    const late = await retry()
    expect(expectOk(late, 202)).toMatchObject({ status: "completed", tx_hash: current.tx_hash })
    expect(late.headers.get("idempotent-replayed")).toBe("true")
  })

  it("sends to an all-upper-case address, stored and signed in its EIP-55 checksummed spelling", async () => {
    const recipient = privateKeyToAccount(generatePrivateKey()).address
    const requested = expectOk(
      await client.post<TransferView>("/api/v2/transfers", {
        from_wallet: wallet.wallet_id,
        to_address: `0x${recipient.slice(2).toUpperCase()}`,
        amount: "1",
        token: "USDC",
        chain: "ethereum",
      }),
      202,
    )
    expect(requested.to_address).toBe(recipient)
    const started = Date.now()
    let current = requested
    while (current.status === "pending" && Date.now() - started < completion_wait_ms_max) {
      await new Promise((resolve) => setTimeout(resolve, 200))
      current = expectOk(await client.get<TransferView>(`/api/v2/transfers/${requested.transaction_id}`))
    }
    expect(current).toMatchObject({ status: "completed", failure: null })
    expect(await tokenBalance(recipient)).toBe(1_000_000n)
  })

  it("credits a transfer to another custody wallet of the tenant once, as a deposit; the faucet's mint is none", async () => {
    const payee = await createWallet("deposit-payee", "payee", "ethereum")
    const sent = expectOk(
      await client.post<TransferView>("/api/v2/transfers", {
        from_wallet: wallet.wallet_id,
        to_address: payee.address,
        amount: "10",
        token: "USDC",
        chain: "ethereum",
      }),
      202,
    )
    const webhook = await receiver.waitFor(
      (request) =>
        request.body.event_type === "deposit.confirmed" && request.body.data.wallet_id === payee.wallet_id,
      completion_wait_ms_max,
    )
    const transfer = expectOk(await client.get<TransferView>(`/api/v2/transfers/${sent.transaction_id}`))
    expect(webhook.body.data).toMatchObject({
      chain: "ethereum",
      token: "USDC",
      amount: "10.00",
      from_address: wallet.address,
      to_address: payee.address,
      tx_hash: transfer.tx_hash,
    })
    type DepositPage = { data: ReadonlyArray<typeof Deposit.Type>; has_more: boolean }
    const listed = expectOk(await client.get<DepositPage>(`/api/v2/deposits?wallet_id=${payee.wallet_id}`))
    expect(listed.data.map((deposit) => [deposit.deposit_id, deposit.status, deposit.amount])).toEqual([
      [webhook.body.data.deposit_id, "credited", "10.00"],
    ])
    const balance = expectOk(
      await client.get<typeof Balance.Type>(`/api/v1/wallets/${payee.wallet_id}/balance`),
    )
    expect(balance.tokens.find((token) => token.token === "USDC")?.amount).toBe("10.00")
    // The sender was funded by the faucet only: its mint from the zero address is no deposit.
    const minted = expectOk(await client.get<DepositPage>(`/api/v2/deposits?wallet_id=${wallet.wallet_id}`))
    expect(minted.data).toEqual([])
    expectError(await client.get("/api/v2/deposits?wallet_id=wal_missing"), 404, "wallet_not_found")
    // Later scans change nothing: still one deposit, one credit.
    await new Promise((resolve) => setTimeout(resolve, 2_500))
    expect(
      expectOk(await client.get<DepositPage>(`/api/v2/deposits?wallet_id=${payee.wallet_id}`)).data,
    ).toHaveLength(1)
    const again = expectOk(
      await client.get<typeof Balance.Type>(`/api/v1/wallets/${payee.wallet_id}/balance`),
    )
    expect(again.tokens.find((token) => token.token === "USDC")?.amount).toBe("10.00")
  })

  it("refuses a chain other than the wallet's, a bad address and an unknown transfer", async () => {
    const body = { from_wallet: wallet.wallet_id, to_address: wallet.address, amount: "1", token: "USDC" }
    expectError(await client.post("/api/v2/transfers", { ...body, chain: "polygon" }), 400, "chain_mismatch")
    const unknown = expectError(
      await client.post("/api/v2/transfers", { ...body, chain: "bitcoin" }),
      400,
      "unsupported_chain",
    )
    expect(unknown.param).toBe("chain")
    expectError(
      await client.post("/api/v2/transfers", { ...body, chain: "ethereum", to_address: "0x1234" }),
      400,
      "invalid_address",
    )
    expectError(await client.get("/api/v2/transfers/txn_missing"), 404, "transfer_not_found")
    // Metadata is checked as a payment's is, before anything is reserved.
    const listed = async () =>
      expectOk(await client.get<{ data: ReadonlyArray<TransferView> }>("/api/v2/transfers?limit=100")).data
        .length
    const before = await listed()
    const fresh = privateKeyToAccount(generatePrivateKey()).address
    for (const [metadata, param] of [
      [Object.fromEntries(Array.from({ length: 51 }, (_, i) => [`k${i}`, "v"])), "metadata"],
      [{ order_id: "o".repeat(501) }, "metadata.order_id"],
      [{ "": "v" }, "metadata."],
    ] as const) {
      const refused = expectError(
        await client.post("/api/v2/transfers", { ...body, to_address: fresh, chain: "ethereum", metadata }),
        400,
        "invalid_metadata",
      )
      expect(refused.param).toBe(param)
    }
    expect(await listed()).toBe(before)
  })

  it("refuses 422 its own address, the token's contract and the null address, however spelled, moving nothing", async () => {
    const balanceOf = async () =>
      expectOk(await client.get<typeof Balance.Type>(`/api/v1/wallets/${wallet.wallet_id}/balance`))
    const transfers = async () =>
      expectOk(
        await client.get<{ data: ReadonlyArray<TransferView> }>(
          `/api/v2/transfers?wallet_id=${wallet.wallet_id}&limit=100`,
        ),
      ).data.length
    const before = {
      balance: await balanceOf(),
      transfers: await transfers(),
      chain: await tokenBalance(wallet.address as Address),
    }
    expect(before.chain).toBeGreaterThan(0n)
    const chains = expectOk(await client.get<{ data: ReadonlyArray<ChainView> }>("/api/v2/chains")).data
    const usdt = chains.find((chain) => chain.chain === "ethereum")?.tokens.find((t) => t.token === "USDT")
    const cases: ReadonlyArray<readonly [string, string]> = [
      [wallet.address.toLowerCase(), "same_address"],
      // The chain's other token: USDC sent to the USDT contract is stuck there too.
      [usdt?.contract_address ?? "", "token_contract_address"],
      [`0x${usdc.slice(2).toUpperCase()}`, "token_contract_address"],
      [usdc.toLowerCase(), "token_contract_address"],
      ["0x0000000000000000000000000000000000000000", "null_address"],
    ]
    for (const [to_address, code] of cases) {
      const error = expectError(
        await client.post("/api/v2/transfers", {
          from_wallet: wallet.wallet_id,
          to_address,
          amount: "1",
          token: "USDC",
          chain: "ethereum",
        }),
        422,
        code,
      )
      expect(error.param).toBe("to_address")
    }
    expect(await balanceOf()).toEqual(before.balance)
    expect(await transfers()).toBe(before.transfers)
    expect(await tokenBalance(wallet.address as Address)).toBe(before.chain)
  })

  it("refuses 422 what the sending address does not hold on chain: money received by social payment stays at the payer's address", async () => {
    const payee = await createWallet("social-payee", "social payee", "ethereum")
    expectOk(
      await client.post("/api/v1/identities", {
        wallet_id: payee.wallet_id,
        kind: "email",
        value: "payee@example.com",
      }),
      201,
    )
    expectOk(
      await client.post("/api/social-payments/pay", {
        recipient: "payee@example.com",
        amount: "10",
        token: "USDC",
        from_wallet: wallet.wallet_id,
      }),
    )
    // The ledger says 10.00; the payee's address holds nothing on chain.
    const balance = expectOk(
      await client.get<typeof Balance.Type>(`/api/v1/wallets/${payee.wallet_id}/balance`),
    )
    expect(balance.tokens.find((t) => t.token === "USDC")?.amount).toBe("10.00")
    expect(await tokenBalance(payee.address as Address)).toBe(0n)
    const refused = expectError(
      await client.post("/api/v2/transfers", {
        from_wallet: payee.wallet_id,
        to_address: privateKeyToAccount(generatePrivateKey()).address,
        amount: "5",
        token: "USDC",
        chain: "ethereum",
      }),
      422,
      "onchain_balance_short",
    )
    expect(refused.param).toBe("amount")
    expect(refused.message).toMatch(/holds 0\.00 USDC at its address on chain; this transfer needs 5\.00/)
    // Short in the ledger as well (10.00 does not cover 20 and its fee): the plainer refusal.
    const broke = expectError(
      await client.post("/api/v2/transfers", {
        from_wallet: payee.wallet_id,
        to_address: privateKeyToAccount(generatePrivateKey()).address,
        amount: "20",
        token: "USDC",
        chain: "ethereum",
      }),
      422,
      "insufficient_funds",
    )
    expect(broke.param).toBe("amount")
    expect(
      expectOk(
        await client.get<{ data: ReadonlyArray<TransferView> }>(
          `/api/v2/transfers?wallet_id=${payee.wallet_id}`,
        ),
      ).data,
    ).toEqual([])
  })

  it("takes off the on-chain balance only what pending transfers have still to send: one already in a block is not counted twice", async () => {
    const sender = await createWallet("mined-pending", "mined, not settled", "ethereum")
    await faucet(sender.wallet_id, "10")
    const send = (amount: string) =>
      client.post<TransferView>("/api/v2/transfers", {
        from_wallet: sender.wallet_id,
        to_address: privateKeyToAccount(generatePrivateKey()).address,
        amount,
        token: "USDC",
        chain: "ethereum",
      })
    const first = expectOk(await send("6"), 202)
    const settled = async (id: string) => {
      const started = Date.now()
      let current = expectOk(await client.get<TransferView>(`/api/v2/transfers/${id}`))
      while (current.status === "pending" && Date.now() - started < completion_wait_ms_max) {
        await new Promise((resolve) => setTimeout(resolve, 200))
        current = expectOk(await client.get<TransferView>(`/api/v2/transfers/${id}`))
      }
      return current
    }
    expect((await settled(first.transaction_id)).status).toBe("completed")
    expect(await tokenBalance(sender.address as Address)).toBe(4_000_000n)
    // Its ledger balance (3.982) rises to 8.982 by a social payment, which stays at the payer's
    // address on chain: only the chain side is short for 5 below.
    expectOk(
      await client.post("/api/v1/identities", {
        wallet_id: sender.wallet_id,
        kind: "email",
        value: "mined-pending@example.com",
      }),
      201,
    )
    expectOk(
      await client.post("/api/social-payments/pay", {
        recipient: "mined-pending@example.com",
        amount: "5",
        token: "USDC",
        from_wallet: wallet.wallet_id,
      }),
    )
    // The moment between its block and its settlement in the ledger, held open: the transfer is
    // pending again in the table while its tokens have left the address.
    const db = new pg.Client({ connectionString: platform.database.url })
    await db.connect()
    try {
      await db.query(
        "update platform.chain_transfers set status = 'pending', completed_at = null where transfer_id = $1",
        [first.transaction_id],
      )
      const short = expectError(await send("5"), 422, "onchain_balance_short")
      expect(short.message).toMatch(/holds 4\.00 USDC at its address on chain; this transfer needs 5\.00/)
      // 4.00 on chain covers 3.50: the 6.00 already in a block is not taken off a second time.
      const second = expectOk(await send("3.5"), 202)
      await db.query(
        "update platform.chain_transfers set status = 'completed', completed_at = now() where transfer_id = $1",
        [first.transaction_id],
      )
      expect((await settled(second.transaction_id)).status).toBe("completed")
      expect(await tokenBalance(sender.address as Address)).toBe(500_000n)
    } finally {
      await db.end()
    }
  })

  it("refuses 422 a custody address of the platform on another EVM chain, where no wallet of this chain would be credited", async () => {
    // A bsc wallet's address is a valid ethereum address too; no bsc chain needs to run for it.
    const other = await createWallet("bsc", "bsc", "bsc")
    const refused = expectError(
      await client.post("/api/v2/transfers", {
        from_wallet: wallet.wallet_id,
        to_address: other.address.toLowerCase(),
        amount: "1",
        token: "USDC",
        chain: "ethereum",
      }),
      422,
      "custody_address_other_chain",
    )
    expect(refused.param).toBe("to_address")
    expect(refused.message).toMatch(/is a wallet of the platform on bsc, not on ethereum/)
    expect(refused.message).toContain("or to the address of a wallet on ethereum.")
    // A Tron wallet's account in its 0x spelling (one key's account on both): credited to no one.
    const tron = await createWallet("tron", "tron", "tron")
    const hex = `0x${Buffer.from(base58.decode(tron.address)).subarray(1, 21).toString("hex")}`
    const refusedTron = expectError(
      await client.post("/api/v2/transfers", {
        from_wallet: wallet.wallet_id,
        to_address: hex,
        amount: "1",
        token: "USDC",
        chain: "ethereum",
      }),
      422,
      "custody_address_other_chain",
    )
    expect(refusedTron.message).toMatch(/is a wallet of the platform on tron, not on ethereum/)
  })

  it("lists the tenant's transfers newest first, by cursor, filtered by wallet and status", async () => {
    interface Page {
      readonly data: ReadonlyArray<TransferView>
      readonly has_more: boolean
      readonly next_cursor: string | null
    }
    const all = expectOk(await client.get<Page>(`/api/v2/transfers?wallet_id=${wallet.wallet_id}&limit=100`))
    expect(all.data.length).toBeGreaterThanOrEqual(2)
    const ids = all.data.map((t) => t.transaction_id)
    expect(ids).toEqual([...ids].sort().reverse())
    // One at a time by cursor: the same transfers, each once.
    const paged: Array<string> = []
    let cursor: string | null = null
    do {
      const page: Page = expectOk(
        await client.get<Page>(
          `/api/v2/transfers?wallet_id=${wallet.wallet_id}&limit=1${cursor === null ? "" : `&starting_after=${cursor}`}`,
        ),
      )
      paged.push(...page.data.map((t) => t.transaction_id))
      cursor = page.next_cursor
    } while (cursor !== null)
    expect(paged).toEqual(ids)
    const completed = expectOk(await client.get<Page>("/api/v2/transfers?status=completed&limit=100"))
    expect(completed.data.every((t) => t.status === "completed")).toBe(true)
    expectError(await client.get("/api/v2/transfers?status=sent"), 400, "invalid_status")
    expectError(await client.get("/api/v2/transfers?starting_after=txn_missing"), 400, "invalid_cursor")
  })
})

describe("POST /api/v2/transfers in production", () => {
  it("is refused with chain_unavailable where no production adapter runs (no CHAIN_RPC_URL_ETHEREUM)", async () => {
    const { client: sandbox, credentials } = await registerTenant(platform.url)
    expectOk(
      await sandbox.post("/api/v1/tenant/verification", {
        legal_name: "Acme Payments GmbH",
        registration_number: "HRB 12345",
        country: "DE",
        representative: { name: "Ada Example", country: "DE" },
      }),
    )
    const key = expectOk(
      await sandbox.post<{ api_key: string }>("/api/v1/api-keys", { environment: "production" }),
      201,
    )
    const production = apiClient(platform.url, { tenant_id: credentials.tenant_id, api_key: key.api_key })
    const sender = await createWallet("production-sender", "production", "ethereum", production)
    // The sandbox runs a local ethereum; production has none configured: the environment decides.
    expectError(
      await production.post("/api/v2/transfers", {
        from_wallet: sender.wallet_id,
        to_address: wallet.address,
        amount: "1",
        token: "USDC",
        chain: "ethereum",
      }),
      400,
      "chain_unavailable",
    )
    // The production wallet's address, sent to on the sandbox's chain: credited to no wallet there.
    const toProduction = expectError(
      await client.post("/api/v2/transfers", {
        from_wallet: wallet.wallet_id,
        to_address: sender.address,
        amount: "1",
        token: "USDC",
        chain: "ethereum",
      }),
      422,
      "custody_address_other_chain",
    )
    expect(toProduction.message).toMatch(/is a wallet of the platform in production, not in sandbox/)
    // Outside EVM too: a production Solana wallet, sent to from the sandbox's Solana.
    const productionSolana = await createWallet("production-solana", "production", "solana", production)
    const sandboxSolana = await createWallet("sandbox-solana-to-production", "sandbox", "solana")
    const toProductionSolana = expectError(
      await client.post("/api/v2/transfers", {
        from_wallet: sandboxSolana.wallet_id,
        to_address: productionSolana.address,
        amount: "1",
        token: "USDC",
        chain: "solana",
      }),
      422,
      "custody_address_other_chain",
    )
    expect(toProductionSolana.message).toMatch(/is a wallet of the platform in production, not in sandbox/)
  })
})

describe("GET /api/v1/transactions/{id}/verify", () => {
  it("re-reads a completed transfer from the chain: every check passes with the recorded proof", async () => {
    expect(completed, "the settlement test completed a transfer").toBeDefined()
    const transfer = completed as TransferView
    const verified = expectOk(
      await client.get<typeof TransactionVerification.Type>(
        `/api/v1/transactions/${transfer.transaction_id}/verify`,
      ),
    )
    expect(verified).toMatchObject({
      transaction_id: transfer.transaction_id,
      chain: "ethereum",
      tx_hash: transfer.tx_hash,
      checks: { amount: true, token: true, sender: true, receiver: true },
      matches: true,
      proof: {
        block_number: transfer.proof?.block_number,
        block_hash: transfer.proof?.block_hash,
        log_index: transfer.proof?.log_index,
      },
    })
    expect(["confirmed", "finalized"]).toContain(verified.status)
    expect(verified.proof?.confirmations).toBeGreaterThanOrEqual(transfer.proof?.confirmations ?? 1)
  })

  it("answers 422 never_broadcast for a transfer that failed before it was signed and sent", async () => {
    const sender = await createWallet("no-gas-sender", "no gas", "ethereum")
    await faucet(sender.wallet_id, "5")
    // The faucet topped up its gas; take it away so that the worker fails the transfer before signing.
    const emptied = await fetch(rpc_url, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({
        jsonrpc: "2.0",
        id: 1,
        method: "anvil_setBalance",
        params: [sender.address, "0x0"],
      }),
    })
    expect(emptied.ok).toBe(true)
    const requested = expectOk(
      await client.post<TransferView>("/api/v2/transfers", {
        from_wallet: sender.wallet_id,
        to_address: wallet.address,
        amount: "1",
        token: "USDC",
        chain: "ethereum",
      }),
      202,
    )
    const started = Date.now()
    let current = requested
    while (current.status === "pending" && Date.now() - started < completion_wait_ms_max) {
      await new Promise((resolve) => setTimeout(resolve, 200))
      current = expectOk(await client.get<TransferView>(`/api/v2/transfers/${requested.transaction_id}`))
    }
    expect(current).toMatchObject({ status: "failed", tx_hash: null, failure: { code: "insufficient_gas" } })
    const refused = expectError(
      await client.get(`/api/v1/transactions/${requested.transaction_id}/verify`),
      422,
      "never_broadcast",
    )
    expect(refused.message).toContain("before it was broadcast")
    // Signed, then failed before any node was handed the bytes (a blockhash that expired, the
    // sandbox's chains started anew): nothing is on chain either. Written as such a row is left.
    const db = new pg.Client({ connectionString: platform.database.url })
    await db.connect()
    try {
      await db.query(
        `update platform.chain_transfers set tx_hash = $2, raw_transaction = '0x00', nonce = 0, signed_at = now()
          where transfer_id = $1 and broadcast_attempted_at is null and broadcast_at is null`,
        [requested.transaction_id, `0x${"ab".repeat(32)}`],
      )
    } finally {
      await db.end()
    }
    expectError(
      await client.get(`/api/v1/transactions/${requested.transaction_id}/verify`),
      422,
      "never_broadcast",
    )
  })

  it("answers 422 not_on_chain for a social payment and 404 for an unknown or another tenant's id", async () => {
    const payee = await createWallet("verify-payee", "payee", "ethereum")
    const identity = expectOk(
      await client.post<typeof Identity.Type>("/api/v1/identities", {
        wallet_id: payee.wallet_id,
        kind: "email",
        value: "verify-payee@example.com",
      }),
      201,
    )
    const paid = expectOk(
      await client.post<typeof Transaction.Type>("/api/social-payments/pay", {
        recipient: identity.value,
        amount: "1",
        token: "USDC",
        from_wallet: wallet.wallet_id,
      }),
    )
    expectError(await client.get(`/api/v1/transactions/${paid.transaction_id}/verify`), 422, "not_on_chain")
    expectError(await client.get("/api/v1/transactions/txn_missing/verify"), 404, "transaction_not_found")
    // The transfers' endpoint points to where a social payment is (and the payments' one back).
    const elsewhere = expectError(
      await client.get(`/api/v2/transfers/${paid.transaction_id}`),
      404,
      "transfer_not_found",
    )
    expect(elsewhere.message).toContain(`GET /api/v1/transactions/${paid.transaction_id}`)
    const unknown = expectError(await client.get("/api/v2/transfers/txn_missing"), 404, "transfer_not_found")
    expect(unknown.message).toBe('No transfer "txn_missing".')
    const other = await registerTenant(platform.url)
    const foreign = expectError(
      await other.client.get(`/api/v2/transfers/${paid.transaction_id}`),
      404,
      "transfer_not_found",
    )
    expect(foreign.message).not.toContain("social payment")
    const transfer_id = completed?.transaction_id ?? "txn_missing"
    expectError(
      await other.client.get(`/api/v1/transactions/${transfer_id}/verify`),
      404,
      "transaction_not_found",
    )
  })
})

describe("POST /api/v2/transfers on the local Solana chain", () => {
  it("funds with the faucet, sends USDC to a fresh address, completes with a proof the chain verifies", async () => {
    const sender = await createWallet("solana-sender", "solana sender", "solana")
    expectOk(
      await client.post<typeof Balance.Type>("/api/v1/sandbox/faucet", {
        wallet_id: sender.wallet_id,
        token: "USDC",
        amount: "100",
      }),
    )
    const recipient = (await generateKeyPairSigner()).address
    const requested = expectOk(
      await client.post<TransferView>("/api/v2/transfers", {
        from_wallet: sender.wallet_id,
        to_address: recipient,
        amount: "25",
        token: "USDC",
        chain: "solana",
      }),
      202,
    )
    expect(requested).toMatchObject({
      status: "pending",
      amount: "25.00",
      chain: "solana",
      to_address: recipient,
    })

    const started = Date.now()
    let current = requested
    while (current.status === "pending" && Date.now() - started < completion_wait_ms_max) {
      await new Promise((resolve) => setTimeout(resolve, 200))
      current = expectOk(await client.get<TransferView>(`/api/v2/transfers/${requested.transaction_id}`))
    }
    expect(current.status).toBe("completed")
    expect(current.proof?.tx_hash).toBe(current.tx_hash)
    // Base58 signature; the recipient's token account was created in the transfer (instruction 0).
    expect(current.tx_hash).toMatch(/^[1-9A-HJ-NP-Za-km-z]{64,88}$/)
    expect(current.proof?.log_index).toBe(1)

    const balance = expectOk(
      await client.get<typeof Balance.Type>(`/api/v1/wallets/${sender.wallet_id}/balance`),
    )
    const expected = 100_000_000n - 25_000_000n - paymentFee(25_000_000n)
    expect(balance.tokens.find((token) => token.token === "USDC")?.amount).toBe(formatAmount(expected, 6))

    const webhook = await receiver.waitFor(
      (request) => request.body.data.transaction_id === requested.transaction_id,
      completion_wait_ms_max,
    )
    expect(webhook.body.event_type).toBe("payment.completed")
    expect(webhook.body.data).toMatchObject({
      status: "completed",
      chain: "solana",
      tx_hash: current.tx_hash,
    })

    // The chain runs inside the platform process: its verification is how the test reads it.
    const verified = expectOk(
      await client.get<typeof TransactionVerification.Type>(
        `/api/v1/transactions/${requested.transaction_id}/verify`,
      ),
    )
    expect(verified).toMatchObject({
      chain: "solana",
      tx_hash: current.tx_hash,
      status: "finalized",
      checks: { amount: true, token: true, sender: true, receiver: true },
      matches: true,
      proof: {
        block_number: current.proof?.block_number,
        block_hash: current.proof?.block_hash,
        log_index: 1,
      },
    })
  })

  it("refuses a bad Solana address, its own, the mint and the null account before any money moves", async () => {
    const sender = await createWallet("solana-bad-address", "solana", "solana")
    expectError(
      await client.post("/api/v2/transfers", {
        from_wallet: sender.wallet_id,
        to_address: wallet.address,
        amount: "1",
        token: "USDC",
        chain: "solana",
      }),
      400,
      "invalid_address",
    )
    // Its own address and the USDC mint are Solana addresses where nothing would arrive.
    const chains = expectOk(await client.get<{ data: ReadonlyArray<ChainView> }>("/api/v2/chains")).data
    const mints = chains.find((chain) => chain.chain === "solana")?.tokens ?? []
    const mint = (token: string) => mints.find((t) => t.token === token)?.contract_address ?? ""
    const sendUsdc = (to_address: string) =>
      client.post("/api/v2/transfers", {
        from_wallet: sender.wallet_id,
        to_address,
        amount: "1",
        token: "USDC",
        chain: "solana",
      })
    for (const [to_address, code] of [
      [sender.address, "same_address"],
      [mint("USDC"), "token_contract_address"],
      [mint("USDT"), "token_contract_address"],
      ["TokenkegQfeZyiNwAJbNbGKPFXCWuBvf9Ss623VQ5DA", "token_contract_address"],
      ["11111111111111111111111111111111", "null_address"],
      // The runtime's own accounts: native programs and sysvars (they were sent to, and lost).
      ["Vote111111111111111111111111111111111111111", "program_address"],
      ["SysvarRent111111111111111111111111111111111", "program_address"],
      ["BPFLoaderUpgradeab1e11111111111111111111111", "program_address"],
    ] as const) {
      expectError(await sendUsdc(to_address), 422, code)
    }
    // A wallet's token accounts, not created yet: no key signs for them, and no wallet is credited.
    const receiver = await createWallet("solana-ata-owner", "solana", "solana")
    for (const token of ["USDC", "USDT"]) {
      const [to_address] = await findAssociatedTokenPda({
        owner: solanaAddress(receiver.address),
        mint: solanaAddress(mint(token)),
        tokenProgram: TOKEN_PROGRAM_ADDRESS,
      })
      expectError(await sendUsdc(to_address), 422, "token_account_address")
    }
  })
})
