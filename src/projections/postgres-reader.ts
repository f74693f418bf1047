/**
 * Where a projection's batches come from. The live runner reads through the event store port; a
 * rebuild, which reads the whole store at once, may instead read the PostgreSQL events table itself
 * and fetch only what projections use (no hashes, no formatted times, metadata only where asked),
 * which halves the cost of reading on both sides of the connection.
 *
 * The bulk reader follows the PostgreSQL adapter's subscription contract exactly (the same cursor,
 * visibility rule and order as `readSubscriptionBatch` in adapters/eventstore/postgres), so its
 * checkpoints are interchangeable with the adapter's; the rebuild tests compare the two.
 */
import { Effect } from "effect"
import pg from "pg"
import type { ProjectedEvent, ProjectionBatch } from "../../projections/projection.ts"
import type { Checkpoint, EventStore } from "../ports/event-store.ts"

/** Reads the next batch after `checkpoint`: empty when nothing new is visible. */
export type BatchReader = (checkpoint: Checkpoint, max_count: number) => Promise<ProjectionBatch>

/** Batches through the event store port. */
export const storeReader =
  (store: EventStore["Service"]): BatchReader =>
  (checkpoint, max_count) =>
    Effect.runPromise(store.readSubscriptionBatch(checkpoint, max_count))

/** A row as the batch query returns it: already a `ProjectedEvent`, plus its transaction id. */
interface SlimRow extends ProjectedEvent {
  readonly transaction_id: string
}

/**
 * Only transactions older than every running one are read, in (transaction id, position) order,
 * so an event that commits late is read late and never skipped. The columns are named and typed
 * so that each row is a `ProjectedEvent` as it comes (no second object per event): the version as
 * float8 (a JavaScript number, exact to 2^53), the position as int8 (a bigint, see `types`).
 */
const batchSql = `
  select e.event_id::text as event_id, e.event_type, e.schema_version, e.stream_id,
         e.stream_version::float8 as stream_version, e.global_position, e.data,
         case when e.event_type = any($4::text[]) then e.metadata end as metadata,
         e.transaction_id::text as transaction_id
    from events e
   where (e.transaction_id, e.global_position) > ($1::xid8, $2::bigint)
     and e.transaction_id < (select event_store_visible_before())
   order by e.transaction_id, e.global_position
   limit $3`

const int8_oid = 20

/** The driver's parsers, except that int8 becomes a bigint (the driver's default is a string). */
const types: pg.CustomTypesConfig = {
  getTypeParser: ((oid: number, format?: "text" | "binary") =>
    oid === int8_oid && format !== "binary"
      ? (text: string) => BigInt(text)
      : pg.types.getTypeParser(oid, format)) as pg.CustomTypesConfig["getTypeParser"],
}

/**
 * Batches straight from the PostgreSQL events table in `pool`'s database, with metadata only for
 * the event types in `metadata_for`.
 * @example const read = postgresReader(pool, ["AccountOpened"]); const batch = await read(checkpointStart, 10_000)
 */
export const postgresReader =
  (pool: pg.Pool, metadata_for: ReadonlyArray<string>): BatchReader =>
  async (checkpoint, max_count) => {
    const found = await pool.query<SlimRow>({
      text: batchSql,
      values: [checkpoint.transaction_id, checkpoint.global_position.toString(), max_count, metadata_for],
      types,
    })
    const last = found.rows.at(-1)
    return {
      events: found.rows,
      checkpoint:
        last === undefined
          ? checkpoint
          : { transaction_id: last.transaction_id, global_position: last.global_position },
    }
  }
