/**
 * The pg-boss side of deliveries: one queue, one job per delivery attempt. Jobs are always written
 * through the caller's connection (`db` adapter), so a job exists exactly when the transaction that
 * decided it (a dispatch, a failed attempt, a redelivery) commits.
 *
 * pg-boss's own retries are not the delivery schedule: a job that throws (the database was
 * unreachable while recording) is retried by pg-boss with `infrastructure_retry`, and the attempt it
 * carries is recorded at most once, because recording is guarded by the delivery's attempt count.
 */
import type pg from "pg"
import type { Db, PgBoss } from "pg-boss"

export const delivery_queue = "webhook-delivery"

/** A job's data: which delivery, and which attempt (1-based) this job makes. */
export interface DeliveryJob {
  readonly delivery_id: string
  readonly attempt: number
  /**
   * Its tenant and environment (`deliveryGroup`), also the job's pg-boss group: the workers of a
   * process run at most so many jobs of one group at once. Absent in jobs written before groups.
   */
  readonly group?: string
}

/** The pg-boss group of a tenant's deliveries in one environment. */
export const deliveryGroup = (tenant_id: string, environment: string): string => `${tenant_id}|${environment}`

/** Retries by pg-boss of a job that failed to run (not of a failed HTTP request). */
export const infrastructure_retry = {
  retryLimit: 20,
  retryDelay: 5,
  retryBackoff: true,
  retryDelayMax: 300,
} as const

/**
 * pg-boss statements on one connection: the caller's transaction, or the pool for pg-boss itself.
 * @example await boss.insert(delivery_queue, jobs, { db: pgBossDb(client) })
 */
export const pgBossDb = (db: pg.Pool | pg.PoolClient): Db => ({
  executeSql: async (text, values) => await db.query(text, values),
})

/**
 * Queues one job per attempt in the caller's transaction, each due `delay_ms` from now by the
 * database's clock. One statement, whatever the number of jobs.
 * @example await sendDeliveryJobs(boss, client, [{ delivery_id, attempt: 1, delay_ms: 0 }])
 */
export const sendDeliveryJobs = async (
  boss: PgBoss,
  client: pg.PoolClient,
  jobs: ReadonlyArray<DeliveryJob & { readonly delay_ms: number }>,
): Promise<void> => {
  if (jobs.length === 0) return
  await boss.insert(
    delivery_queue,
    jobs.map((job) => ({
      data:
        job.group === undefined
          ? { delivery_id: job.delivery_id, attempt: job.attempt }
          : { delivery_id: job.delivery_id, attempt: job.attempt, group: job.group },
      startAfter: `${Math.max(0, Math.round(job.delay_ms))} milliseconds`,
      ...(job.group === undefined ? {} : { group: { id: job.group } }),
    })),
    { db: pgBossDb(client) },
  )
}
