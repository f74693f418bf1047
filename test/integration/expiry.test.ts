// Proves the expiry sweeper: a reservation in a ledger that receives no further command is released
// at its expiry by the sweeper, through the writer (so the log records the expiration), and the
// read model then shows it expired and the funds available again.
import { Effect, Layer, Result } from "effect"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import {
  makePostgresEventStore,
  PostgresEventStoreLive,
} from "../../adapters/eventstore/postgres/event-store.ts"
import { ledgerStreamId } from "../../domain/ledger/index.ts"
import { sweepExpiredReservations } from "../../src/ledger/expiry.ts"
import { getAccount, getTransfer, waitForStreamHead } from "../../src/ledger/queries.ts"
import { LedgerWriter } from "../../src/ledger/writer.ts"
import { Database } from "../../src/ports/database.ts"
import { startProjection } from "../../src/projections/runner.ts"
import { freshDatabase, type TestDatabase } from "../support/db.ts"
import { createTransfers, openAccount, transfer } from "../support/ledger-fixtures.ts"

let db: TestDatabase
beforeAll(async () => {
  db = await freshDatabase()
})
afterAll(async () => {
  await db.drop()
})

/** The reservation's lifetime: long enough that the first sweep, after five commands and a catch-up, is early. */
const hold_ms = 2_000

describe("expiry sweeper", () => {
  it("releases a lapsed reservation of an idle ledger, once", async () => {
    const layer = LedgerWriter.layer().pipe(
      Layer.provideMerge(PostgresEventStoreLive),
      Layer.provideMerge(Layer.succeed(Database, { pool: db.pool })),
    )
    const ledger = { tenant: "sweep", environment: "sandbox" }
    const stream_id = ledgerStreamId(ledger)
    const projection = startProjection(db.pool, makePostgresEventStore(db.pool), { idle_wait_ms: 50 })
    try {
      await Effect.runPromise(
        Effect.gen(function* () {
          const writer = yield* LedgerWriter
          const ctx = { actor: "test", correlation_id: "c" }
          const now = Date.now()
          for (const command of [
            openAccount("world", "world", now),
            openAccount("alice", "wallet", now),
            openAccount("bob", "wallet", now),
            createTransfers([transfer("fund", "world", "alice", 100n)], now),
            createTransfers(
              [transfer("hold", "alice", "bob", 60n, { pending: { timeout_ms: hold_ms } })],
              now,
            ),
          ]) {
            yield* writer.execute(ledger, command, ctx)
          }
          // Nothing is due yet: the sweep touches no ledger.
          yield* Effect.promise(() => waitForStreamHead(db.pool, stream_id, 5_000))
          expect(yield* sweepExpiredReservations).toBe(0)

          // Swept once it lapsed, not before (a slow machine only makes the first sweeps find nothing).
          let swept = 0
          while (swept === 0 && Date.now() - now < hold_ms + 15_000) {
            yield* Effect.sleep("100 millis")
            swept = yield* sweepExpiredReservations
          }
          expect(swept).toBe(1)
          expect(Date.now() - now).toBeGreaterThanOrEqual(hold_ms)
          yield* Effect.promise(() => waitForStreamHead(db.pool, stream_id, 5_000))
          // Already expired: a second sweep finds nothing.
          expect(yield* sweepExpiredReservations).toBe(0)

          const held = yield* Effect.promise(() => getTransfer(db.pool, stream_id, "hold"))
          expect(held?.status).toBe("expired")
          const alice = yield* Effect.promise(() => getAccount(db.pool, stream_id, "alice"))
          expect(alice?.debits_pending).toBe(0n)
          // The funds are available again: spending all 100 now succeeds.
          const spend = yield* Effect.result(
            writer.execute(
              ledger,
              createTransfers([transfer("spend", "alice", "bob", 100n)], Date.now()),
              ctx,
            ),
          )
          expect(Result.isSuccess(spend)).toBe(true)
        }).pipe(Effect.provide(layer)),
      )
    } finally {
      await projection.stop()
    }
  })
})

describe("expiry sweeper, one ledger failing", () => {
  it("holds up no other ledger when one dies every time (its log cannot be loaded)", async () => {
    const tenants = ["t1", "t2", "t3", "t4", "t5", "t6"].map((tenant) => `failing-${tenant}`)
    for (const tenant of tenants) {
      const stream_id = ledgerStreamId({ tenant, environment: "sandbox" })
      await db.pool.query(
        `insert into read_model.ledger_accounts (stream_id, account_id, tenant, environment, asset_code, symbol,
           chain, decimals, kind, debits_must_not_exceed_credits, credits_must_not_exceed_debits, code,
           user_data, debits_pending, debits_posted, credits_pending, credits_posted, opened_at, last_stream_version)
         values ($1, 'alice', $2, 'sandbox', 'USD', 'USD', 'x', 2, 'wallet', true, false, 1, null, 1, 0, 0, 1, now(), 1)`,
        [stream_id, tenant],
      )
      await db.pool.query(
        `insert into read_model.ledger_transfers (stream_id, transfer_id, kind, debit_account_id, credit_account_id,
           asset_code, amount, code, status, created_at, expires_at, stream_version, global_position)
         values ($1, 'hold', 'pending', 'alice', 'bob', 'USD', 1, 1, 'pending', now() - interval '1 hour',
           now() - interval '1 minute', 2, 1)`,
        [stream_id],
      )
    }
    const swept = new Set<string>()
    // Every ledger dies but one; it is reached whatever the order.
    const healthy = tenants[3]
    const writer = {
      execute: (ledger: { tenant: string }) =>
        ledger.tenant === healthy
          ? Effect.sync(() => {
              swept.add(ledger.tenant)
            })
          : Effect.die(new Error(`ledger ${ledger.tenant} cannot be loaded`)),
    } as unknown as LedgerWriter["Service"]
    const layer = Layer.mergeAll(
      Layer.succeed(LedgerWriter, writer),
      Layer.succeed(Database, { pool: db.pool }),
    )
    const touched = await Effect.runPromise(sweepExpiredReservations.pipe(Effect.provide(layer)))
    expect(touched).toBeGreaterThanOrEqual(tenants.length)
    expect([...swept]).toEqual([healthy])
  })
})
