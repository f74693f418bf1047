/**
 * Rebuilding a projection from position zero without readers ever seeing a half-built model: the
 * tables are built in a shadow schema, brought up to the head while the live runner carries on, and
 * then, in one transaction that holds the projection's batch lock (the live runner waits between two
 * batches), the last events are applied and the shadow is renamed to `read_model`. The live runner's
 * next batch finds a checkpoint it did not write, reloads it and continues from there.
 */
import type pg from "pg"
import { ledgerProjection } from "../../projections/ledger.ts"
import type { ProjectionBatch, ProjectionDefinition } from "../../projections/projection.ts"
import {
  live_schema,
  projectionIndexesSql,
  projectionTablesSql,
  schemaIdentifier,
} from "../../projections/schema.ts"
import { type Checkpoint, checkpointStart, type EventStore } from "../ports/event-store.ts"
import {
  applyBatchInTransaction,
  type CommitOptions,
  checkOut,
  commitBatch,
  loadCheckpoint,
  lock_class_batch,
  lock_class_rebuild,
  progress_channel,
} from "./batch.ts"
import { type BatchReader, postgresReader, storeReader } from "./postgres-reader.ts"

export interface RebuildProgress {
  /** Applying events to the shadow; building its indexes; applying the last ones and swapping it in. */
  readonly phase: "build" | "index" | "swap"
  /** Events read so far (all types). */
  readonly event_count: number
  /** Events in the store when the rebuild started; the count may end above it. */
  readonly event_count_total: number
  readonly elapsed_ms: number
}

export interface RebuildOptions {
  readonly projection?: ProjectionDefinition
  /** Events per batch (1..10,000); default 10,000. */
  readonly batch_size?: number
  /** Where to build; default `read_model_shadow`. Dropped first if it exists. */
  readonly shadow_schema?: string
  /** Swap the shadow in as `read_model` at the end (default). False leaves it beside the live one. */
  readonly swap?: boolean
  /**
   * "postgres" (default) reads the events table of `pool`'s database directly, fetching only what
   * projections use; "store" reads through the event store port (any adapter), at about half the
   * speed.
   */
  readonly reader?: "postgres" | "store"
  readonly onProgress?: (progress: RebuildProgress) => void
}

export interface RebuildResult {
  readonly event_count: number
  readonly elapsed_ms: number
  readonly checkpoint: Checkpoint
  /** The schema that now holds the rebuilt tables. */
  readonly schema: string
}

/** Another rebuild of the same projection is running. */
export class RebuildInProgress extends Error {
  override readonly name = "RebuildInProgress"
}

/** The event store reads at most this many events per batch. */
const batch_size_max = 10_000

interface BuildContext {
  readonly pool: pg.Pool
  readonly client: pg.ClientBase
  readonly read: BatchReader
  readonly commit: CommitOptions
  readonly batch_size: number
  readonly report: (phase: RebuildProgress["phase"], events: number) => void
}

/**
 * Batches after which the shadow's tables are analysed. Fresh tables have no statistics, and the
 * planner takes them for empty: it could join a batch's keys by scanning a whole table. Once
 * analysed, its estimates grow with the table's size, so a few early runs are enough.
 */
const analyze_after_batches: ReadonlySet<number> = new Set([1, 8])

const analyze = async (client: pg.ClientBase, schema: string): Promise<void> => {
  await client.query(
    `analyze ${schema}.ledger_accounts, ${schema}.ledger_transfers, ${schema}.projection_streams`,
  )
}

/** Batches read ahead of the one being written: reading and writing overlap, memory stays bounded. */
const read_ahead_batch_count = 2

/**
 * The batches after a checkpoint, read up to `read_ahead_batch_count` ahead of the consumer and
 * ending at the first empty one. Reads still in flight when the consumer stops are abandoned.
 */
class ReadAhead {
  readonly #read: BatchReader
  readonly #batch_size: number
  readonly #queue: Array<{ readonly promise: Promise<ProjectionBatch>; settled?: ProjectionBatch }> = []
  /** Where the next read starts; undefined once a read came back empty. */
  #tail: Promise<Checkpoint | undefined>

  constructor(read: BatchReader, start: Checkpoint, batch_size: number) {
    this.#read = read
    this.#batch_size = batch_size
    this.#tail = Promise.resolve(start)
    this.#fill()
  }

  #fill(): void {
    while (this.#queue.length < read_ahead_batch_count + 1) {
      const promise = this.#tail.then((from): Promise<ProjectionBatch> | ProjectionBatch =>
        from === undefined ? { events: [], checkpoint: checkpointStart } : this.#read(from, this.#batch_size),
      )
      const entry: { promise: Promise<ProjectionBatch>; settled?: ProjectionBatch } = { promise }
      promise.then((batch) => (entry.settled = batch)).catch(() => {})
      this.#queue.push(entry)
      this.#tail = promise.then((batch) => (batch.events.length === 0 ? undefined : batch.checkpoint))
      this.#tail.catch(() => {})
    }
  }

  /** The next batch, or undefined once the store has nothing more. */
  async take(): Promise<ProjectionBatch | undefined> {
    const entry = this.#queue.shift()
    this.#fill()
    const batch = await entry?.promise
    return batch === undefined || batch.events.length === 0 ? undefined : batch
  }

  /** The next batch if it has already arrived, without waiting. */
  peek(): ProjectionBatch | undefined {
    const settled = this.#queue[0]?.settled
    return settled === undefined || settled.events.length === 0 ? undefined : settled
  }
}

/**
 * Applies batches, one transaction each, until the store has nothing more. While the server
 * inserts one batch's transfers, this process folds the next batch if it has arrived: the fold
 * needs no reads once the applier caches every row, which it does while it builds from empty.
 */
const catchUp = async (context: BuildContext, start: Checkpoint): Promise<Checkpoint> => {
  const { applier, schema } = context.commit
  const ahead = new ReadAhead(context.read, start, context.batch_size)
  let checkpoint = start
  let batch_count = 0
  // What the applier prepared of the next batch, if that had arrived in time; opaque here.
  let prepared: { readonly value: unknown } | undefined
  for (let batch = await ahead.take(); batch !== undefined; batch = await ahead.take()) {
    let write: (() => Promise<void>) | undefined
    if (!applier.needsReads()) {
      const current = prepared === undefined ? applier.prepare(batch.events) : prepared.value
      prepared = undefined
      const next = ahead.peek()
      write = () =>
        applier.write(context.client, schema, current, () => {
          if (next !== undefined) prepared = { value: applier.prepare(next.events) }
        })
    }
    // Nobody else writes the shadow: a moved checkpoint is a bug, not a race.
    if (!(await commitBatch(context.client, context.commit, checkpoint, batch, write))) {
      throw new Error("rebuild: the shadow checkpoint moved under the rebuild")
    }
    checkpoint = batch.checkpoint
    context.report("build", batch.events.length)
    batch_count += 1
    if (analyze_after_batches.has(batch_count)) await analyze(context.client, schema)
  }
  return checkpoint
}

/** Writes what the applier held back, in a transaction of its own. */
const flush = async (context: BuildContext): Promise<void> => {
  await context.client.query("begin")
  try {
    await context.commit.applier.flush(context.client, context.commit.schema)
    await context.client.query("commit")
  } catch (error) {
    await context.client.query("rollback").catch(() => {})
    throw error
  }
}

/** In the caller's transaction: applies what is left, then renames the shadow to `read_model`. */
const swapIn = async (context: BuildContext, start: Checkpoint): Promise<Checkpoint> => {
  const client = context.client
  const shadow = context.commit.schema
  const name = context.commit.projection_name
  await client.query("select pg_advisory_xact_lock($1, hashtext($2))", [lock_class_batch, name])
  let checkpoint = start
  for (;;) {
    const batch = await context.read(checkpoint, context.batch_size)
    if (batch.events.length === 0) break
    if (!(await applyBatchInTransaction(client, context.commit, checkpoint, batch))) {
      throw new Error("rebuild: the shadow checkpoint moved under the rebuild")
    }
    checkpoint = batch.checkpoint
    context.report("swap", batch.events.length)
  }
  await context.commit.applier.flush(client, shadow)
  const retired = `${live_schema}_retired`
  await client.query(`drop schema if exists ${retired} cascade`)
  await client.query(`alter schema ${live_schema} rename to ${retired}`)
  await client.query(`alter schema ${shadow} rename to ${live_schema}`)
  await client.query(`drop schema ${retired} cascade`)
  await client.query("select pg_notify($1, $2)", [
    progress_channel,
    JSON.stringify({ projection: name, schema: live_schema, rebuilt: true }),
  ])
  return checkpoint
}

const countEvents = async (client: pg.ClientBase): Promise<number> =>
  Number((await client.query<{ n: string }>("select count(*)::text as n from events")).rows[0]?.n ?? 0)

/** Builds the shadow up to the head (indexes included) and, if asked, swaps it in. */
const build = async (context: BuildContext, swap: boolean): Promise<Checkpoint> => {
  const { client } = context
  const shadow = context.commit.schema
  await client.query(`drop schema if exists ${shadow} cascade`)
  await client.query(`create schema ${shadow}`)
  await client.query(projectionTablesSql(shadow))
  let checkpoint = await catchUp(
    context,
    await loadCheckpoint(client, shadow, context.commit.projection_name),
  )
  await flush(context)
  context.report("index", 0)
  await buildIndexes(context.pool, client, shadow)
  await analyze(client, shadow)
  if (!swap) {
    checkpoint = await catchUp(context, checkpoint)
    await flush(context)
    return checkpoint
  }
  await client.query("begin")
  try {
    checkpoint = await swapIn(
      { ...context, commit: { ...context.commit, synchronous_commit: true } },
      checkpoint,
    )
    await client.query("commit")
    return checkpoint
  } catch (error) {
    await client.query("rollback").catch(() => {})
    throw error
  }
}

/**
 * Runs `work` in a transaction of `client` that subscriptions do not wait for, however long it
 * runs: for long work that writes elsewhere and never appends, such as the index builds below. The
 * PostgreSQL event store's contract (its schema's version 106, `event_store_quiet_transactions`).
 * It cannot append: its transaction id is assigned (and declared, by another connection of `pool`,
 * so that readers see it at once) before `work`, and an append must be its transaction's first
 * write. The declaration is removed after; one left behind by a crash names a finished transaction
 * and is ignored (and removed by the next call).
 * @example await runQuietTransaction(client, pool, () => client.query("create index ..."))
 */
const runQuietTransaction = async <A>(
  client: pg.ClientBase,
  pool: pg.Pool,
  work: () => Promise<A>,
): Promise<A> => {
  await pool.query(
    "delete from event_store_quiet_transactions where transaction_id < pg_snapshot_xmin(pg_current_snapshot())",
  )
  await client.query("begin")
  let transaction_id: string | undefined
  try {
    const own = await client.query<{ xid: string }>("select pg_current_xact_id()::text as xid")
    transaction_id = own.rows[0]?.xid
    if (transaction_id === undefined) throw new Error("rebuild: no transaction id")
    await pool.query("insert into event_store_quiet_transactions (transaction_id) values ($1::xid8)", [
      transaction_id,
    ])
    const result = await work()
    await client.query("commit")
    return result
  } catch (error) {
    await client.query("rollback").catch(() => {})
    throw error
  } finally {
    if (transaction_id !== undefined)
      await pool
        .query("delete from event_store_quiet_transactions where transaction_id = $1::xid8", [transaction_id])
        .catch(() => {})
  }
}

const index_build_memory = "256MB"
/** Index builds run side by side, each on its own connection (the machines have two cores or more). */
const index_build_concurrency = 2

/**
 * Creates the secondary indexes once the table is loaded: sorting a whole table once beats
 * maintaining the indexes row by row, and a larger sort memory keeps the sorts off disk. The first
 * build uses the rebuild's own connection, the others borrow from the pool.
 */
const buildIndexes = async (pool: pg.Pool, own: pg.ClientBase, schema: string): Promise<void> => {
  const pending = [...projectionIndexesSql(schema)]
  const build = async (client: pg.ClientBase) => {
    await client.query(`set maintenance_work_mem = '${index_build_memory}'`)
    try {
      // Each in a quiet transaction: CREATE INDEX has a transaction id from its start, which would
      // otherwise hold the live projection (and every read waiting for it) back until it ends.
      for (let sql = pending.shift(); sql !== undefined; sql = pending.shift()) {
        const statement = sql
        await runQuietTransaction(client, pool, () => client.query(statement))
      }
    } finally {
      await client.query("reset maintenance_work_mem")
    }
  }
  // One connection of the pool stays free for the quiet transactions' declarations, which every
  // builder needs while it holds its own.
  const borrowed = Math.min(index_build_concurrency, pool.options.max - 1) - 1
  const helpers = Array.from({ length: Math.max(0, borrowed) }, async () => {
    const { client, release } = await checkOut(pool)
    let healthy = false
    try {
      await build(client)
      healthy = true
    } finally {
      release(healthy)
    }
  })
  await Promise.all([build(own), ...helpers])
}

/**
 * Rebuilds the projection (the ledger by default) from position zero and swaps it in.
 * @example
 * const result = await rebuildProjection(pool, store, { onProgress: (p) => console.error(p.event_count) })
 */
export const rebuildProjection = async (
  pool: pg.Pool,
  store: EventStore["Service"],
  options: RebuildOptions = {},
): Promise<RebuildResult> => {
  const projection = options.projection ?? ledgerProjection
  const shadow = schemaIdentifier(options.shadow_schema ?? `${live_schema}_shadow`)
  if (shadow === live_schema) throw new RangeError("the shadow schema cannot be the live one")
  const batch_size = options.batch_size ?? batch_size_max
  if (!Number.isInteger(batch_size) || batch_size < 1 || batch_size > batch_size_max) {
    throw new RangeError(`batch_size must be an integer between 1 and ${batch_size_max}`)
  }
  const started_ms = Date.now()
  const { client, release } = await checkOut(pool)
  let healthy = false
  try {
    const locked = await client.query<{ ok: boolean }>(
      "select pg_try_advisory_lock($1, hashtext($2)) as ok",
      [lock_class_rebuild, projection.name],
    )
    if (locked.rows[0]?.ok !== true) {
      healthy = true
      throw new RebuildInProgress(`a rebuild of projection ${projection.name} is already running`)
    }
    const event_count_total = await countEvents(client)
    let event_count = 0
    const context: BuildContext = {
      pool,
      client,
      read: options.reader === "store" ? storeReader(store) : postgresReader(pool, projection.metadata_for),
      commit: {
        schema: shadow,
        projection_name: projection.name,
        applier: projection.open("rebuild"),
        take_batch_lock: false,
        synchronous_commit: false,
        notify: false,
      },
      batch_size,
      report: (phase, events) => {
        event_count += events
        options.onProgress?.({ phase, event_count, event_count_total, elapsed_ms: Date.now() - started_ms })
      },
    }
    const swap = options.swap ?? true
    const checkpoint = await build(context, swap).catch(async (error: unknown) => {
      // A half-built shadow is of no use to anyone; the next rebuild would drop it anyway.
      await client.query(`drop schema if exists ${shadow} cascade`).catch(() => {})
      throw error
    })
    await client.query("select pg_advisory_unlock($1, hashtext($2))", [lock_class_rebuild, projection.name])
    healthy = true
    return {
      event_count,
      elapsed_ms: Date.now() - started_ms,
      checkpoint,
      schema: swap ? live_schema : shadow,
    }
  } finally {
    release(healthy)
  }
}

/** The rows of one table that are in one schema and not the other (at most `row_count_max` each way). */
export interface TableDifference {
  readonly table: string
  readonly only_in_a: ReadonlyArray<Record<string, unknown>>
  readonly only_in_b: ReadonlyArray<Record<string, unknown>>
}

const projection_tables = [
  "ledger_accounts",
  "ledger_transfers",
  "projection_checkpoints",
  "projection_streams",
]

/**
 * Compares the projection tables of two schemas row by row (EXCEPT ALL both ways) and returns the
 * tables that differ; an empty array means identical.
 * @example expect(await compareSchemas(pool, "read_model", "read_model_shadow")).toEqual([])
 */
export const compareSchemas = async (
  pool: pg.Pool,
  a: string,
  b: string,
  row_count_max = 100,
): Promise<ReadonlyArray<TableDifference>> => {
  const sa = schemaIdentifier(a)
  const sb = schemaIdentifier(b)
  const differences: TableDifference[] = []
  for (const table of projection_tables) {
    const except = (x: string, y: string) =>
      pool.query<Record<string, unknown>>(
        `(select * from ${x}.${table} except all select * from ${y}.${table}) limit $1`,
        [row_count_max],
      )
    const [onlyA, onlyB] = await Promise.all([except(sa, sb), except(sb, sa)])
    if (onlyA.rows.length > 0 || onlyB.rows.length > 0) {
      differences.push({ table, only_in_a: onlyA.rows, only_in_b: onlyB.rows })
    }
  }
  return differences
}
