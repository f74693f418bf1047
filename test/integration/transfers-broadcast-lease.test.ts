// Mutation-review test: one job at a time sends a transfer's bytes (the broadcast lease). While a
// first run's broadcast is still out, a second run of the same transfer sends nothing.
import { mnemonicToSeedSync } from "@scure/bip39"
import type { Address } from "@solana/kit"
import { Effect } from "effect"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { deriveAddress } from "../../domain/custody/derive.ts"
import type { Asset } from "../../domain/money/asset.ts"
import { type SolanaSandboxChain, startSolanaSandbox } from "../../src/chains/solana-sandbox.ts"
import type { ChainAdapter } from "../../src/ports/chain.ts"
import type { SourceWallet } from "../../src/transfers/request.ts"
import { chainRoutes } from "../../src/transfers/routes.ts"
import { startTransferWorker } from "../../src/transfers/worker.ts"
import { freshDatabase, type TestDatabase } from "../support/db.ts"
import { test_mnemonic } from "../support/evm.ts"
import { transferKit } from "../support/transfer-kit.ts"
import { composeTransferFlow, job_expire_seconds, type TransferFlow } from "../support/transfers.ts"

const tenant_id = "ten_lease"
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
let broadcasts = 0
/** Set by the test: the next broadcast waits for it before it reaches the chain. */
let held_broadcast: Promise<void> | undefined
const kit = transferKit({ tenant_id, asset, funding: 1_000_000_000n, worker_options }, () => ({
  db,
  flow,
  contract,
}))

beforeAll(async () => {
  db = await freshDatabase()
  local = await startSolanaSandbox({ block_time_ms: 200 })
  contract = local.contracts.get("USDC") as string
  const adapter: ChainAdapter = {
    ...local.adapter,
    broadcast: (raw) =>
      Effect.promise(async () => {
        broadcasts += 1
        const hold = held_broadcast
        held_broadcast = undefined
        if (hold !== undefined) await hold
      }).pipe(Effect.flatMap(() => local.adapter.broadcast(raw))),
    // Never final: the transfer stays pending and polled.
    transactionStatus: (tx_hash) => Effect.succeed({ status: "seen" as const, tx_hash }),
  }
  flow = await composeTransferFlow(db.pool, chainRoutes({ sandbox: new Map([["solana", adapter]]) }))
})
afterAll(async () => {
  await flow?.stop()
  await local?.stop()
  await db?.drop()
})

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms))

describe("the broadcast lease", () => {
  it("keeps a second run of a transfer from sending its bytes while the first run's broadcast is out", async () => {
    const address = deriveAddress(seed, { chain: "solana", tenant_index: 0, wallet_index: 3 }) as Address
    const wallet: SourceWallet = {
      wallet_id: "wal_lease",
      chain: "solana",
      address,
      tenant_index: 0,
      wallet_index: 3,
    }
    await local.fund(address, "USDC", 1_000_000_000n)
    await kit.creditLedger(wallet)
    const recipient = deriveAddress(seed, { chain: "solana", tenant_index: 0, wallet_index: 4 })
    let release: () => void = () => {}
    held_broadcast = new Promise<void>((resolve) => {
      release = resolve
    })
    const row = await kit.request(wallet, recipient, 5_000_000n)
    await kit.withWorker(async () => {
      for (let i = 0; i < 200 && broadcasts === 0; i++) await sleep(50)
      expect(broadcasts).toBe(1)
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
        const answered = second.advance(row.transfer_id).catch(() => "error")
        await sleep(1_500)
        expect(broadcasts).toBe(1)
        release()
        await Promise.race([answered, sleep(job_expire_seconds * 1000)])
      } finally {
        release()
        await second.stop()
      }
    })
  }, 60_000)
})
