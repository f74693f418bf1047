/**
 * The log's settled end, for the tools that read it whole in position order (verify, export).
 * Positions come from a sequence when an event is written, not when it commits: a transaction still
 * running may hold a position below events already committed, and a reader paging by position
 * would pass it before it commits, then read the events after it (a hole in a stream's chain). So
 * such a reader stops at the highest position committed when it starts, once every transaction
 * running then has ended: every event at or below it is then committed or never will be, and
 * events written later all take greater positions.
 */
import type pg from "pg"

/** How long the tools wait for transactions running when they start. */
const settle_wait_ms_max = 30_000
const settle_poll_ms = 50

export class LogNotSettled extends Error {}

/**
 * The highest position that is settled (see the module comment), after waiting up to `wait_ms`
 * for the transactions running now; 0 for an empty log.
 * @example const up_to_position = await settledPosition(pool) // then readAll({ up_to_position })
 */
export const settledPosition = async (pool: pg.Pool, wait_ms = settle_wait_ms_max): Promise<bigint> => {
  const found = await pool.query<{ head: string; snapshot: string }>(
    "select coalesce(max(global_position), 0)::text as head, pg_current_snapshot()::text as snapshot from events",
  )
  const row = found.rows[0]
  if (row === undefined) throw new Error("no answer to the log's head query")
  const deadline = Date.now() + wait_ms
  for (;;) {
    const running = await pool.query<{ n: number }>(
      `select count(*)::int as n from pg_snapshot_xip($1::pg_snapshot) as x(xid)
        where pg_xact_status(x.xid) = 'in progress'`,
      [row.snapshot],
    )
    if ((running.rows[0]?.n ?? 0) === 0) return BigInt(row.head)
    if (Date.now() >= deadline) {
      throw new LogNotSettled(
        `${running.rows[0]?.n} database transaction(s) running when this started did not end within ${wait_ms / 1000} s: events they hold may sit below events already committed, so the log cannot be read whole yet; retry when they have ended`,
      )
    }
    await new Promise((resolve) => setTimeout(resolve, settle_poll_ms))
  }
}
