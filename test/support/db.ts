/**
 * A fresh database per test file (or per test) on the run's PostgreSQL server, with every platform
 * migration applied.
 */
import { randomBytes } from "node:crypto"
import pg from "pg"
import { inject } from "vitest"
import { ensureDatabase } from "../../src/db/embedded.ts"
import { runMigrations } from "../../src/db/migrate.ts"
import { platformMigrations } from "../../src/db/migrations.ts"

export interface TestDatabase {
  readonly url: string
  readonly pool: pg.Pool
  /** Closes the pool and drops the database. */
  readonly drop: () => Promise<void>
}

export const serverUrl = (): string => inject("pgServerUrl")

/**
 * A fresh database migrated only below `version`: the state a migration's test starts from (its
 * test then runs every migration).
 */
export const databaseBefore = async (version: number): Promise<TestDatabase> => {
  const db = await freshDatabase({ migrate: false })
  await runMigrations(
    db.pool,
    platformMigrations.filter((m) => m.version < version),
  )
  return db
}

export const freshDatabase = async (options: { readonly migrate?: boolean } = {}): Promise<TestDatabase> => {
  const name = `t_${randomBytes(6).toString("hex")}`
  const url = await ensureDatabase(serverUrl(), name)
  const pool = new pg.Pool({ connectionString: url, max: 20 })
  // drop() force-closes the database's sessions; an idle client that notices first must not crash
  // the test process with an unhandled 'error' event.
  pool.on("error", () => {})
  if (options.migrate !== false) await runMigrations(pool, platformMigrations)
  return {
    url,
    pool,
    drop: async () => {
      await pool.end()
      const admin = new pg.Client({ connectionString: serverUrl() })
      await admin.connect()
      try {
        await admin.query(`drop database if exists ${admin.escapeIdentifier(name)} with (force)`)
      } finally {
        await admin.end()
      }
    },
  }
}
