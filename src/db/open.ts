/**
 * Opens the platform database from configuration: the external server at DATABASE_URL, or the
 * embedded one in DATA_DIR (started, or shared when another process of ours already runs it).
 * Migrations are applied before the pool is handed out.
 */
import pg from "pg"
import type { PlatformConfig } from "../config.ts"
import { ensureDatabase, startEmbedded } from "./embedded.ts"
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

export const openDatabase = async (
  config: PlatformConfig,
  options: { readonly poolSize?: number; readonly log?: (line: string) => void } = {},
): Promise<OpenDatabase> => {
  let url: string
  let stopServer = async () => {}
  if (config.databaseUrl !== undefined) {
    url = config.databaseUrl
  } else {
    const server = await startEmbedded({
      dataDir: config.dataDir,
      ...(options.log ? { log: options.log } : {}),
    })
    url = await ensureDatabase(server.url, embedded_database_name)
    stopServer = server.stop
  }
  const pool = new pg.Pool({ connectionString: url, max: options.poolSize ?? 20 })
  // An idle client that loses its connection emits 'error'; without a listener Node would crash.
  pool.on("error", (error) => options.log?.(`idle database client error: ${error.message}`))
  try {
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
      await pool.end()
      await stopServer()
    },
  }
}
