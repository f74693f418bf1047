/**
 * The on-chain transfer flow composed from real parts for tests: the PostgreSQL event store, the
 * ledger writer with the transfer hook, pg-boss on the shared pool, the chain adapters given (the EVM
 * adapter on anvil, the Solana adapter on LiteSVM, the TON adapter on @ton/sandbox) and custody keys
 * from the BIP-39 test mnemonic. The test files and the child worker process
 * (transfer-worker-process.ts) compose it the same way.
 */
import { type ChildProcess, spawn } from "node:child_process"
import * as path from "node:path"
import { createInterface } from "node:readline"
import { mnemonicToSeedSync } from "@scure/bip39"
import { Effect } from "effect"
import type pg from "pg"
import { PgBoss } from "pg-boss"
import { makeEvmAdapter } from "../../adapters/chains/evm/adapter.ts"
import { makePostgresEventStore } from "../../adapters/eventstore/postgres/event-store.ts"
import { deriveSigningKey } from "../../domain/custody/derive.ts"
import type { Asset } from "../../domain/money/asset.ts"
import type { JsonObject } from "../../domain/webhooks/events.ts"
import { composeHooks, type LedgerWriterService, makeLedgerWriter } from "../../src/ledger/writer.ts"
import type { EnqueueEvents } from "../../src/platform/outbox.ts"
import type { ChainAdapter } from "../../src/ports/chain.ts"
import { transferHook } from "../../src/transfers/hook.ts"
import { type ChainRoutes, chainRoutes } from "../../src/transfers/routes.ts"
import { createTransferQueue, type SigningKeySource } from "../../src/transfers/worker.ts"
import { pgBossDb } from "../../src/webhooks/queue.ts"
import { enqueueEvents } from "../../src/webhooks/store.ts"
import { test_mnemonic } from "./evm.ts"

export const transfer_chain_id = 31337
/** Short enough that a job lost with a killed worker runs again within seconds. */
export const job_expire_seconds = 3

export const usdp = (): Asset => ({ code: "USDP@ethereum", symbol: "USDP", chain: "ethereum", decimals: 6 })

export interface TransferFlow {
  readonly boss: PgBoss
  readonly writer: LedgerWriterService
  readonly routes: ChainRoutes
  readonly signingKey: SigningKeySource
  readonly stop: () => Promise<void>
}

export interface TransferHarness extends TransferFlow {
  readonly adapter: ChainAdapter
}

/** Every event goes to the outbox (not only subscribed ones), so tests can read what was emitted. */
const enqueueAll: EnqueueEvents = (client, rows) =>
  enqueueEvents(
    client,
    rows.map((row) => ({ ...row, data: row.data as JsonObject })),
  )

/** The flow over `routes`; each call has its own pg-boss instance, as a worker process would. */
export async function composeTransferFlow(pool: pg.Pool, routes: ChainRoutes): Promise<TransferFlow> {
  const store = makePostgresEventStore(pool)
  const boss = new PgBoss({
    db: pgBossDb(pool),
    schedule: false,
    superviseIntervalSeconds: 1,
    monitorIntervalSeconds: 1,
  })
  boss.on("error", () => {})
  await boss.start()
  await createTransferQueue(boss, job_expire_seconds)
  const writer = makeLedgerWriter(store, {
    transaction: {
      appendStreams: store.appendStreamsInTransaction,
      hook: composeHooks(transferHook({ boss, enqueue: enqueueAll })),
    },
  })
  const seed = mnemonicToSeedSync(test_mnemonic, "")
  return {
    boss,
    writer,
    routes,
    signingKey: async (ref) =>
      deriveSigningKey(seed, {
        chain: ref.chain,
        tenant_index: ref.tenant_index,
        wallet_index: ref.wallet_index,
      }),
    stop: async () => {
      await boss.stop({ graceful: true, timeout: 5_000 })
      await Effect.runPromise(store.close)
    },
  }
}

/** The flow with the EVM adapter on the anvil at `rpc_url` as the sandbox's `ethereum`. */
export async function composeTransfers(pool: pg.Pool, rpc_url: string): Promise<TransferHarness> {
  const adapter = makeEvmAdapter({ chain_id: transfer_chain_id, rpc_url, finality_confirmations: 1 })
  const flow = await composeTransferFlow(pool, chainRoutes({ sandbox: new Map([["ethereum", adapter]]) }))
  return { ...flow, adapter }
}

/** What the child worker sends on: the test's anvil, or the test's LiteSVM or TON sandbox over a bridge. */
export type WorkerProcessTarget =
  | { readonly rpc_url: string }
  | { readonly solana_transport_url: string }
  | { readonly ton_transport_url: string }

/**
 * Starts a transfer worker in its own process (transfer-worker-process.ts) and answers it with the
 * hash of its first broadcast, after which it holds its job until killed; bounded by `wait_ms_max`.
 */
export async function workerProcessUntilBroadcast(
  database_url: string,
  target: WorkerProcessTarget,
  wait_ms_max: number,
): Promise<{ readonly child: ChildProcess; readonly broadcast: string }> {
  const child = spawn(
    process.execPath,
    [
      path.join(import.meta.dirname, "transfer-worker-process.ts"),
      JSON.stringify({ database_url, ...target }),
    ],
    { stdio: ["ignore", "pipe", "inherit"] },
  )
  const broadcast = await new Promise<string>((resolve, reject) => {
    const timer = setTimeout(() => {
      child.kill("SIGKILL")
      reject(new Error("the child worker did not broadcast in time"))
    }, wait_ms_max)
    const lines = createInterface({ input: child.stdout as NodeJS.ReadableStream })
    lines.on("line", (line) => {
      const parsed = JSON.parse(line) as { broadcast?: string }
      if (parsed.broadcast === undefined) return
      clearTimeout(timer)
      resolve(parsed.broadcast)
    })
    child.once("exit", (code) => {
      clearTimeout(timer)
      reject(new Error(`the child worker exited with ${String(code)} before broadcasting`))
    })
  })
  return { child, broadcast }
}

/** SIGKILLs the child and waits until it is gone. */
export async function killWorkerProcess(child: ChildProcess): Promise<void> {
  const exited = new Promise((resolve) => child.once("exit", resolve))
  child.kill("SIGKILL")
  await exited
}
