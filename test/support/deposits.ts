/**
 * The deposit watcher's harness for the chains' deposit tests: a fresh PostgreSQL with one sandbox
 * tenant, ledger writers with the deposit hook (one per "process"), watchers that scan only when
 * asked, and the reads a test checks a deposit with (its rows, the wallet's ledger balance, the
 * ledger transfers and the `deposit.confirmed` events). The EVM test keeps its own copy of these
 * reads; the Solana and TON tests share this one.
 */
import { Effect } from "effect"
import { makePostgresEventStore } from "../../adapters/eventstore/postgres/event-store.ts"
import type { Asset } from "../../domain/money/asset.ts"
import type { JsonObject } from "../../domain/webhooks/events.ts"
import { depositHook } from "../../src/deposits/hook.ts"
import { type DepositRow, fromDb } from "../../src/deposits/model.ts"
import { type DepositWatcher, startDepositWatcher, type WatchedChain } from "../../src/deposits/watcher.ts"
import { composeHooks, type LedgerWriterService, makeLedgerWriter } from "../../src/ledger/writer.ts"
import { ledgerOf, walletAccountId } from "../../src/platform/accounts.ts"
import { enqueueEvents } from "../../src/webhooks/store.ts"
import { freshDatabase, type TestDatabase } from "./db.ts"

export interface DepositHarness {
  readonly db: TestDatabase
  readonly tenant_id: string
  /** The writer of "this process". */
  readonly writer: LedgerWriterService
  /** A writer of another process (its own in-memory ledger state). */
  readonly newWriter: () => LedgerWriterService
  /** A watcher over `chains` with no timer; errors of its scans are pushed to `errors`. */
  readonly newWatcher: (chains: ReadonlyArray<WatchedChain>, writer?: LedgerWriterService) => DepositWatcher
  readonly errors: Array<unknown>
  /** Registers `address` as the tenant's custody wallet `wallet_id` on `chain`. */
  readonly custodyWallet: (chain: string, wallet_id: string, address: string, index: number) => Promise<void>
  readonly rowsOf: (wallet_id: string) => Promise<Array<DepositRow>>
  /** The wallet's posted balance of `asset`, from a writer that loads the ledger afresh. */
  readonly balanceOf: (wallet_id: string, asset: Asset) => Promise<bigint>
  /** Ledger transfers crediting the wallet's `asset` account, counted in the event log itself. */
  readonly ledgerCreditsOf: (wallet_id: string, asset: Asset) => Promise<number>
  readonly outboxOf: (wallet_id: string) => Promise<Array<Record<string, unknown>>>
  readonly close: () => Promise<void>
}

/**
 * A fresh database with the tenant `tenant_id` in the sandbox.
 * @example const harness = await depositHarness("ten_deposits_ton")
 */
export async function depositHarness(tenant_id: string): Promise<DepositHarness> {
  const db = await freshDatabase()
  const store = makePostgresEventStore(db.pool)
  const ledger = ledgerOf(tenant_id, "sandbox")
  const errors: Array<unknown> = []
  const newWriter = () =>
    makeLedgerWriter(store, {
      transaction: {
        appendStreams: store.appendStreamsInTransaction,
        hook: composeHooks(
          depositHook({
            enqueue: (client, rows) =>
              enqueueEvents(
                client,
                rows.map((row) => ({ ...row, data: row.data as JsonObject })),
              ),
          }),
        ),
      },
    })
  const writer = newWriter()
  await db.pool.query(
    `insert into platform.tenants (tenant_id, email, password_hash, company_name, plan, custody_index, created_at)
     values ($1, $2, 'x', 'Deposits', 'basic', 7, now())`,
    [tenant_id, `${tenant_id}@example.com`],
  )
  await db.pool.query(
    "insert into platform.tenant_environments (tenant_id, environment) values ($1, 'sandbox')",
    [tenant_id],
  )
  return {
    db,
    tenant_id,
    writer,
    newWriter,
    errors,
    newWatcher: (chains, of = writer) =>
      startDepositWatcher(
        { pool: db.pool, writer: of, chains },
        { interval_ms: null, onError: (error) => errors.push(error) },
      ),
    custodyWallet: async (chain, wallet_id, address, index) => {
      await db.pool.query(
        `insert into platform.wallets
           (wallet_id, tenant_id, environment, chain, address, derivation_index, external_id, label, created_at)
         values ($1, $2, 'sandbox', $3, $4, $5, $1, 'deposits', now())`,
        [wallet_id, tenant_id, chain, address, index],
      )
    },
    rowsOf: async (wallet_id) =>
      (
        await db.pool.query(
          "select * from platform.chain_deposits where wallet_id = $1 order by block_number, log_index",
          [wallet_id],
        )
      ).rows.map(fromDb),
    balanceOf: async (wallet_id, asset) => {
      const { state } = await Effect.runPromise(newWriter().snapshot(ledger))
      const account = state.accounts.get(walletAccountId(wallet_id, asset))
      return account === undefined ? 0n : account.credits_posted - account.debits_posted
    },
    ledgerCreditsOf: async (wallet_id, asset) => {
      const found = await db.pool.query<{ count: string }>(
        `select count(*) from events
          where event_type = 'TransferCreated' and data->>'credit_account_id' = $1`,
        [walletAccountId(wallet_id, asset)],
      )
      return Number(found.rows[0]?.count)
    },
    outboxOf: async (wallet_id) =>
      (
        await db.pool.query<{ data: Record<string, unknown> }>(
          `select data from platform.webhook_events
            where event_type = 'deposit.confirmed' and data->>'wallet_id' = $1`,
          [wallet_id],
        )
      ).rows.map((row) => row.data),
    close: async () => {
      await Effect.runPromise(store.close)
      await db.drop()
    },
  }
}
