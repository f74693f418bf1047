/**
 * The expiry sweeper. A pending transfer lapses by the ledger's clock: any command decided at or
 * after its expiry records the expiration first (domain/ledger/decider.ts). A ledger that receives
 * no command would keep the funds reserved, so this sweeper finds ledgers with lapsed reservations
 * in the read model and sends them an `ExpirePendingTransfers` command. Running it in several
 * processes is harmless: the writer decides against the log, and a second sweep finds nothing due.
 */
import { Cause, Effect, Layer, Schedule } from "effect"
import { Database } from "../ports/database.ts"
import { LedgerWriter } from "./writer.ts"

/** How often to look for lapsed reservations. */
const sweep_interval_ms = 1_000
/** Ledgers handled per sweep at most; the rest wait for the next one. */
const sweep_ledgers_max = 100

/**
 * Ledgers (tenant, environment) that hold at least one pending transfer past its expiry, in random
 * order: more than `sweep_ledgers_max` of them that fail every time cannot keep the others out.
 */
const ledgersWithLapsedReservations = Effect.gen(function* () {
  const { pool } = yield* Database
  const found = yield* Effect.promise(() =>
    pool.query<{ tenant: string; environment: string }>(
      `select tenant, environment from (
         select distinct a.tenant, a.environment
           from read_model.ledger_transfers t
           join read_model.ledger_accounts a on a.stream_id = t.stream_id and a.account_id = t.debit_account_id
          where t.status = 'pending' and t.expires_at is not null and t.expires_at <= now()) lapsed
       order by random() limit $1`,
      [sweep_ledgers_max],
    ),
  )
  return found.rows
})

/**
 * One sweep: expires what is due in every ledger found, and returns how many ledgers it touched. A
 * ledger that fails, even with a defect (its log cannot be loaded), holds up none after it.
 */
export const sweepExpiredReservations = Effect.gen(function* () {
  const writer = yield* LedgerWriter
  const ledgers = yield* ledgersWithLapsedReservations
  for (const ledger of ledgers) {
    yield* writer
      .execute(
        ledger,
        { type: "ExpirePendingTransfers", now_ms: Date.now() },
        { actor: "system:expiry", correlation_id: "expiry-sweep" },
      )
      .pipe(
        Effect.catch((error) => Effect.logWarning("expiry sweep refused", { ledger, error: error._tag })),
        Effect.catchCause((cause) =>
          Cause.hasInterruptsOnly(cause)
            ? Effect.interrupt
            : Effect.logError("expiry sweep failed for a ledger", { ledger, cause: Cause.pretty(cause) }),
        ),
      )
  }
  return ledgers.length
})

export const ExpirySweeperLive = Layer.effectDiscard(
  Effect.forkScoped(
    sweepExpiredReservations.pipe(
      Effect.catchDefect((defect) =>
        Effect.logError("expiry sweep failed", String(defect)).pipe(Effect.as(0)),
      ),
      Effect.repeat(Schedule.spaced(sweep_interval_ms)),
    ),
  ),
)
