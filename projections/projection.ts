/**
 * What every read model provides to the machinery that runs it (src/projections: the live runner
 * and the rebuild): the events it reads and the applier that writes its tables.
 */
import type pg from "pg"
import type { Checkpoint } from "../src/ports/event-store.ts"

/**
 * What a projection reads of a recorded event. Every `RecordedEvent` is one; a bulk reader (the
 * rebuild's, src/projections/postgres-reader.ts) fetches only these fields, and metadata only for the
 * event types a projection asks for, which halves the cost of reading the whole store.
 */
export interface ProjectedEvent {
  readonly event_id: string
  readonly event_type: string
  readonly schema_version: number
  readonly stream_id: string
  readonly stream_version: number
  readonly global_position: bigint
  readonly data: Readonly<Record<string, unknown>>
  /** Null when the reader left it out (see `ProjectionDefinition.metadata_for`). */
  readonly metadata: Readonly<Record<string, unknown>> | null
}

/** A batch of events and the subscription cursor after its last one. */
export interface ProjectionBatch {
  readonly events: ReadonlyArray<ProjectedEvent>
  readonly checkpoint: Checkpoint
}

/**
 * Applies batches to a projection's tables, inside transactions its owner (a runner, a rebuild)
 * begins and commits. It may cache rows between batches; the owner calls `discard` whenever a
 * transaction rolls back or another writer may have changed the tables.
 */
export interface ProjectionApplier<Prepared = unknown> {
  /** Applies events inside the caller's transaction, writing only to tables in `schema`. */
  apply(client: pg.ClientBase, schema: string, events: ReadonlyArray<ProjectedEvent>): Promise<void>
  /**
   * The in-memory half of `apply`, for a caller that overlaps it with the previous batch's writes:
   * folds and serializes, reading nothing. Only valid when `needsReads()` is false.
   */
  prepare(events: ReadonlyArray<ProjectedEvent>): Prepared
  /**
   * The writing half of `apply`, inside the caller's transaction. `meanwhile` runs once the bulk
   * insert is on its way to the server, so that CPU work can overlap it.
   */
  write(client: pg.ClientBase, schema: string, prepared: Prepared, meanwhile?: () => void): Promise<void>
  /** True while `apply` may have to read rows it has not cached. */
  needsReads(): boolean
  /** Writes whatever `apply` held back, inside the caller's transaction. */
  flush(client: pg.ClientBase, schema: string): Promise<void>
  /** Forgets every cached row. */
  discard(): void
}

/**
 * A read model: a name (checkpoints, locks, notifications), the event types whose metadata it
 * reads (a bulk reader may leave the others' out) and a factory of appliers, one per runner or
 * rebuild. A rebuild's applier starts from empty tables that nobody else writes or reads.
 */
export interface ProjectionDefinition {
  readonly name: string
  readonly metadata_for: ReadonlyArray<string>
  readonly open: (mode: "live" | "rebuild") => ProjectionApplier
}
