/**
 * Committing one subscription batch to a projection: rows, checkpoint and per-stream versions in one
 * transaction, so each event is applied exactly once. The checkpoint update is guarded by the
 * checkpoint the batch was read from: if another process (a second runner, a rebuild's swap) moved it,
 * nothing is written and the caller reloads.
 */
import type pg from "pg"
import type { ProjectedEvent, ProjectionApplier, ProjectionBatch } from "../../projections/projection.ts"
import { schemaIdentifier } from "../../projections/schema.ts"
import type { Checkpoint } from "../ports/event-store.ts"

/** The channel on which every committed batch is announced, for readers waiting on their writes. */
export const progress_channel = "projection_progress"

/**
 * Advisory lock classes (the first key of the two-key form; the second is `hashtext(name)`).
 * Leadership is a session lock held by the one live runner; the batch lock is taken by every batch
 * transaction of the live schema, so a rebuild holding it pauses the runner between two batches.
 */
export const lock_class_leader = 720_141_601
export const lock_class_batch = 720_141_602
export const lock_class_rebuild = 720_141_603

/** A pool connection held for a long time; see `checkOut`. */
export interface HeldConnection {
  readonly client: pg.PoolClient
  /** Gives the connection back, or destroys it when it may be broken or still hold a lock. */
  readonly release: (healthy: boolean) => void
}

/**
 * Checks out a connection for long use. One that dies while checked out (a restart, a terminated
 * backend) emits 'error' on its client, which crashes the process unless something listens; the
 * failure also reaches the query in flight or the next one, so the listener only has to exist.
 */
export const checkOut = async (pool: pg.Pool): Promise<HeldConnection> => {
  const client = await pool.connect()
  const ignore = () => {}
  client.on("error", ignore)
  return {
    client,
    release: (healthy) => {
      client.off("error", ignore)
      client.release(healthy ? undefined : true)
    },
  }
}

/** Returns the projection's checkpoint in `schema`, creating it at the start if it has none. */
export const loadCheckpoint = async (
  client: pg.ClientBase,
  schema: string,
  projection: string,
): Promise<Checkpoint> => {
  const s = schemaIdentifier(schema)
  await client.query(
    `insert into ${s}.projection_checkpoints (projection, transaction_id, global_position)
     values ($1, '0', 0) on conflict (projection) do nothing`,
    [projection],
  )
  const found = await client.query<{ transaction_id: string; global_position: string }>(
    `select transaction_id::text, global_position::text from ${s}.projection_checkpoints where projection = $1`,
    [projection],
  )
  const row = found.rows[0]
  if (row === undefined) throw new Error(`checkpoint of projection ${projection} vanished`)
  return { transaction_id: row.transaction_id, global_position: BigInt(row.global_position) }
}

export interface CommitOptions {
  readonly schema: string
  readonly projection_name: string
  readonly applier: ProjectionApplier
  /** Take the batch lock first (live schema) so that a rebuild's swap can pause this writer. */
  readonly take_batch_lock: boolean
  /** Rebuilds skip waiting for the WAL flush: a crash only means building the shadow again. */
  readonly synchronous_commit: boolean
  /** Announce the batch on `progress_channel` (not for a shadow schema nobody reads). */
  readonly notify: boolean
}

/** The highest version per stream in a batch, as the two arrays the upsert takes. */
const streamHeads = (events: ReadonlyArray<ProjectedEvent>): { streams: string[]; versions: number[] } => {
  const heads = new Map<string, number>()
  for (const event of events) {
    if ((heads.get(event.stream_id) ?? 0) < event.stream_version)
      heads.set(event.stream_id, event.stream_version)
  }
  return { streams: [...heads.keys()], versions: [...heads.values()] }
}

/**
 * Applies `batch` inside a transaction that the caller has begun on `client`, moving the checkpoint
 * from `expected` to the batch's. Returns false (having written nothing) when the stored checkpoint is
 * not `expected`; the caller rolls back and reloads. `apply` replaces the applier's own `apply`
 * (a rebuild writes a batch it prepared ahead).
 */
export const applyBatchInTransaction = async (
  client: pg.ClientBase,
  options: CommitOptions,
  expected: Checkpoint,
  batch: ProjectionBatch,
  apply: () => Promise<void> = () => options.applier.apply(client, options.schema, batch.events),
): Promise<boolean> => {
  const s = schemaIdentifier(options.schema)
  const name = options.projection_name
  if (!options.synchronous_commit) await client.query("set local synchronous_commit = off")
  if (options.take_batch_lock) {
    await client.query("select pg_advisory_xact_lock($1, hashtext($2))", [lock_class_batch, name])
  }
  const moved = await client.query(
    `update ${s}.projection_checkpoints set transaction_id = $2::xid8, global_position = $3
      where projection = $1 and transaction_id = $4::xid8 and global_position = $5`,
    [
      name,
      batch.checkpoint.transaction_id,
      batch.checkpoint.global_position.toString(),
      expected.transaction_id,
      expected.global_position.toString(),
    ],
  )
  if (moved.rowCount !== 1) return false
  await apply()
  const heads = streamHeads(batch.events)
  await client.query(
    `insert into ${s}.projection_streams (projection, stream_id, version)
     select $1, h.stream_id, h.version from unnest($2::text[], $3::int[]) as h(stream_id, version)
     on conflict (projection, stream_id) do update set version = greatest(${s}.projection_streams.version, excluded.version)`,
    [name, heads.streams, heads.versions],
  )
  if (options.notify) {
    await client.query("select pg_notify($1, $2)", [
      progress_channel,
      JSON.stringify({
        projection: name,
        schema: s,
        global_position: batch.checkpoint.global_position.toString(),
      }),
    ])
  }
  return true
}

/**
 * `applyBatchInTransaction` in a transaction of its own: begin, apply, commit. When nothing is
 * committed (the checkpoint moved, or an error) the applier's caches are discarded.
 */
export const commitBatch = async (
  client: pg.ClientBase,
  options: CommitOptions,
  expected: Checkpoint,
  batch: ProjectionBatch,
  apply?: () => Promise<void>,
): Promise<boolean> => {
  await client.query("begin")
  try {
    const applied = await applyBatchInTransaction(client, options, expected, batch, apply)
    if (!applied) options.applier.discard()
    await client.query(applied ? "commit" : "rollback")
    return applied
  } catch (error) {
    options.applier.discard()
    await client.query("rollback").catch(() => {})
    throw error
  }
}
