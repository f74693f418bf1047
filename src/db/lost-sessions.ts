/**
 * Session-level advisory locks outlive the connection that took them when the server never learns
 * that connection closed. A process that gives up on a connection (a statement past its deadline, a
 * partition) closes it on its own side; across a partition the server sees nothing, so the session
 * and its lock stay until the server's TCP keepalive ends them (hours, by default). Meanwhile the
 * process itself, trying the lock again, finds it held, by the very session it lost: a leader
 * (projection, webhook dispatcher, sandbox chains, reconciliation, deposit scans) would stand by for
 * ever behind itself.
 *
 * A `LockHolder` remembers the session (its pid and start time, which tell it from a later session
 * reusing the pid) that holds its lock, and one lost while holding it; before the lock is tried
 * again, `reap` ends such sessions that still run, and waits for them to go.
 */
import type pg from "pg"

interface Session {
  readonly pid: number
  readonly started: string
}

/** How long `reap` waits for ended sessions to be gone (their locks released). */
const reap_wait_ms = 5_000

export interface LockHolder {
  /** Ends the sessions lost while they held the lock, if they still run; before trying it. */
  readonly reap: (client: pg.ClientBase) => Promise<void>
  /** The lock was taken on `client`: its session is remembered as the holder. */
  readonly taken: (client: pg.ClientBase) => Promise<void>
  /**
   * The holder's client is let go: `lost` when it was closed on this side without an unlock that
   * went through (the session may hold the lock still), false after an unlock.
   */
  readonly letGo: (lost: boolean) => void
}

/**
 * A holder of one session lock.
 * @example
 * const holder = makeLockHolder()
 * await holder.reap(client)
 * if (await tryLock(client)) await holder.taken(client)
 * // ...
 * holder.letGo(!unlocked)
 */
export const makeLockHolder = (): LockHolder => {
  let holding: Session | undefined
  let lost: Array<Session> = []
  return {
    reap: async (client) => {
      if (lost.length === 0) return
      const sessions = lost
      // Materialized: the ending must apply to the matched sessions only, never be pushed down
      // into the scan of every session.
      const found = await client.query<{ pid: number }>(
        `with lost as materialized (
           select a.pid from pg_stat_activity a
             join unnest($1::int[], $2::timestamptz[]) as l(pid, started)
               on a.pid = l.pid and a.backend_start = l.started)
         select pid from lost where pg_terminate_backend(pid)`,
        [sessions.map((session) => session.pid), sessions.map((session) => session.started)],
      )
      lost = []
      const ended = found.rows.map((row) => row.pid)
      const deadline = Date.now() + reap_wait_ms
      while (ended.length > 0 && Date.now() < deadline) {
        const running = await client.query("select 1 from pg_stat_activity where pid = any($1::int[])", [
          ended,
        ])
        if (running.rows.length === 0) return
        await new Promise((resolve) => setTimeout(resolve, 50))
      }
    },
    taken: async (client) => {
      const session = await client.query<Session>(
        "select pid, backend_start::text as started from pg_stat_activity where pid = pg_backend_pid()",
      )
      holding = session.rows[0]
    },
    letGo: (was_lost) => {
      if (holding !== undefined && was_lost) lost.push(holding)
      holding = undefined
    },
  }
}
