/**
 * One way to run statements in a transaction, shared by every module that writes several rows that
 * belong together.
 */
import type pg from "pg"

/**
 * Runs `work` in a transaction: its own when given the pool; the caller's when given a client
 * (which must then be inside one, since the statements belong together).
 */
export const inTransaction = async <T>(
  db: pg.Pool | pg.PoolClient,
  work: (client: pg.PoolClient) => Promise<T>,
): Promise<T> => {
  if (!("release" in db)) {
    const client = await db.connect()
    let healthy = true
    try {
      await client.query("begin")
      const result = await work(client)
      await client.query("commit")
      return result
    } catch (error) {
      // A connection that cannot even roll back is destroyed rather than pooled.
      await client.query("rollback").catch(() => {
        healthy = false
      })
      throw error
    } finally {
      client.release(healthy ? undefined : true)
    }
  }
  return await work(db)
}
