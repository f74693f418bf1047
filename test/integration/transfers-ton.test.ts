// Proves the on-chain transfer flow on TON with real parts (the sandbox's @ton/sandbox chain with its
// USDT jetton and its block clock, PostgreSQL, pg-boss, the ledger writer): a transfer that
// completes with the chain's proof (and verifies against the chain), one that reverts on chain (the
// recipient's jetton wallet frozen after signing: the jettons come back), one whose sender has no
// TON for the fee, one dropped (its valid_until passed before its block), two transfers of one
// sender requested at once (two seqnos, both land, also when the second reaches the chain first),
// and one whose worker process is killed right after the broadcast, which a new worker completes
// exactly once. Failed transfers release the reservation to the last unit.

import { mnemonicToSeedSync } from "@scure/bip39"
import { Address } from "@ton/core"
import { Effect } from "effect"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { makeTonAdapter } from "../../adapters/chains/ton/adapter.ts"
import { summarizeMessage } from "../../adapters/chains/ton/transaction.ts"
import { deriveAddress, deriveSigningKey, type WalletKeyRef } from "../../domain/custody/derive.ts"
import { paymentFee } from "../../domain/ledger/fee.ts"
import type { Asset } from "../../domain/money/asset.ts"
import { startTonSandboxChain, type TonSandboxChain } from "../../src/chains/ton-sandbox.ts"
import { ledgerOf, walletAccountId } from "../../src/platform/accounts.ts"
import type { ChainAdapter, SignedTransfer } from "../../src/ports/chain.ts"
import { custodyAccountId, type TransferRow } from "../../src/transfers/model.ts"
import type { SourceWallet } from "../../src/transfers/request.ts"
import { chainRoutes } from "../../src/transfers/routes.ts"
import { verifyTransfer } from "../../src/transfers/verify.ts"
import { startTransferWorker, type TransferWorkerOptions } from "../../src/transfers/worker.ts"
import { freshDatabase, type TestDatabase } from "../support/db.ts"
import { test_mnemonic } from "../support/evm.ts"
import { serveTonTransport } from "../support/ton-bridge.ts"
import { onceBeforeBroadcast, transferKit } from "../support/transfer-kit.ts"
import {
  composeTransferFlow,
  job_expire_seconds,
  killWorkerProcess,
  type TransferFlow,
  workerProcessUntilBroadcast,
} from "../support/transfers.ts"

const tenant_id = "ten_ton"
const ledger = ledgerOf(tenant_id, "sandbox")
const asset: Asset = { code: "USDT@ton", symbol: "USDT", chain: "ton", decimals: 6 }
const funding = 1_000_000_000n
const settle_wait_ms_max = 30_000
/** A faster clock than the sandbox's 1 s, so that blocks come quickly. */
const block_time_ms = 200
const seed = mnemonicToSeedSync(test_mnemonic, "")

let db: TestDatabase
let local: TonSandboxChain
let flow: TransferFlow
let contract: string

const run = <A, E>(effect: Effect.Effect<A, E>) => Effect.runPromise(effect)
const ref = (wallet_index: number): WalletKeyRef => ({ chain: "ton", tenant_index: 0, wallet_index })
const addressOf = (wallet_index: number) => deriveAddress(seed, ref(wallet_index))
const jettons = (address: string) => run(local.adapter.balance(address, { kind: "token", contract }))
const tonBalance = (address: string) => run(local.adapter.balance(address, { kind: "native" }))
const sandboxRoutes = (adapter: ChainAdapter) => chainRoutes({ sandbox: new Map([["ton", adapter]]) })
const seqnoOf = (address: string) => local.transport.getSeqno(Address.parse(address))
const landedMessage = (row: TransferRow) =>
  local.transport.landed(Address.parse(row.from_address), row.tx_hash ?? "")

/** The jetton credits to `address` on chain, oldest first, each known by its wallet message's hash. */
const creditsTo = async (address: string) => {
  const to_block = await run(local.adapter.blockNumber())
  return await run(
    local.adapter.incomingTransfers({ contract, addresses: [address], from_block: 0n, to_block }),
  )
}

/** Waits, bounded, until `check` holds; the chain's clock runs meanwhile. */
const eventually = async (check: () => Promise<boolean>, what: string) => {
  const deadline = Date.now() + settle_wait_ms_max
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`${what}: not within ${settle_wait_ms_max} ms`)
    await new Promise((resolve) => setTimeout(resolve, 50))
  }
}

/** A custody wallet with USDT (and TON for fees) on chain, and the same USDT in the ledger. */
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
    wallet_id: `wal_ton_${wallet_index}`,
    chain: "ton",
    address,
    tenant_index: 0,
    wallet_index,
  }
  await local.fund(address, "USDT", funding)
  await kit.creditLedger(wallet)
  return wallet
}

beforeAll(async () => {
  db = await freshDatabase()
  local = await startTonSandboxChain({ block_time_ms })
  const usdt = local.contracts.get("USDT")
  if (usdt === undefined) throw new Error("the sandbox has a USDT jetton")
  contract = usdt
  flow = await composeTransferFlow(db.pool, sandboxRoutes(local.adapter))
})

afterAll(async () => {
  await flow?.stop()
  await local?.stop()
  await db?.drop()
})

describe("on-chain transfers (TON, @ton/sandbox)", () => {
  it("completes: proof matches the recipient's jetton credit, balances are exact, the chain verifies it", async () => {
    const wallet = await fundedWallet(1)
    const recipient = addressOf(11)
    const amount = 12_345_678n
    const fee = paymentFee(amount)
    const requested = await request(wallet, recipient, amount)
    expect(requested.status).toBe("pending")

    const row = await withWorker(() => settled(requested.transfer_id))
    expect(row.status).toBe("completed")
    expect(await jettons(recipient)).toBe(amount)
    expect(await jettons(wallet.address)).toBe(funding - amount)

    // The proof is the recipient jetton wallet's crediting transaction, found under the transfer's hash.
    const credits = await creditsTo(recipient)
    expect(credits).toHaveLength(1)
    const credit = credits[0]
    expect(credit).toMatchObject({ amount, from: wallet.address, proof: { tx_hash: row.tx_hash } })
    expect(row.proof).toMatchObject({
      tx_hash: row.tx_hash,
      block_number: credit?.proof.block_number.toString(),
      block_hash: credit?.proof.block_hash,
      log_index: 0,
      confirmations: 1,
    })
    expect((await landedMessage(row))?.failed).toBe(false)

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
  })

  it("reverts on chain when the recipient's jetton wallet is frozen after signing, and releases the funds", async () => {
    const wallet = await fundedWallet(2)
    const recipient = addressOf(12)
    const ton_before = await tonBalance(wallet.address)
    const requested = await request(wallet, recipient, 5_000_000n)
    const row = await withWorker(() => settled(requested.transfer_id), {
      beforeBroadcast: onceBeforeBroadcast(
        () => requested.transfer_id,
        () => local.freeze(recipient, "USDT", true),
      ),
    })
    expect(row).toMatchObject({ status: "failed", failure_code: "reverted" })
    expect(row.tx_hash).not.toBeNull()
    // The wallet's own transaction went through; the recipient's jetton wallet refused the credit
    // and the jettons bounced back to the sender's jetton wallet.
    expect((await landedMessage(row))?.failed).toBe(false)
    expect(await jettons(recipient)).toBe(0n)
    expect(await jettons(wallet.address)).toBe(funding)
    // The fees were paid in TON all the same.
    expect(await tonBalance(wallet.address)).toBeLessThan(ton_before)
    await expectReleased(wallet)
    expect(await outboxEvents(row.transfer_id)).toEqual(["payment.failed"])
  })

  it("fails and releases the funds when the sender has no TON for the fee", async () => {
    const wallet = await fundedWallet(3)
    // Send nearly every nanoton away: the wallet keeps its USDT and cannot attach TON to a transfer.
    const drain_bound = 10_000_000n
    const drain: SignedTransfer = await run(
      local.adapter.signTransfer(deriveSigningKey(seed, ref(3)), {
        asset: { kind: "native" },
        to: addressOf(19),
        amount: (await tonBalance(wallet.address)) - drain_bound,
      }),
    )
    await run(local.adapter.broadcast(drain.raw))
    await eventually(
      async () => (await run(local.adapter.transactionStatus(drain.tx_hash))).status === "finalized",
      "the drain lands",
    )
    expect(await tonBalance(wallet.address)).toBeLessThan(drain_bound)

    const requested = await request(wallet, addressOf(13), 2_000_000n)
    const row = await withWorker(() => settled(requested.transfer_id))
    expect(row).toMatchObject({ status: "failed", failure_code: "insufficient_gas", tx_hash: null })
    expect(await jettons(addressOf(13))).toBe(0n)
    expect(await jettons(wallet.address)).toBe(funding)
    await expectReleased(wallet)
    expect(await outboxEvents(row.transfer_id)).toEqual(["payment.failed"])
  })

  it("is dropped, and releases the funds, when its valid_until passes before its block", async () => {
    const wallet = await fundedWallet(4)
    const recipient = addressOf(14)
    const ton_before = await tonBalance(wallet.address)
    const requested = await request(wallet, recipient, 3_000_000n)
    // The chain's clock is pinned one second before the message's valid_until as it is broadcast:
    // the message is accepted, and the next block (which moves the pinned clock by a second) runs
    // at its valid_until, when the wallet refuses it.
    try {
      const row = await withWorker(() => settled(requested.transfer_id), {
        beforeBroadcast: onceBeforeBroadcast(
          () => requested.transfer_id,
          async (signed) => {
            const message = summarizeMessage(Buffer.from((signed.raw_transaction ?? "").slice(2), "hex"))
            if (message === null) throw new Error("a TON transfer's bytes are a wallet message")
            local.blockchain.now = message.valid_until - 1
          },
        ),
      })
      expect(row).toMatchObject({ status: "failed", failure_code: "dropped" })
      expect(row.tx_hash).not.toBeNull()
      // The persisted bytes never landed, and never can: nothing moved, no fee was paid.
      expect(await landedMessage(row)).toBeNull()
      expect(await run(local.adapter.transactionStatus(row.tx_hash ?? ""))).toMatchObject({
        status: "dropped",
      })
      expect(await jettons(recipient)).toBe(0n)
      expect(await jettons(wallet.address)).toBe(funding)
      expect(await tonBalance(wallet.address)).toBe(ton_before)
      await expectReleased(wallet)
      expect(await outboxEvents(row.transfer_id)).toEqual(["payment.failed"])
    } finally {
      local.blockchain.now = undefined
    }
  })

  it("sends two transfers of one sender requested at once under two seqnos, and both land", async () => {
    const wallet = await fundedWallet(6)
    const recipient = addressOf(16)
    const amount = 1_000_000n
    const [first, second] = await Promise.all([
      request(wallet, recipient, amount),
      request(wallet, recipient, amount),
    ])
    const rows = await withWorker(() =>
      Promise.all([settled(first?.transfer_id ?? ""), settled(second?.transfer_id ?? "")]),
    )
    expect(rows.map((row) => row.status)).toEqual(["completed", "completed"])
    expect(new Set(rows.map((row) => row.nonce))).toEqual(new Set([0, 1]))
    expect(rows[0]?.tx_hash).not.toBe(rows[1]?.tx_hash)
    expect(await jettons(recipient)).toBe(2n * amount)
    expect(await jettons(wallet.address)).toBe(funding - 2n * amount)
    expect(await available(wallet)).toBe(funding - 2n * (amount + paymentFee(amount)))
  })

  it("broadcasts a sender's second seqno only once its first is resolved", async () => {
    // A TON node runs an external message against the wallet's state when it arrives, so seqno 1
    // would be refused before seqno 0 has landed: the worker holds it back until the first settles.
    const wallet = await fundedWallet(7)
    const recipient = addressOf(17)
    const amount = 2_000_000n
    const requested = await Promise.all([
      request(wallet, recipient, amount),
      request(wallet, recipient, amount),
    ])
    const ids = requested.map((transfer) => transfer.transfer_id)
    const statusOf = async (nonce: number) => {
      const found = await db.pool.query<{ status: string }>(
        "select status from platform.chain_transfers where transfer_id = any($1) and nonce = $2",
        [ids, nonce],
      )
      return found.rows[0]?.status
    }
    const first_status_at_second_broadcast: Array<string | undefined> = []
    const rows = await withWorker(() => Promise.all(ids.map((transfer_id) => settled(transfer_id))), {
      beforeBroadcast: async (row) => {
        if (ids.includes(row.transfer_id) && row.nonce === 1)
          first_status_at_second_broadcast.push(await statusOf(0))
      },
    })
    expect(first_status_at_second_broadcast.length).toBeGreaterThan(0)
    expect(first_status_at_second_broadcast.every((status) => status === "completed")).toBe(true)
    expect(rows.map((row) => row.status)).toEqual(["completed", "completed"])
    expect(await jettons(recipient)).toBe(2n * amount)
    expect(await seqnoOf(wallet.address)).toBe(2)
  })

  it("signs a sender's second transfer only once its first is resolved, so a first message that expires unsent leaves no seqno gap", async () => {
    // Signed in advance at seqno 1, the second would be refused while seqno 0 stays unused (its
    // first message expired unsent), and failing it then would release funds its bytes could still
    // move once a later message took seqno 0.
    const wallet = await fundedWallet(8)
    const recipient = addressOf(18)
    const amount = 1_000_000n
    const requested = await Promise.all([
      request(wallet, recipient, amount),
      request(wallet, recipient, amount),
    ])
    const ids = requested.map((transfer) => transfer.transfer_id)
    let expiring: string | undefined
    const signed_while_other_pending: Array<string> = []
    try {
      const rows = await withWorker(() => Promise.all(ids.map((transfer_id) => settled(transfer_id))), {
        beforeBroadcast: async (row) => {
          if (!ids.includes(row.transfer_id)) return
          const others = await db.pool.query<{ transfer_id: string }>(
            "select transfer_id from platform.chain_transfers where transfer_id = any($1) and transfer_id <> $2 and tx_hash is not null and status = 'pending'",
            [ids, row.transfer_id],
          )
          signed_while_other_pending.push(...others.rows.map((other) => other.transfer_id))
          if (expiring === undefined) {
            // The first to go out: the chain's clock pinned a second before its valid_until.
            expiring = row.transfer_id
            const message = summarizeMessage(Buffer.from((row.raw_transaction ?? "").slice(2), "hex"))
            if (message === null) throw new Error("a TON transfer's bytes are a wallet message")
            local.blockchain.now = message.valid_until - 1
          } else if (row.transfer_id !== expiring) {
            local.blockchain.now = undefined
          }
        },
      })
      const first = rows.find((row) => row.transfer_id === expiring)
      const second = rows.find((row) => row.transfer_id !== expiring)
      expect(first).toMatchObject({ status: "failed", failure_code: "dropped" })
      expect(second).toMatchObject({ status: "completed", nonce: first?.nonce })
      expect(signed_while_other_pending).toEqual([])
      expect(await jettons(recipient)).toBe(amount)
      expect(await seqnoOf(wallet.address)).toBe((first?.nonce ?? 0) + 1)
    } finally {
      local.blockchain.now = undefined
    }
  })

  it("completes exactly once after the worker process is killed right after the broadcast", async () => {
    // @ton/sandbox lives inside the process that owns it: a worker process killed with SIGKILL would
    // take its own chain with it. So the chain (and its block clock) lives in this test process and
    // the worker process reaches it over a small HTTP bridge carrying the transport's calls
    // (support/ton-bridge.ts); the kill takes the worker, its pg-boss and its adapter (with its
    // memory of the messages it signed), and leaves the chain and the database. The chain's next
    // block runs the held message without the worker. The restart is a fresh worker with a fresh
    // adapter on the same chain and database: it resumes from the persisted bytes and never signs
    // again; its rebroadcast of the landed message changes nothing.
    const wallet = await fundedWallet(5)
    const recipient = addressOf(15)
    const amount = 7_000_000n
    const requested = await request(wallet, recipient, amount)

    const bridge = await serveTonTransport(local.transport)
    const { child, broadcast: broadcast_hash } = await workerProcessUntilBroadcast(
      db.url,
      { ton_transport_url: bridge.url },
      settle_wait_ms_max,
    )
    await killWorkerProcess(child)
    await bridge.close()

    const interrupted = await loadRow(requested.transfer_id)
    expect(interrupted.status).toBe("pending")
    expect(interrupted.tx_hash).toBe(broadcast_hash)
    expect(interrupted.broadcast_at).not.toBeNull()
    await eventually(async () => (await landedMessage(interrupted)) !== null, "the held message lands")
    expect(await ledgerEventsOf(requested.transfer_id)).not.toContain("PendingTransferPosted")

    const restarted = await composeTransferFlow(db.pool, sandboxRoutes(makeTonAdapter(local.transport)))
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
    expect(await jettons(recipient)).toBe(amount)
    expect(await jettons(wallet.address)).toBe(funding - amount)
    expect((await creditsTo(recipient)).map((credit) => credit.proof.tx_hash)).toEqual([broadcast_hash])
    expect(await seqnoOf(wallet.address)).toBe(1)
    const ledger_events = await ledgerEventsOf(requested.transfer_id)
    expect(ledger_events.filter((type) => type === "PendingTransferPosted")).toHaveLength(2)
    expect(ledger_events.filter((type) => type === "PendingTransferCreated")).toHaveLength(2)
    expect(await outboxEvents(row.transfer_id)).toEqual(["payment.completed"])
  }, 180_000)
})
