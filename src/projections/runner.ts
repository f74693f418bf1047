/**
 * The subscription runner: keeps a projection up to date with the event store. It reads a batch
 * after its checkpoint, commits rows + checkpoint + stream versions in one transaction, and when it
 * has caught up waits for the store's notification (or a bounded timeout).
 *
 * One process runs a given projection at a time: the runner holds a session advisory lock on its own
 * connection and does all its writes on that connection, so it cannot write without the lock. Other
 * runners stand by and try again every `standby_retry_ms`. The guarded checkpoint update is a second
 * line of defence: a batch whose starting checkpoint is no longer the stored one writes nothing.
 */
import { Effect } from "effect"
import type pg from "pg"
import { ledgerProjection } from "../../projections/ledger.ts"
import type { ProjectionDefinition } from "../../projections/projection.ts"
import { live_schema } from "../../projections/schema.ts"
import { type LockHolder, makeLockHolder } from "../db/lost-sessions.ts"
import type { Checkpoint, EventStore } from "../ports/event-store.ts"
import { type CommitOptions, checkOut, commitBatch, loadCheckpoint, lock_class_leader } from "./batch.ts"

export interface ProjectionOptions {
  /** Defaults to the ledger projection. */
  readonly projection?: ProjectionDefinition
  /** Defaults to `read_model`. */
  readonly schema?: string
  /** Events per batch (1..10,000); default 2,000. */
  readonly batch_size?: number
  /** How long to wait for a notification once caught up before reading again; default 1,000. */
  readonly idle_wait_ms?: number
  /** How often a standby runner tries to take over; default 500. */
  readonly standby_retry_ms?: number
  /** The ceiling of the exponential backoff after an error; default 10,000. */
  readonly error_retry_ms_max?: number
  readonly onError?: (error: unknown) => void
  /** Called after each committed batch. */
  readonly onCommit?: (checkpoint: Checkpoint, event_count: number) => void
}

export interface RunningProjection {
  /** True while this runner holds the projection's leadership lock. */
  readonly isLeader: () => boolean
  /** Stops after the batch in flight (if any) and releases the lock. Safe to call twice. */
  readonly stop: () => Promise<void>
}

const batch_size_max = 10_000
const error_retry_ms_min = 50

/** Resolves after `ms` or as soon as `signal` aborts. */
export const sleep = (ms: number, signal?: AbortSignal): Promise<void> =>
  new Promise((resolve) => {
    if (signal?.aborted === true) return resolve()
    const timer = setTimeout(done, ms)
    function done() {
      clearTimeout(timer)
      signal?.removeEventListener("abort", done)
      resolve()
    }
    signal?.addEventListener("abort", done)
  })

const bounded = (name: string, value: number, min: number, max: number): number => {
  if (!Number.isInteger(value) || value < min || value > max) {
    throw new RangeError(`${name} must be an integer between ${min} and ${max}, got ${value}`)
  }
  return value
}

interface Settings {
  readonly commit: CommitOptions
  readonly batch_size: number
  readonly idle_wait_ms: number
}

/**
 * Leads while it holds the lock: returns false at once when another runner holds it, true when
 * stopped. Errors propagate; the connection is then destroyed, which releases the lock.
 */
const leadOnce = async (
  pool: pg.Pool,
  store: EventStore["Service"],
  settings: Settings,
  signal: AbortSignal,
  state: { leader: boolean },
  onCommit: ProjectionOptions["onCommit"],
  holder: LockHolder,
): Promise<boolean> => {
  const name = settings.commit.projection_name
  const { client, release } = await checkOut(pool)
  let healthy = false
  try {
    await holder.reap(client)
    const locked = await client.query<{ ok: boolean }>(
      "select pg_try_advisory_lock($1, hashtext($2)) as ok",
      [lock_class_leader, name],
    )
    if (locked.rows[0]?.ok !== true) {
      healthy = true
      return false
    }
    await holder.taken(client)
    state.leader = true
    // Whatever was cached before this leadership may be stale: another runner led in between.
    settings.commit.applier.discard()
    let checkpoint = await loadCheckpoint(client, settings.commit.schema, name)
    while (!signal.aborted) {
      const batch = await Effect.runPromise(store.readSubscriptionBatch(checkpoint, settings.batch_size))
      if (batch.events.length === 0) {
        await Effect.runPromise(store.waitForEvents(settings.idle_wait_ms), { signal }).catch(
          (error: unknown) => {
            if (!signal.aborted) throw error
          },
        )
        continue
      }
      if (await commitBatch(client, settings.commit, checkpoint, batch)) {
        checkpoint = batch.checkpoint
        onCommit?.(checkpoint, batch.events.length)
      } else {
        // Someone else moved the checkpoint (a rebuild swapped the schema in): start from theirs.
        checkpoint = await loadCheckpoint(client, settings.commit.schema, name)
      }
    }
    state.leader = false
    await client.query("select pg_advisory_unlock($1, hashtext($2))", [lock_class_leader, name])
    healthy = true
    return true
  } finally {
    state.leader = false
    // A client that failed mid-transaction may still hold the lock: destroy it rather than pool it.
    release(healthy)
    holder.letGo(!healthy)
  }
}

/**
 * Starts keeping `options.projection` (the ledger by default) up to date in `options.schema`.
 * @example
 * const running = startProjection(pool, store, { batch_size: 1000 })
 * // ... later, on shutdown:
 * await running.stop()
 */
export const startProjection = (
  pool: pg.Pool,
  store: EventStore["Service"],
  options: ProjectionOptions = {},
): RunningProjection => {
  const projection = options.projection ?? ledgerProjection
  const settings: Settings = {
    commit: {
      schema: options.schema ?? live_schema,
      projection_name: projection.name,
      applier: projection.open("live"),
      take_batch_lock: true,
      synchronous_commit: true,
      notify: true,
    },
    batch_size: bounded("batch_size", options.batch_size ?? 2_000, 1, batch_size_max),
    idle_wait_ms: bounded("idle_wait_ms", options.idle_wait_ms ?? 1_000, 1, 60_000),
  }
  const standby_retry_ms = bounded("standby_retry_ms", options.standby_retry_ms ?? 500, 1, 60_000)
  const error_retry_ms_max = bounded("error_retry_ms_max", options.error_retry_ms_max ?? 10_000, 1, 600_000)
  const controller = new AbortController()
  const signal = controller.signal
  const state = { leader: false }
  const holder = makeLockHolder()
  const loop = async (): Promise<void> => {
    let failure_count = 0
    while (!signal.aborted) {
      try {
        const led = await leadOnce(pool, store, settings, signal, state, options.onCommit, holder)
        failure_count = 0
        if (!led) await sleep(standby_retry_ms, signal)
      } catch (error) {
        if (signal.aborted) break
        options.onError?.(error)
        failure_count = Math.min(failure_count + 1, 20)
        await sleep(Math.min(error_retry_ms_max, error_retry_ms_min * 2 ** failure_count), signal)
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
