// Proves that a transfer keeps one chain of jobs: a job whose step outlives its expiry is run again
// by pg-boss while the first run goes on (here one status read of a node takes longer than a job
// may live), and neither the second run nor a second worker makes a second chain of poll jobs that
// would count the transfer's polls twice as fast. Real parts: the sandbox's Solana chain, PostgreSQL,
// pg-boss and the ledger writer.

import { mnemonicToSeedSync } from "@scure/bip39"
import type { Address } from "@solana/kit"
import { Effect } from "effect"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { deriveAddress } from "../../domain/custody/derive.ts"
import type { Asset } from "../../domain/money/asset.ts"
import { type SolanaSandboxChain, startSolanaSandbox } from "../../src/chains/solana-sandbox.ts"
import type { ChainAdapter } from "../../src/ports/chain.ts"
import { transfer_queue } from "../../src/transfers/hook.ts"
import type { SourceWallet } from "../../src/transfers/request.ts"
import { chainRoutes } from "../../src/transfers/routes.ts"
import { createTransferQueue, startTransferWorker } from "../../src/transfers/worker.ts"
import { freshDatabase, type TestDatabase } from "../support/db.ts"
import { test_mnemonic } from "../support/evm.ts"
import { transferKit } from "../support/transfer-kit.ts"
import { composeTransferFlow, job_expire_seconds, type TransferFlow } from "../support/transfers.ts"

const tenant_id = "ten_jobs"
const asset: Asset = { code: "USDC@solana", symbol: "USDC", chain: "solana", decimals: 6 }
const seed = mnemonicToSeedSync(test_mnemonic, "")
const worker_options = {
  poll_interval_ms: 100,
  poll_count_max: 1_000_000,
  worker_count: 4,
  job_expire_seconds,
}
let db: TestDatabase
let local: SolanaSandboxChain
let flow: TransferFlow
let contract: string
/** Set by the test: the one status read that outlives a job's expiry. */
let slow_read: Promise<void> | undefined
const kit = transferKit({ tenant_id, asset, funding: 1_000_000_000n, worker_options }, () => ({
  db,
  flow,
  contract,
}))

beforeAll(async () => {
  db = await freshDatabase()
  local = await startSolanaSandbox({ block_time_ms: 200 })
  contract = local.contracts.get("USDC") as string
  // Its transaction reads `seen` for ever (stuck, say, before a leader), so the transfer stays
  // pending and polled; one read, once armed, takes longer than a job may live.
  const adapter: ChainAdapter = {
    ...local.adapter,
    transactionStatus: (tx_hash) =>
      Effect.promise(async () => {
        const slow = slow_read
        slow_read = undefined
        if (slow !== undefined) await slow
        return { status: "seen" as const, tx_hash }
      }),
  }
  flow = await composeTransferFlow(db.pool, chainRoutes({ sandbox: new Map([["solana", adapter]]) }))
})
afterAll(async () => {
  await flow?.stop()
  await local?.stop()
  await db?.drop()
})

/** A funded Solana sender (wallet `wallet_index`, on chain and in the ledger) and a recipient (the next index). */
const fundedSender = async (wallet_id: string, wallet_index: number) => {
  const address = deriveAddress(seed, { chain: "solana", tenant_index: 0, wallet_index }) as Address
  const wallet: SourceWallet = { wallet_id, chain: "solana", address, tenant_index: 0, wallet_index }
  await local.fund(address, "USDC", 1_000_000_000n)
  await kit.creditLedger(wallet)
  const recipient = deriveAddress(seed, { chain: "solana", tenant_index: 0, wallet_index: wallet_index + 1 })
  return { wallet, recipient }
}

/** Arms the next status read to hold its job until the answered function fails it. */
const armFailingRead = (): ((error: Error) => void) => {
  let fail: (error: Error) => void = () => {}
  slow_read = new Promise<void>((_resolve, reject) => {
    fail = reject
  })
  return fail
}

/**
 * Lets the armed read hold its job past the job's expiry (pg-boss claims the job again), fails it,
 * and answers the transfer's polls half a second later; returns after 4 s more for the retries.
 */
const failAfterExpiry = async (fail: (error: Error) => void, polls: () => Promise<number>) => {
  await new Promise((resolve) => setTimeout(resolve, (job_expire_seconds + 4) * 1000))
  fail(new Error("the node went away"))
  await new Promise((resolve) => setTimeout(resolve, 500))
  const before = await polls()
  await new Promise((resolve) => setTimeout(resolve, 4_000))
  return before
}

describe("a transfer's jobs", () => {
  it("stay one chain after a job outlived its expiry, with two workers running", async () => {
    const { wallet, recipient } = await fundedSender("wal_jobs", 3)
    const queued = async () =>
      (
        await db.pool.query<{ n: number }>(
          `select count(*)::int as n from pgboss.job
            where name = $1 and data->>'transfer_id' = $2 and state in ('created', 'retry')`,
          [transfer_queue, row.transfer_id],
        )
      ).rows[0]?.n ?? 0
    let release: () => void = () => {}
    slow_read = new Promise<void>((resolve) => {
      release = resolve
    })
    const row = await kit.request(wallet, recipient, 5_000_000n)
    const samples: Array<number> = []
    let created = 0
    let window_ms = 0
    const createdSince = async (since: Date) =>
      (
        await db.pool.query<{ n: number }>(
          "select count(*)::int as n from pgboss.job where name = $1 and data->>'transfer_id' = $2 and created_on >= $3",
          [transfer_queue, row.transfer_id, since],
        )
      ).rows[0]?.n ?? 0
    await kit.withWorker(async () => {
      const second = await startTransferWorker(
        {
          pool: db.pool,
          boss: flow.boss,
          writer: flow.writer,
          routes: flow.routes,
          signingKey: flow.signingKey,
        },
        worker_options,
      )
      try {
        // The read holds its job past its expiry (and pg-boss's next check of it), then answers.
        await new Promise((resolve) => setTimeout(resolve, (job_expire_seconds + 4) * 1000))
        release()
        const since = new Date()
        for (let sample = 0; sample < 60; sample++) {
          await new Promise((resolve) => setTimeout(resolve, 150))
          samples.push(await queued())
        }
        created = await createdSince(since)
        window_ms = Date.now() - since.getTime()
      } finally {
        await second.stop()
      }
    })
    expect((await kit.loadRow(row.transfer_id)).status).toBe("pending")
    expect(Math.max(...samples)).toBeLessThanOrEqual(1)
    // One chain: a job holds the transfer for `hold_ms` (a third of the expiry here), then queues the
    // next; two chains would queue twice as many.
    const hold_ms = (job_expire_seconds * 1000) / 3
    expect(created).toBeGreaterThan(0)
    expect(created).toBeLessThanOrEqual(Math.floor(window_ms / hold_ms) + 1)
  }, 60_000)

  it("a job run again while its first run holds the transfer is left to that run: when that run fails, the job is retried", async () => {
    const { wallet, recipient } = await fundedSender("wal_jobs_fail", 5)
    const fail = armFailingRead()
    const row = await kit.request(wallet, recipient, 5_000_000n)
    const polls = async () => (await kit.loadRow(row.transfer_id)).poll_count
    await kit.withWorker(async () => {
      // The read holds its job past its expiry, so pg-boss gives the same job to this worker again
      // while the first run still holds the transfer; then the read fails (a node error). pg-boss
      // retries the failed job (1 s backoff), which polls on.
      const before = await failAfterExpiry(fail, polls)
      expect(await polls()).toBeGreaterThan(before)
    })
    expect((await kit.loadRow(row.transfer_id)).status).toBe("pending")
  }, 60_000)

  it("a job run again past its expiry on its last retry gets a replacement when its first run fails", async () => {
    const { wallet, recipient } = await fundedSender("wal_jobs_last", 7)
    // One retry per job: pg-boss's second claim of the job (after its expiry) is its last.
    const retry = { step_retry_limit: 1, step_retry_delay_max_seconds: 1, sign_attempts_max: 2 }
    await createTransferQueue(flow.boss, job_expire_seconds, { limit: 1, delay_max_seconds: 1 })
    const fail = armFailingRead()
    const row = await kit.request(wallet, recipient, 5_000_000n)
    const polls = async () => (await kit.loadRow(row.transfer_id)).poll_count
    const waiting = async () =>
      (
        await db.pool.query<{ n: number }>(
          `select count(*)::int as n from pgboss.job
            where name = $1 and data->>'transfer_id' = $2 and state < 'completed'`,
          [transfer_queue, row.transfer_id],
        )
      ).rows[0]?.n ?? 0
    try {
      await kit.withWorker(async () => {
        // The read holds the job past its expiry: pg-boss claims it again (its last retry) and that
        // run is left to the first; then the first run's read fails. The job has no retry left, so a
        // new job must take the transfer over (the orphan sweep is a minute away).
        const before = await failAfterExpiry(fail, polls)
        expect(await waiting()).toBeGreaterThan(0)
        expect(await polls()).toBeGreaterThan(before)
      }, retry)
    } finally {
      await createTransferQueue(flow.boss, job_expire_seconds)
    }
    expect((await kit.loadRow(row.transfer_id)).status).toBe("pending")
  }, 60_000)
})
