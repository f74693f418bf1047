/**
 * The event store port. The PostgreSQL adapter (adapters/eventstore/postgres) implements it now; an
 * EventStoreDB adapter will implement it later and must pass the same contract suite
 * (test/integration/event-store-contract.ts).
 */
import { Context, Data, type Effect } from "effect"
import type pg from "pg"

/** Who and why: carried by every event, never interpreted by the store. */
export interface EventMetadata {
  readonly tenant: string
  readonly environment: string
  readonly actor: string
  readonly correlation_id: string
  readonly causation_id: string | null
  readonly idempotency_key: string | null
  /** Extra keys (for example a command fingerprint) are kept as they are. */
  readonly [key: string]: unknown
}

/** An event to append. `event_id` is a UUID v7 chosen by the caller so that retries are recognisable. */
export interface NewEvent {
  readonly event_id: string
  readonly event_type: string
  readonly schema_version: number
  readonly data: Readonly<Record<string, unknown>>
  readonly metadata: EventMetadata
}

/** An event as stored. Versions start at 1 in each stream; positions are global and increasing. */
export interface RecordedEvent extends NewEvent {
  readonly stream_id: string
  readonly stream_version: number
  readonly global_position: bigint
  /** ISO 8601 with milliseconds, UTC. */
  readonly recorded_at: string
  /** SHA-256 over `prev_hash` and the canonical bytes of the event, hex. */
  readonly hash: string
  /** The previous event's hash in the stream; 64 zeros for the first event. */
  readonly prev_hash: string
}

/**
 * What the appender believes about the stream: "any" skips the check, "no_stream" requires that the
 * stream has no event yet, a number requires that its last event has exactly that version.
 */
export type ExpectedVersion = "any" | "no_stream" | number

export interface AppendResult {
  /** Version of the last appended event. */
  readonly next_expected_version: number
  /** Global position of the last appended event. */
  readonly last_position: bigint
  readonly events: ReadonlyArray<RecordedEvent>
}

/**
 * How an append relates to the appender's earlier appends. `speculative`: the expected version is
 * the head of an append of the same store that has not answered yet (a pipelining writer decided
 * these events on top of that one's). They are chained only on the events that append chained,
 * never on a head read from the database: if that append did not commit, another writer's events
 * may have reached the same version, and these would land on a state they were not decided on.
 * The append then fails with `WrongExpectedVersion` (its `actual` may equal `expected`: same
 * version, other events).
 */
export interface AppendOptions {
  readonly speculative?: boolean
}

/** One stream's part of a group commit (several streams, one transaction): an exact expected version, at least one event. */
export interface StreamAppend extends AppendOptions {
  readonly stream_id: string
  readonly expected: number | "no_stream"
  readonly events: ReadonlyArray<NewEvent>
}

/** A stream's events as a group commit's work sees them: chained (versions, hashes), no positions yet. */
export interface ChainedAppend {
  readonly next_expected_version: number
  readonly events: ReadonlyArray<Omit<RecordedEvent, "global_position">>
}

/**
 * What a work answers once it has sent every statement it will send: nothing it does later depends
 * on an answer. COMMIT then leaves with its statements, in the same round trip, and PostgreSQL
 * commits only if every one of them succeeded. `done` settles when they have answered.
 */
export interface SentWork {
  readonly sent_all: true
  readonly done: Promise<void>
}

/** A work that writes nothing this time. */
export const sentNothing: SentWork = { sent_all: true, done: Promise.resolve() }

export const isSentWork = (run: Promise<void> | SentWork): run is SentWork =>
  (run as Partial<SentWork>).sent_all === true

/**
 * What must commit with a group commit's events, run on the transaction's connection. It may run
 * more than once (each time in a transaction that is rolled back, but for the last): write, never
 * act outside the database. `undefined` marks a stream that gets no events. A work that still has
 * to read answers before it knows all it writes answers a promise (COMMIT is then sent once it
 * settles); one that sent everything at once answers a `SentWork`.
 */
export type GroupCommitWork = (
  client: pg.PoolClient,
  appended: ReadonlyArray<ChainedAppend | undefined>,
) => Promise<void> | SentWork

/** The transaction was rolled back (or never begun): nothing of it was written. */
export class NotCommitted extends Error {
  override readonly cause: unknown
  constructor(cause: unknown) {
    super(
      `event store: the transaction was rolled back: ${cause instanceof Error ? cause.message : String(cause)}`,
    )
    this.name = "NotCommitted"
    this.cause = cause
  }
}

/** The stream was not at the expected version; nothing was written. */
export class WrongExpectedVersion extends Data.TaggedError("WrongExpectedVersion")<{
  readonly stream_id: string
  readonly expected: ExpectedVersion
  /** 0 when the stream does not exist. */
  readonly actual: number
}> {}

export type Direction = "forwards" | "backwards"

export interface ReadStreamOptions {
  readonly direction?: Direction
  /** Inclusive start version; defaults to the first (forwards) or the last (backwards) event. */
  readonly from_version?: number
  readonly max_count?: number
}

/** A subscription cursor. Opaque to callers: compare only for equality, persist as given. */
export interface Checkpoint {
  readonly transaction_id: string
  readonly global_position: bigint
}

export const checkpointStart: Checkpoint = { transaction_id: "0", global_position: 0n }

export interface SubscriptionBatch {
  readonly events: ReadonlyArray<RecordedEvent>
  /** Cursor after the last event of the batch. */
  readonly checkpoint: Checkpoint
}

export interface ReadAllOptions {
  /** Exclusive: events with a greater global position. Defaults to 0 (from the start). */
  readonly after_position?: bigint
  /** Inclusive: events up to this global position only. Defaults to no bound. */
  readonly up_to_position?: bigint
  readonly max_count?: number
}

export class EventStore extends Context.Service<
  EventStore,
  {
    /** Appends events atomically; all or nothing. Fails with `WrongExpectedVersion` on a mismatch. */
    append(
      stream_id: string,
      expected: ExpectedVersion,
      events: ReadonlyArray<NewEvent>,
      options?: AppendOptions,
    ): Effect.Effect<AppendResult, WrongExpectedVersion>
    /** Reads one stream in version order. An unknown stream reads as empty. */
    readStream(stream_id: string, options?: ReadStreamOptions): Effect.Effect<ReadonlyArray<RecordedEvent>>
    /** The version of the stream's last event, 0 if it has none. */
    streamVersion(stream_id: string): Effect.Effect<number>
    /** Reads committed events of all streams in global position order. */
    readAll(options?: ReadAllOptions): Effect.Effect<ReadonlyArray<RecordedEvent>>
    /**
     * Reads the next batch for a subscriber after `checkpoint`, never skipping an event that commits
     * late: only events whose transaction is older than every transaction still running are read.
     * Within a stream, events come in version order. Returns an empty batch when nothing new is
     * visible yet.
     */
    readSubscriptionBatch(checkpoint: Checkpoint, max_count: number): Effect.Effect<SubscriptionBatch>
    /**
     * Resolves when new events may have been committed (a notification) or after `timeout_ms`,
     * whichever comes first. Subscribers use it to go live after catching up.
     */
    waitForEvents(timeout_ms: number): Effect.Effect<void>
  }
>()("platform/ports/EventStore") {}
