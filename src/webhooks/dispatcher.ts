/**
 * The dispatcher turns outbox events into deliveries. In one transaction per batch it claims the
 * oldest undispatched events, marks them dispatched, creates one delivery per (event, subscribed
 * endpoint) and queues one pg-boss job per delivery through the same connection. A crash anywhere in
 * the batch rolls all of it back, so every event is dispatched exactly once.
 *
 * One process dispatches at a time: the leader holds a session advisory lock on its own connection
 * and writes only through it; others stand by and try again every `standby_retry_ms`. The claim also
 * locks its rows (`for update skip locked`), a second line of defence should two ever run.
 *
 * Events commit out of `position` order (identity values are taken before commit); that is harmless
 * here because the claim takes whatever is undispatched, not what lies after a cursor.
 */
import type pg from "pg"
import type { PgBoss } from "pg-boss"
import { type LockHolder, makeLockHolder } from "../db/lost-sessions.ts"
import { checkOut } from "../projections/batch.ts"
import { sleep } from "../projections/runner.ts"
import { deliveryId } from "./ids.ts"
import { deliveryGroup, sendDeliveryJobs } from "./queue.ts"

/** An arbitrary constant: the advisory lock whose holder is the one dispatcher. */
export const dispatcher_lock_key = 7_201_415_320
export const dispatch_batch_size_max = 5_000

export interface DispatcherOptions {
  /** Events per transaction (1..5,000). */
  readonly batch_size: number
  /** How long to wait before reading the outbox again once it is empty. */
  readonly poll_interval_ms: number
  /** How often a standby dispatcher tries to take over. */
  readonly standby_retry_ms: number
  /** The ceiling of the backoff after an error. */
  readonly error_retry_ms_max: number
  readonly onError: (error: unknown) => void
  /** Called after each batch that created deliveries (the engine wakes its workers). */
  readonly onDispatched: (delivery_count: number) => void
}

export interface RunningDispatcher {
  /** True while this dispatcher holds the leader lock. */
  readonly isLeader: () => boolean
  /** Stops after the batch in flight and releases the lock. Safe to call twice. */
  readonly stop: () => Promise<void>
}

interface ClaimedRow {
  readonly event_id: string
  readonly tenant_id: string
  readonly environment: string
  readonly webhook_id: string | null
}

/**
 * Dispatches one batch on `client`, which must not be inside a transaction. Returns how many events
 * it claimed and how many deliveries it created.
 * @example const { event_count } = await dispatchBatch(client, boss, 500)
 */
export async function dispatchBatch(
  client: pg.PoolClient,
  boss: PgBoss,
  batch_size: number,
): Promise<{ readonly event_count: number; readonly delivery_count: number }> {
  await client.query("begin")
  try {
    // A targeted (test) event goes to its one endpoint, whatever that endpoint subscribes to.
    const claimed = await client.query<ClaimedRow>(
      `with claimed as (
         update platform.webhook_events e set dispatched_at = now()
         where e.event_id in (
           select event_id from platform.webhook_events where dispatched_at is null
           order by position limit $1 for update skip locked)
         returning e.event_id, e.position, e.tenant_id, e.environment, e.event_type, e.target_webhook_id)
       select c.event_id, c.tenant_id, c.environment, w.webhook_id
       from claimed c
       left join platform.webhooks w on w.tenant_id = c.tenant_id and w.environment = c.environment
         and w.deleted_at is null
         and case when c.target_webhook_id is null then w.enabled and c.event_type = any (w.events)
                  else w.webhook_id = c.target_webhook_id end
       order by c.position, w.webhook_id`,
      [batch_size],
    )
    const deliveries = claimed.rows.flatMap((row) =>
      row.webhook_id === null ? [] : [{ ...row, webhook_id: row.webhook_id, delivery_id: deliveryId() }],
    )
    if (deliveries.length > 0) {
      await client.query(
        `insert into platform.webhook_deliveries (delivery_id, event_id, webhook_id, tenant_id, environment,
           status, attempt_count, next_attempt_at, created_at, updated_at)
         select delivery_id, event_id, webhook_id, tenant_id, environment, 'pending', 0, now(), now(), now()
         from unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[])
           as d (delivery_id, event_id, webhook_id, tenant_id, environment)`,
        [
          deliveries.map((d) => d.delivery_id),
          deliveries.map((d) => d.event_id),
          deliveries.map((d) => d.webhook_id),
          deliveries.map((d) => d.tenant_id),
          deliveries.map((d) => d.environment),
        ],
      )
      const jobs = deliveries.map((d) => ({
        delivery_id: d.delivery_id,
        attempt: 1,
        delay_ms: 0,
        group: deliveryGroup(d.tenant_id, d.environment),
      }))
      await sendDeliveryJobs(boss, client, jobs)
    }
    await client.query("commit")
    return {
      event_count: new Set(claimed.rows.map((row) => row.event_id)).size,
      delivery_count: deliveries.length,
    }
  } catch (error) {
    await client.query("rollback").catch(() => {})
    throw error
  }
}

/**
 * Leads while it holds the lock: false at once when another dispatcher holds it, true when stopped.
 * Errors propagate; the connection is then destroyed, which releases the lock.
 */
const leadOnce = async (
  pool: pg.Pool,
  boss: PgBoss,
  options: DispatcherOptions,
  signal: AbortSignal,
  state: { leader: boolean },
  holder: LockHolder,
): Promise<boolean> => {
  const { client, release } = await checkOut(pool)
  let healthy = false
  try {
    await holder.reap(client)
    const locked = await client.query<{ ok: boolean }>("select pg_try_advisory_lock($1) as ok", [
      dispatcher_lock_key,
    ])
    if (locked.rows[0]?.ok !== true) {
      healthy = true
      return false
    }
    await holder.taken(client)
    state.leader = true
    while (!signal.aborted) {
      const { event_count, delivery_count } = await dispatchBatch(client, boss, options.batch_size)
      if (delivery_count > 0) options.onDispatched(delivery_count)
      if (event_count < options.batch_size) await sleep(options.poll_interval_ms, signal)
    }
    state.leader = false
    await client.query("select pg_advisory_unlock($1)", [dispatcher_lock_key])
    healthy = true
    return true
  } finally {
    state.leader = false
    release(healthy)
    holder.letGo(!healthy)
  }
}

/**
 * Starts dispatching (or standing by for the leader lock) until stopped.
 * @example
 * const dispatcher = startDispatcher(pool, boss, { batch_size: 500, poll_interval_ms: 100, ... })
 * await dispatcher.stop()
 */
export function startDispatcher(pool: pg.Pool, boss: PgBoss, options: DispatcherOptions): RunningDispatcher {
  const controller = new AbortController()
  const signal = controller.signal
  const state = { leader: false }
  const holder = makeLockHolder()
  const loop = async (): Promise<void> => {
    let failure_count = 0
    while (!signal.aborted) {
      try {
        const led = await leadOnce(pool, boss, options, signal, state, holder)
        failure_count = 0
        if (!led) await sleep(options.standby_retry_ms, signal)
      } catch (error) {
        if (signal.aborted) break
        options.onError(error)
        failure_count = Math.min(failure_count + 1, 20)
        await sleep(Math.min(options.error_retry_ms_max, 50 * 2 ** failure_count), signal)
      }
    }
  }
  const done = loop()
  return {
    isLeader: () => state.leader,
    stop: async () => {
      controller.abort()
      await done
    },
  }
}
