/**
 * Opens the platform database from configuration: the external server at DATABASE_URL, or the
 * embedded one in DATA_DIR (started, or shared when another process of ours already runs it).
 * Migrations are applied before the pool is handed out.
 */
import pg from "pg"
import type { PlatformConfig } from "../config.ts"
import { embeddedServerRunning, ensureDatabase, hasEmbeddedServer, startEmbedded } from "./embedded.ts"
import { runMigrations } from "./migrate.ts"
import { platformMigrations } from "./migrations.ts"

export interface OpenDatabase {
  readonly url: string
  readonly pool: pg.Pool
  /** Ends the pool and stops the embedded server if this process started it. */
  readonly close: () => Promise<void>
}

/** The database the platform uses inside the embedded server. */
const embedded_database_name = "platform"

/** How often the platform checks that its embedded server still runs. */
const embedded_watch_interval_ms = 1_000

/** How long a tool (`existing`) waits for a connection to the database. */
const tool_connect_timeout_ms = 10_000

/** A tool that reads a platform's data found none where it was pointed. */
export class NoPlatformDatabase extends Error {
  override readonly name = "NoPlatformDatabase"
}

export const openDatabase = async (
  config: PlatformConfig,
  options: {
    readonly poolSize?: number
    readonly log?: (line: string) => void
    /** What an operator should see whatever the log level: the embedded server started again. */
    readonly warn?: (line: string) => void
    /**
     * Open only a database the platform has used (the auditor's tools): never initialise a server
     * or create a database, and fail with `NoPlatformDatabase` where there is none.
     */
    readonly existing?: boolean
  } = {},
): Promise<OpenDatabase> => {
  let url: string
  let stopServer = async () => {}
  let watchdog: NodeJS.Timeout | undefined
  if (config.databaseUrl !== undefined) {
    url = config.databaseUrl
  } else {
    if (options.existing === true && !hasEmbeddedServer(config.dataDir)) {
      throw new NoPlatformDatabase(
        `no platform database in DATA_DIR ${config.dataDir} (no PostgreSQL data directory at ${config.dataDir}/pg): point DATA_DIR at the platform's data directory, or set DATABASE_URL`,
      )
    }
    const server = await startEmbedded({
      dataDir: config.dataDir,
      // Ctrl-C in the platform's terminal is the platform's to handle: it stops the server last.
      detached: true,
      ...(options.log ? { log: options.log } : {}),
    })
    try {
      url = await ensureDatabase(server.url, embedded_database_name, {
        create: options.existing !== true,
        connect_timeout_ms:
          options.existing === true ? tool_connect_timeout_ms : config.databaseQueryTimeoutMs,
      })
    } catch (error) {
      await server.stop()
      throw options.existing === true && error instanceof Error
        ? new NoPlatformDatabase(`DATA_DIR ${config.dataDir}: ${error.message}`)
        : error
    }
    let current = server
    stopServer = () => current.stop()
    // A server that dies under the platform (the OOM killer, a kill) is started again, on its port,
    // so the pool's connections come back by themselves; until then requests are answered 503. One
    // that another process of ours started again meanwhile is shared.
    if (options.existing !== true) {
      let restarting = false
      watchdog = setInterval(() => {
        if (restarting || embeddedServerRunning(config.dataDir)) return
        restarting = true
        options.warn?.("the embedded PostgreSQL server stopped unexpectedly: starting it again")
        startEmbedded({
          dataDir: config.dataDir,
          port: current.port,
          detached: true,
          ...(options.log ? { log: options.log } : {}),
        })
          .then((started) => {
            current = started
            options.warn?.("the embedded PostgreSQL server runs again")
          })
          .catch((error: unknown) =>
            options.warn?.(`the embedded PostgreSQL server did not start again (retried): ${String(error)}`),
          )
          .finally(() => {
            restarting = false
          })
      }, embedded_watch_interval_ms)
      watchdog.unref()
    }
  }
  const pool = new pg.Pool({
    connectionString: url,
    max: options.poolSize ?? 20,
    // A tool gives up on a server that takes the connection but never answers, instead of hanging;
    // so does the platform, on a statement or a connection that waits past its deadline (a frozen
    // server, a partition that leaves TCP up): the request is answered 503 instead of held. Tools
    // run statements as long as an export or a rebuild takes.
    ...(options.existing === true
      ? { connectionTimeoutMillis: tool_connect_timeout_ms }
      : {
          connectionTimeoutMillis: config.databaseQueryTimeoutMs,
          query_timeout: config.databaseQueryTimeoutMs,
        }),
  })
  // An idle client that loses its connection emits 'error'; without a listener Node would crash.
  pool.on("error", (error) => options.log?.(`idle database client error: ${error.message}`))
  // So does a checked-out one between statements (the pool listens only to idle ones): the server
  // going away ("terminating connection due to unexpected postmaster exit") crashed the process.
  // Its holder's next statement fails instead, and releasing it with that error discards it.
  pool.on("connect", (client) => {
    client.on("error", (error) => options.log?.(`database client error: ${error.message}`))
  })
  try {
    if (options.existing === true) {
      const found = await pool.query<{ events: string | null }>(
        "select to_regclass('events')::text as events",
      )
      if (found.rows[0]?.events == null) {
        throw new NoPlatformDatabase(
          `the database ${config.databaseUrl === undefined ? `in DATA_DIR ${config.dataDir}` : "at DATABASE_URL"} holds no event store: the platform never ran on it`,
        )
      }
    }
    await runMigrations(pool, platformMigrations)
  } catch (error) {
    await pool.end()
    await stopServer()
    throw error
  }
  return {
    url,
    pool,
    close: async () => {
      clearInterval(watchdog)
      await pool.end()
      await stopServer()
    },
  }
}
