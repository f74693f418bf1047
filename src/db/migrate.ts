/**
 * Versioned schema migrations, applied on start. Safe to run twice (applied versions are skipped)
 * and from two processes at once (a session advisory lock serialises the runners).
 */
import type pg from "pg"

export interface Migration {
  /** Unique and increasing; never renumber or edit a published migration. */
  readonly version: number
  readonly name: string
  readonly sql: string
}

/** An arbitrary constant: the advisory lock key that serialises migration runners. */
const migration_lock_key = 7_201_415_001
/**
 * Migrations may run long (an index on a large table), and another process may hold the lock while
 * it migrates: their statements wait past the platform pool's per-statement deadline.
 */
const migration_query_timeout_ms = 24 * 3_600_000
/** node-postgres reads `query_timeout` from a statement's config too (its types leave it out). */
const statement = (
  text: string,
  values?: ReadonlyArray<unknown>,
): pg.QueryConfig & { readonly query_timeout: number } => ({
  text,
  ...(values === undefined ? {} : { values: [...values] }),
  query_timeout: migration_query_timeout_ms,
})

export const runMigrations = async (
  pool: pg.Pool,
  migrations: ReadonlyArray<Migration>,
): Promise<number[]> => {
  const versions = migrations.map((m) => m.version)
  if (new Set(versions).size !== versions.length) throw new Error("duplicate migration versions")
  const client = await pool.connect()
  const applied: number[] = []
  try {
    await client.query(statement("select pg_advisory_lock($1)", [migration_lock_key]))
    try {
      await client.query(
        statement(`create table if not exists schema_migrations (
           version integer primary key,
           name text not null,
           applied_at timestamptz not null default now())`),
      )
      const done = new Set(
        (
          await client.query<{ version: number }>(statement("select version from schema_migrations"))
        ).rows.map((r) => r.version),
      )
      for (const migration of [...migrations].sort((a, b) => a.version - b.version)) {
        if (done.has(migration.version)) continue
        await client.query(statement("begin"))
        try {
          await client.query(statement(migration.sql))
          await client.query(
            statement("insert into schema_migrations (version, name) values ($1, $2)", [
              migration.version,
              migration.name,
            ]),
          )
          await client.query(statement("commit"))
        } catch (error) {
          await client.query(statement("rollback"))
          throw error
        }
        applied.push(migration.version)
      }
    } finally {
      await client.query(statement("select pg_advisory_unlock($1)", [migration_lock_key]))
    }
  } finally {
    client.release()
  }
  return applied
}
