/**
 * The webhook engine in one process: pg-boss on the platform's shared pool, the dispatcher (leader
 * only) and the delivery workers. Every process may run one; deliveries spread over all of them.
 */
import type pg from "pg"
import { type JobResult, PgBoss } from "pg-boss"
import { assert } from "../../domain/assert.ts"
import {
  type DeliverySettings,
  deliverAttempt,
  jobLifetimeSeconds,
  unreadable_secret_hold_ms,
} from "./delivery.ts"
import { dispatch_batch_size_max, type RunningDispatcher, startDispatcher } from "./dispatcher.ts"
import { type DeliveryJob, delivery_queue, infrastructure_retry, pgBossDb } from "./queue.ts"
import { assertRetrySchedule, type RetrySchedule, retrySchedule } from "./retry.ts"
import { sealStoredSecrets, type WebhookSecretBox } from "./secrets.ts"

export interface WebhookEngineOptions {
  /** How often the dispatcher reads the outbox once it is empty; default 100. */
  readonly poll_interval_ms?: number
  /** Events per dispatch transaction (1..5,000); default 500. */
  readonly dispatch_batch_size?: number
  /** Default `retrySchedule` (26 attempts over about 3 days); tests pass millisecond delays. */
  readonly retry_schedule?: RetrySchedule
  /** How long a receiver has to answer; default 10,000. */
  readonly delivery_timeout_ms?: number
  /**
   * Delivery workers in this process (1..64); default 16. Each sends one attempt at a time, so a
   * receiver that never answers holds one worker for the timeout, never a batch of other attempts.
   */
  readonly worker_count?: number
  /** Jobs a worker takes at once, sent concurrently, the worker waiting for all (1..100); default 1. */
  readonly worker_batch_size?: number
  /**
   * Jobs of one tenant (and environment) the workers of this process run at once (1..worker_count);
   * default a third of the workers, so one tenant's sandbox and production together hold two
   * thirds at most. A fetch passes over a tenant's due jobs while it has that many
   * running (pg-boss's local group concurrency), so other tenants' jobs behind them go first.
   */
  readonly tenant_attempts_max?: number
  /** How often an idle worker looks for due jobs (retries); pg-boss's floor is 500; default 1,000. */
  readonly worker_poll_interval_ms?: number
  /** How often a standby dispatcher tries to take over; default 1,000. */
  readonly standby_retry_ms?: number
  /** How long an attempt whose endpoint's secret cannot be opened waits to look again; default 60,000. */
  readonly unreadable_secret_hold_ms?: number
  /** Errors of the dispatcher, the workers and pg-boss; default: ignored (the engine keeps going). */
  readonly onError?: (error: unknown) => void
}

export interface WebhookEngine {
  /** The pg-boss instance the engine works with; `redeliver` needs it. */
  readonly boss: PgBoss
  /** True while this process's dispatcher is the leader. */
  readonly isDispatching: () => boolean
  /** Stops dispatching, lets requests in flight finish, stops the workers (and pg-boss if ours). */
  readonly stop: () => Promise<void>
}

/**
 * How soon an attempt caught in flight by a crash goes out again: its job's heartbeat goes stale
 * after `job_heartbeat_s` (pg-boss's least), pg-boss looks for stale jobs every `monitor_interval_s`,
 * then retries the job after its retry delay (5 s): about 15-30 s after the crash in all.
 */
export const job_heartbeat_s = 10
const supervise_interval_s = 5
const monitor_interval_s = 10

const bounded = (name: string, value: number, min: number, max: number): number => {
  assert(Number.isInteger(value) && value >= min && value <= max, `${name} out of range`)
  return value
}

/** Registers the delivery workers; returns their ids, so the dispatcher can wake them. */
const startWorkers = async (
  boss: PgBoss,
  pool: pg.Pool,
  settings: DeliverySettings,
  options: WebhookEngineOptions,
  onError: (error: unknown) => void,
): Promise<ReadonlyArray<string>> => {
  let worker_ids: ReadonlyArray<string> = []
  let next_wake = 0
  const handle = async (jobs: ReadonlyArray<{ id: string; data: DeliveryJob; signal: AbortSignal }>) => {
    try {
      return await Promise.all(
        jobs.map(async (job): Promise<JobResult> => {
          try {
            await deliverAttempt(pool, boss, settings, job.data, job.id, job.signal)
            return { id: job.id, status: "completed" }
          } catch (error) {
            onError(error)
            return { id: job.id, status: "failed", output: { message: String(error) } }
          }
        }),
      )
    } finally {
      // A job done frees its tenant's slot: one worker (in turn) fetches again at once, instead of
      // all of them waiting out their polling interval after fetches that passed over that tenant.
      const wake = worker_ids[next_wake++ % Math.max(1, worker_ids.length)]
      if (wake !== undefined) boss.notifyWorker(wake)
    }
  }
  const batch_size = bounded("worker_batch_size", options.worker_batch_size ?? 1, 1, 100)
  const worker_count = bounded("worker_count", options.worker_count ?? 16, 1, 64)
  const work_options = {
    batchSize: batch_size,
    pollingIntervalSeconds:
      bounded("worker_poll_interval_ms", options.worker_poll_interval_ms ?? 1_000, 500, 60_000) / 1000,
    perJobResults: true,
    localConcurrency: worker_count,
    // A fetch passes over the due jobs of a tenant (group) with this many running here.
    localGroupConcurrency: bounded(
      "tenant_attempts_max",
      options.tenant_attempts_max ?? Math.max(1, Math.floor(worker_count / 3)),
      1,
      worker_count,
    ),
    // While more jobs are due than the workers hold, each fetches again at once instead of
    // waiting its polling interval (the queue's ready count, as pg-boss last read it).
    burstWhenReadyExceeds: worker_count * batch_size,
  } as const
  const work_id = await boss.work<DeliveryJob>(delivery_queue, work_options, handle)
  // work() answers the first worker's id; the dispatcher wakes every one of them.
  worker_ids = boss
    .getWipData()
    .filter(
      (worker) => worker.name === delivery_queue && (worker.id === work_id || worker.workId === work_id),
    )
    .map((worker) => worker.id)
  return worker_ids
}

/**
 * Starts the engine on the shared pool. Without `boss`, it creates pg-boss over the pool (installing
 * or migrating pg-boss's schema), and stops it on `stop`; with one, it uses it and leaves it running.
 * @example
 * const engine = await startWebhookEngine({ pool, secrets: makeWebhookSecretBox(kek) })
 * // ... on shutdown:
 * await engine.stop()
 */
export async function startWebhookEngine(input: {
  readonly pool: pg.Pool
  /** Opens the endpoints' sealed signing secrets. */
  readonly secrets: WebhookSecretBox
  readonly boss?: PgBoss
  readonly options?: WebhookEngineOptions
}): Promise<WebhookEngine> {
  const { pool, options = {} } = input
  const onError = options.onError ?? (() => {})
  const delivery_timeout_ms = bounded("delivery_timeout_ms", options.delivery_timeout_ms ?? 10_000, 1, 60_000)
  const settings: DeliverySettings = {
    secrets: input.secrets,
    schedule: assertRetrySchedule(options.retry_schedule ?? retrySchedule),
    delivery_timeout_ms,
    random: Math.random,
    onHeld: onError,
    hold_ms: bounded(
      "unreadable_secret_hold_ms",
      options.unreadable_secret_hold_ms ?? unreadable_secret_hold_ms,
      1,
      3_600_000,
    ),
  }
  // Endpoints stored before secrets were sealed are sealed before anything is signed.
  await sealStoredSecrets(pool, input.secrets)
  const owned = input.boss === undefined
  const boss =
    input.boss ??
    new PgBoss({
      db: pgBossDb(pool),
      schedule: false,
      // Lost jobs are looked for every few seconds, not every minute (pg-boss's default).
      superviseIntervalSeconds: supervise_interval_s,
      monitorIntervalSeconds: monitor_interval_s,
    })
  if (owned) {
    boss.on("error", onError)
    await boss.start()
  }
  // A running job's worker beats every half of `heartbeatSeconds`: a job whose beats stop was lost
  // with its worker (killed, crashed), and pg-boss retries it at its next look. A job still active
  // this long after it started is retried too, beats or not.
  const queue_options = {
    ...infrastructure_retry,
    expireInSeconds: jobLifetimeSeconds(delivery_timeout_ms),
    heartbeatSeconds: job_heartbeat_s,
  }
  await boss.createQueue(delivery_queue, queue_options)
  await boss.updateQueue(delivery_queue, queue_options)
  const worker_ids = await startWorkers(boss, pool, settings, options, onError)
  const dispatcher: RunningDispatcher = startDispatcher(pool, boss, {
    batch_size: bounded(
      "dispatch_batch_size",
      options.dispatch_batch_size ?? 500,
      1,
      dispatch_batch_size_max,
    ),
    poll_interval_ms: bounded("poll_interval_ms", options.poll_interval_ms ?? 100, 1, 60_000),
    standby_retry_ms: bounded("standby_retry_ms", options.standby_retry_ms ?? 1_000, 1, 60_000),
    error_retry_ms_max: 10_000,
    onError,
    onDispatched: () => {
      for (const id of worker_ids) boss.notifyWorker(id)
    },
  })
  return {
    boss,
    isDispatching: dispatcher.isLeader,
    stop: async () => {
      await dispatcher.stop()
      if (owned) await boss.stop({ graceful: true, timeout: delivery_timeout_ms + 5_000 })
      else for (const id of worker_ids) await boss.offWork(delivery_queue, { id, wait: true })
    },
  }
}
