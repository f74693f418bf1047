// Proves the on-chain transfer flow on Solana with real parts (the sandbox's LiteSVM chain with its
// SPL USDC mint and its block clock, PostgreSQL, pg-boss, the ledger writer): a transfer that
// completes with the chain's proof (and verifies against the chain), one that reverts on chain (the
// recipient's token account frozen after signing), one whose sender has no SOL for the fee, one
// dropped (its blockhash expired before it reached the chain), two equal transfers that stay two
// transactions, and one whose worker process is killed right after the broadcast, which a new worker
// completes exactly once. Failed transfers release the reservation to the last unit.

import { mnemonicToSeedSync } from "@scure/bip39"
import type { Address } from "@solana/kit"
import { Effect } from "effect"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { makeSolanaAdapter } from "../../adapters/chains/solana/adapter.ts"
import { deriveAddress, deriveSigningKey, type WalletKeyRef } from "../../domain/custody/derive.ts"
import { paymentFee } from "../../domain/ledger/fee.ts"
import type { Asset } from "../../domain/money/asset.ts"
import {
  type SolanaSandboxChain,
  solana_sandbox_blockhash_validity_slots,
  solana_sandbox_finality_confirmations,
  startSolanaSandbox,
} from "../../src/chains/solana-sandbox.ts"
import { ledgerOf, walletAccountId } from "../../src/platform/accounts.ts"
import type { ChainAdapter } from "../../src/ports/chain.ts"
import { custodyAccountId } from "../../src/transfers/model.ts"
import type { SourceWallet } from "../../src/transfers/request.ts"
import { chainRoutes } from "../../src/transfers/routes.ts"
import { verifyTransfer } from "../../src/transfers/verify.ts"
import { startTransferWorker, type TransferWorkerOptions } from "../../src/transfers/worker.ts"
import { freshDatabase, type TestDatabase } from "../support/db.ts"
import { test_mnemonic } from "../support/evm.ts"
import { serveSolanaTransport } from "../support/solana-bridge.ts"
import { onceBeforeBroadcast, transferKit } from "../support/transfer-kit.ts"
import {
  composeTransferFlow,
  job_expire_seconds,
  killWorkerProcess,
  type TransferFlow,
  workerProcessUntilBroadcast,
} from "../support/transfers.ts"

const tenant_id = "ten_solana"
const ledger = ledgerOf(tenant_id, "sandbox")
const asset: Asset = { code: "USDC@solana", symbol: "USDC", chain: "solana", decimals: 6 }
const funding = 1_000_000_000n
const settle_wait_ms_max = 30_000
/** A faster clock than the sandbox's 1 s, so that finality (2 slots) comes quickly. */
const block_time_ms = 200
const seed = mnemonicToSeedSync(test_mnemonic, "")

let db: TestDatabase
let local: SolanaSandboxChain
let flow: TransferFlow
let contract: Address

const run = <A, E>(effect: Effect.Effect<A, E>) => Effect.runPromise(effect)
const ref = (wallet_index: number, tenant_index = 0): WalletKeyRef => ({
  chain: "solana",
  tenant_index,
  wallet_index,
})
const addressOf = (wallet_index: number, tenant_index = 0) =>
  deriveAddress(seed, ref(wallet_index, tenant_index)) as Address
const tokenBalance = (address: string) => run(local.adapter.balance(address, { kind: "token", contract }))
const solBalance = (address: string) => run(local.adapter.balance(address, { kind: "native" }))
const sandboxRoutes = (adapter: ChainAdapter) => chainRoutes({ sandbox: new Map([["solana", adapter]]) })

/** A custody wallet with USDC (and SOL for fees) on chain, and the same USDC in the ledger. */
const worker_options: TransferWorkerOptions = {
  poll_interval_ms: 100,
  poll_count_max: 100,
  worker_count: 2,
  job_expire_seconds,
}
const kit = transferKit({ tenant_id, asset, funding, settle_wait_ms_max, worker_options }, () => ({
  db,
  flow,
  contract,
}))
const {
  request,
  account,
  available,
  loadRow,
  settled,
  withWorker,
  outboxEvents,
  ledgerEventsOf,
  expectReleased,
} = kit

const fundedWallet = async (wallet_index: number): Promise<SourceWallet> => {
  const address = addressOf(wallet_index)
  const wallet: SourceWallet = {
    wallet_id: `wal_sol_${wallet_index}`,
    chain: "solana",
    address,
    tenant_index: 0,
    wallet_index,
  }
  await local.fund(address, "USDC", funding)
  await kit.creditLedger(wallet)
  return wallet
}

beforeAll(async () => {
  db = await freshDatabase()
  local = await startSolanaSandbox({ block_time_ms })
  const usdc = local.contracts.get("USDC")
  if (usdc === undefined) throw new Error("the sandbox has a USDC mint")
  contract = usdc
  flow = await composeTransferFlow(db.pool, sandboxRoutes(local.adapter))
})

afterAll(async () => {
  await flow?.stop()
  await local?.stop()
  await db?.drop()
})

describe("the sandbox faucet (Solana, LiteSVM)", () => {
  it("mints the same amount to the same address twice within one slot: two mints, not one refused as a duplicate", async () => {
    const address = addressOf(90)
    await local.fund(address, "USDC", 500_000n)
    await local.fund(address, "USDC", 500_000n)
    await Promise.all([local.fund(address, "USDC", 500_000n), local.fund(address, "USDC", 500_000n)])
    expect(await tokenBalance(address)).toBe(2_000_000n)
  })
})

describe("on-chain transfers (Solana, LiteSVM)", () => {
  it("completes: proof matches the landed transaction, recipient gets exactly the amount, the chain verifies it", async () => {
    const wallet = await fundedWallet(1)
    const recipient = addressOf(11)
    const amount = 12_345_678n
    const fee = paymentFee(amount)
    const requested = await request(wallet, recipient, amount)
    expect(requested.status).toBe("pending")

    const row = await withWorker(() => settled(requested.transfer_id))
    expect(row.status).toBe("completed")
    expect(await tokenBalance(recipient)).toBe(amount)
    expect(await tokenBalance(wallet.address)).toBe(funding - amount)

    const landed = await local.transport.landed(row.tx_hash as Parameters<typeof local.transport.landed>[0])
    expect(landed?.failed).toBe(false)
    expect(row.proof).toMatchObject({
      tx_hash: row.tx_hash,
      block_number: landed?.slot.toString(),
      block_hash: landed?.block_hash,
      // The recipient had no token account: instruction 0 creates it, 1 is the transfer.
      log_index: 1,
    })
    expect(row.proof?.confirmations).toBeGreaterThanOrEqual(solana_sandbox_finality_confirmations)

    const payer = await account(walletAccountId(wallet.wallet_id, asset))
    expect(payer.debits_posted).toBe(amount + fee)
    expect(payer.debits_pending).toBe(0n)
    expect(await available(wallet)).toBe(funding - amount - fee)
    expect((await account(custodyAccountId(asset))).credits_posted).toBeGreaterThanOrEqual(amount)
    expect(await outboxEvents(row.transfer_id)).toEqual(["payment.completed"])

    const verification = await run(
      verifyTransfer({ adapter: local.adapter, contracts: local.contracts }, row),
    )
    expect(verification).toMatchObject({
      status: "finalized",
      checks: { amount: true, token: true, sender: true, receiver: true },
      matches: true,
    })
    // Had the ledger failed it (funds released), the landed transaction would be a mismatch.
    const as_failed = await run(
      verifyTransfer({ adapter: local.adapter, contracts: local.contracts }, { ...row, status: "failed" }),
    )
    expect(as_failed).toMatchObject({ status: "finalized", matches: false })
  })

  it("reverts on chain when the recipient's token account is frozen after signing, and releases the funds", async () => {
    const wallet = await fundedWallet(2)
    const recipient = addressOf(12)
    const lamports_before = await solBalance(wallet.address)
    const requested = await request(wallet, recipient, 5_000_000n)
    const row = await withWorker(() => settled(requested.transfer_id), {
      beforeBroadcast: onceBeforeBroadcast(
        () => requested.transfer_id,
        () => local.block(recipient, "USDC"),
      ),
    })
    expect(row).toMatchObject({ status: "failed", failure_code: "reverted" })
    expect(row.tx_hash).not.toBeNull()
    expect((await local.transport.landed(row.tx_hash as never))?.failed).toBe(true)
    expect(await tokenBalance(recipient)).toBe(0n)
    expect(await tokenBalance(wallet.address)).toBe(funding)
    // A failed transaction still pays its fee (one signature).
    expect(await solBalance(wallet.address)).toBe(lamports_before - 5_000n)
    await expectReleased(wallet)
    expect(await outboxEvents(row.transfer_id)).toEqual(["payment.failed"])
  })

  it("fails and releases the funds when the sender has no SOL for the fee", async () => {
    const wallet = await fundedWallet(3)
    // Send every lamport away: the wallet keeps its USDC and cannot pay a fee.
    const lamports = await solBalance(wallet.address)
    const drain = await run(
      local.adapter.signTransfer(deriveSigningKey(seed, ref(3)), {
        asset: { kind: "native" },
        to: addressOf(19),
        amount: lamports - 5_000n,
      }),
    )
    await run(local.adapter.broadcast(drain.raw))
    expect(await solBalance(wallet.address)).toBe(0n)

    const requested = await request(wallet, addressOf(13), 2_000_000n)
    const row = await withWorker(() => settled(requested.transfer_id))
    expect(row).toMatchObject({ status: "failed", failure_code: "insufficient_gas", tx_hash: null })
    expect(await tokenBalance(addressOf(13))).toBe(0n)
    await expectReleased(wallet)
  })

  it("is dropped, and releases the funds, when its blockhash expires before it reaches the chain", async () => {
    const wallet = await fundedWallet(4)
    const recipient = addressOf(14)
    const lamports_before = await solBalance(wallet.address)
    const requested = await request(wallet, recipient, 3_000_000n)
    const row = await withWorker(() => settled(requested.transfer_id), {
      beforeBroadcast: onceBeforeBroadcast(
        () => requested.transfer_id,
        async () => local.transport.advanceSlots(solana_sandbox_blockhash_validity_slots),
      ),
    })
    expect(row).toMatchObject({ status: "failed", failure_code: "dropped" })
    expect(row.tx_hash).not.toBeNull()
    // The persisted bytes never reached the chain, and never will: nothing moved, no fee was paid.
    expect(await local.transport.landed(row.tx_hash as never)).toBeNull()
    expect(await run(local.adapter.transactionStatus(row.tx_hash ?? ""))).toMatchObject({ status: "dropped" })
    expect(await tokenBalance(recipient)).toBe(0n)
    expect(await solBalance(wallet.address)).toBe(lamports_before)
    await expectReleased(wallet)
    expect(await outboxEvents(row.transfer_id)).toEqual(["payment.failed"])
  })

  it("sends two identical transfers requested at once as two transactions", async () => {
    // Solana signatures are deterministic: the same transfer signed against the same blockhash is
    // the same transaction, which the chain takes once. Each transfer's memo (its id) keeps them
    // apart, so both are sent and both complete.
    const wallet = await fundedWallet(6)
    const recipient = addressOf(16)
    // The recipient's token account exists: both transfers are one instruction, byte for byte alike.
    await local.fund(recipient, "USDC", 1n)
    const amount = 1_000_000n
    const [first, second] = await Promise.all([
      request(wallet, recipient, amount),
      request(wallet, recipient, amount),
    ])
    const rows = await withWorker(() =>
      Promise.all([settled(first?.transfer_id ?? ""), settled(second?.transfer_id ?? "")]),
    )
    expect(rows.map((row) => row.status)).toEqual(["completed", "completed"])
    expect(rows[0]?.tx_hash).not.toBe(rows[1]?.tx_hash)
    expect(await tokenBalance(recipient)).toBe(2n * amount + 1n)
    expect(await available(wallet)).toBe(funding - 2n * (amount + paymentFee(amount)))
  })

  it("completes exactly once after the worker process is killed right after the broadcast", async () => {
    // LiteSVM lives inside the process that owns it: a worker process killed with SIGKILL would take
    // its own chain with it. So the chain lives in this test process and the worker process reaches
    // it over a small HTTP bridge carrying the transport's calls (support/solana-bridge.ts); the kill
    // takes the worker, its pg-boss and its adapter (with its memory of what it broadcast), and
    // leaves the chain and the database. The restart is a fresh worker with a fresh adapter on the
    // same chain and database: it resumes from the persisted bytes and never signs again.
    const wallet = await fundedWallet(5)
    const recipient = addressOf(15)
    const amount = 7_000_000n
    const requested = await request(wallet, recipient, amount)

    const bridge = await serveSolanaTransport(local.transport)
    const { child, broadcast: broadcast_hash } = await workerProcessUntilBroadcast(
      db.url,
      { solana_transport_url: bridge.url },
      settle_wait_ms_max,
    )
    await killWorkerProcess(child)
    await bridge.close()

    const interrupted = await loadRow(requested.transfer_id)
    expect(interrupted.status).toBe("pending")
    expect(interrupted.tx_hash).toBe(broadcast_hash)
    expect((await local.transport.landed(broadcast_hash as never))?.failed).toBe(false)
    expect(await ledgerEventsOf(requested.transfer_id)).not.toContain("PendingTransferPosted")

    const restarted = await composeTransferFlow(
      db.pool,
      sandboxRoutes(
        makeSolanaAdapter(local.transport, { finality_confirmations: solana_sandbox_finality_confirmations }),
      ),
    )
    const worker = await startTransferWorker(
      {
        pool: db.pool,
        boss: restarted.boss,
        writer: restarted.writer,
        routes: restarted.routes,
        signingKey: restarted.signingKey,
      },
      worker_options,
    )
    const row = await settled(requested.transfer_id).finally(() => worker.stop())
    // The restarted worker's writer posted: read the ledger through it (the test's writer caches state).
    const { state } = await run(restarted.writer.snapshot(ledger))
    await restarted.stop()
    expect(state.accounts.get(walletAccountId(wallet.wallet_id, asset))?.debits_posted).toBe(
      amount + paymentFee(amount),
    )
    expect(row.status).toBe("completed")
    expect(row.tx_hash).toBe(broadcast_hash)
    expect(await tokenBalance(recipient)).toBe(amount)
    expect(await tokenBalance(wallet.address)).toBe(funding - amount)
    const ledger_events = await ledgerEventsOf(requested.transfer_id)
    expect(ledger_events.filter((type) => type === "PendingTransferPosted")).toHaveLength(2)
    expect(ledger_events.filter((type) => type === "PendingTransferCreated")).toHaveLength(2)
    expect(await outboxEvents(row.transfer_id)).toEqual(["payment.completed"])
  }, 180_000)
})
