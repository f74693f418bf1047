/**
 * What the per-family transfer flow tests (transfers-evm, -solana, -ton) share once their chain is
 * up: crediting a custody wallet in the ledger (the chain side is each family's own), requesting a
 * transfer, reading the ledger's accounts and the transfer's row, waiting for a worker to settle it,
 * running a worker of this process, and reading what a transfer wrote (webhook outbox, ledger events).
 */
import { Effect } from "effect"
import { expect } from "vitest"
import type { Asset } from "../../domain/money/asset.ts"
import type { Environment } from "../../domain/platform/scopes.ts"
import {
  ensureAccounts,
  faucetAccount,
  faucetAccountId,
  ledgerOf,
  walletAccount,
  walletAccountId,
} from "../../src/platform/accounts.ts"
import { fromDb, type TransferRow } from "../../src/transfers/model.ts"
import { requestTransfer, type SourceWallet } from "../../src/transfers/request.ts"
import {
  startTransferWorker,
  type TransferWorker,
  type TransferWorkerOptions,
} from "../../src/transfers/worker.ts"
import type { TestDatabase } from "./db.ts"
import type { TransferFlow } from "./transfers.ts"

export interface TransferKitConfig {
  readonly tenant_id: string
  readonly asset: Asset
  /** What `creditLedger` credits a wallet with, in the asset's smallest unit. */
  readonly funding: bigint
  /** The options of `withWorker`'s worker (each call may add to them). */
  readonly worker_options: TransferWorkerOptions
  readonly settle_wait_ms_max?: number
}

/** What the test's `beforeAll` made: read when a kit function runs, not when the kit is made. */
export interface TransferKitParts {
  readonly db: TestDatabase
  readonly flow: TransferFlow
  /** The token's contract (ERC-20, SPL mint, jetton minter) on the test's chain. */
  readonly contract: string
}

const run = <A, E>(effect: Effect.Effect<A, E>) => Effect.runPromise(effect)

export const transferKit = (config: TransferKitConfig, parts: () => TransferKitParts) => {
  const { asset, funding, tenant_id } = config
  const settle_wait_ms_max = config.settle_wait_ms_max ?? 30_000

  /** Credits the wallet `funding` from the faucet in the ledger (its chain side is the test's). */
  const creditLedger = async (wallet: SourceWallet, environment: Environment = "sandbox") => {
    const { flow } = parts()
    const ledger = ledgerOf(tenant_id, environment)
    const context = { actor: "test", correlation_id: "fund" }
    await run(
      ensureAccounts(
        flow.writer,
        ledger,
        [faucetAccount(asset), walletAccount(wallet.wallet_id, asset)],
        context,
      ),
    )
    await run(
      flow.writer.execute(
        ledger,
        {
          type: "CreateTransfers",
          group_id: null,
          transfers: [
            {
              transfer_id: `fund:${wallet.wallet_id}`,
              debit_account_id: faucetAccountId(asset),
              credit_account_id: walletAccountId(wallet.wallet_id, asset),
              amount: funding,
              code: 200,
              user_data: null,
            },
          ],
          now_ms: Date.now(),
        },
        context,
      ),
    )
  }

  const request = (
    wallet: SourceWallet,
    to_address: string,
    amount: bigint,
    options: { readonly environment?: Environment; readonly idempotency_key?: string } = {},
  ) => {
    const { db, flow, contract } = parts()
    return run(
      requestTransfer(
        { writer: flow.writer, pool: db.pool, routes: flow.routes },
        {
          tenant_id,
          environment: options.environment ?? "sandbox",
          wallet,
          to_address,
          amount,
          token: { asset, contract },
          idempotency_key: options.idempotency_key ?? null,
          actor: "test",
          correlation_id: "transfer",
          now_ms: Date.now(),
        },
      ).pipe(Effect.map(({ row }) => row)),
    )
  }

  const account = async (account_id: string, environment: Environment = "sandbox") => {
    const { state } = await run(parts().flow.writer.snapshot(ledgerOf(tenant_id, environment)))
    const found = state.accounts.get(account_id)
    if (found === undefined) throw new Error(`no account ${account_id}`)
    return found
  }

  const available = async (wallet: SourceWallet) => {
    const payer = await account(walletAccountId(wallet.wallet_id, asset))
    return payer.credits_posted - payer.debits_posted - payer.debits_pending
  }

  const loadRow = async (transfer_id: string): Promise<TransferRow> => {
    const found = await parts().db.pool.query(
      "select * from platform.chain_transfers where transfer_id = $1",
      [transfer_id],
    )
    return fromDb(found.rows[0])
  }

  /** Waits until a worker settled the transfer; bounded. */
  const settled = async (transfer_id: string): Promise<TransferRow> => {
    const deadline = Date.now() + settle_wait_ms_max
    for (;;) {
      const row = await loadRow(transfer_id)
      if (row.status !== "pending") return row
      if (Date.now() > deadline) throw new Error(`transfer ${transfer_id} still pending`)
      await new Promise((resolve) => setTimeout(resolve, 100))
    }
  }

  /** Runs `body` while a worker of this process works the queue with `options`. */
  const withWorker = async <A>(body: () => Promise<A>, options: TransferWorkerOptions = {}): Promise<A> => {
    const { db, flow } = parts()
    const worker: TransferWorker = await startTransferWorker(
      {
        pool: db.pool,
        boss: flow.boss,
        writer: flow.writer,
        routes: flow.routes,
        signingKey: flow.signingKey,
      },
      { ...config.worker_options, ...options },
    )
    try {
      return await body()
    } finally {
      await worker.stop()
    }
  }

  /** The webhook events the transfer wrote to the outbox, in order. */
  const outboxEvents = async (transfer_id: string) =>
    (
      await parts().db.pool.query<{ event_type: string }>(
        "select event_type from platform.webhook_events where data->>'transaction_id' = $1 order by position",
        [transfer_id],
      )
    ).rows.map((row) => row.event_type)

  /** The ledger events of the transfer's pending transfers and their resolutions, in order. */
  const ledgerEventsOf = async (transfer_id: string) =>
    (
      await parts().db.pool.query<{ event_type: string }>(
        `select event_type from events
          where data->>'transfer_id' like $1 || '%' or data->>'pending_id' like $1 || '%' order by global_position`,
        [transfer_id],
      )
    ).rows.map((row) => row.event_type)

  /** The released reservation: nothing pending, nothing posted, every unit available again. */
  const expectReleased = async (wallet: SourceWallet) => {
    const payer = await account(walletAccountId(wallet.wallet_id, asset))
    expect(payer.debits_pending).toBe(0n)
    expect(payer.debits_posted).toBe(0n)
    expect(await available(wallet)).toBe(funding)
  }

  return {
    creditLedger,
    request,
    account,
    available,
    loadRow,
    settled,
    withWorker,
    outboxEvents,
    ledgerEventsOf,
    expectReleased,
  }
}

/** A seam that acts once, for one transfer, between its signature and its first broadcast. */
export const onceBeforeBroadcast = (transfer_id: () => string, act: (row: TransferRow) => Promise<void>) => {
  let done = false
  return async (row: TransferRow): Promise<void> => {
    if (done || row.transfer_id !== transfer_id()) return
    done = true
    await act(row)
  }
}
