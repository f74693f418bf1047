/**
 * The event store port on PostgreSQL (tables in schema.ts).
 *
 * Appends to one stream are serialised by a transaction-scoped advisory lock on the stream id,
 * taken before the transaction can have a transaction id. So within a stream, transaction ids
 * increase with versions, and a subscriber that reads in `(transaction_id, global_position)` order
 * sees every stream in version order. Subscribers only read transactions older than every running
 * one, so an event whose transaction commits late is read late, never skipped.
 *
 * Expected outcomes (a version mismatch) are typed errors; everything else the database or the
 * network throws at us, and every misuse caught by an assertion, is a defect.
 */

import type { Writable } from "node:stream"
import { Effect, Layer, Result } from "effect"
import pg from "pg"
import { Database } from "../../../src/ports/database.ts"
import {
  type AppendOptions,
  type AppendResult,
  type ChainedAppend,
  type Checkpoint,
  type EventMetadata,
  EventStore,
  type ExpectedVersion,
  type GroupCommitWork,
  isSentWork,
  type NewEvent,
  NotCommitted,
  type ReadAllOptions,
  type ReadStreamOptions,
  type RecordedEvent,
  type StreamAppend,
  type SubscriptionBatch,
  WrongExpectedVersion,
} from "../../../src/ports/event-store.ts"
import { canonicalJsonExact, eventHashesCanonical, GENESIS_HASH } from "../hash.ts"

/** The NOTIFY channel an append signals on (payload: the stream id) unless told otherwise. */
export const defaultNotifyChannel = "event_store_appended"

/** One append is one INSERT statement; this bounds its size (a group commit stays far below). */
const append_event_count_max = 10_000
/** Bounds one subscription read in memory; projection rebuilds read up to 50,000 at a time. */
const subscription_batch_count_max = 100_000
/** Subscribers wake at least this often, so a missed notification costs at most this long. */
const wait_timeout_ms_max = 600_000
/** Appends are announced to other processes at most this often (each announcement is a query). */
const notify_interval_ms = 5
/** Stream heads remembered per store at most (the cache is cleared when full). */
const head_cache_streams_max = 100_000
/** PostgreSQL truncates identifiers (and so channel names) longer than this. */
const channel_name_bytes_max = 63
/** Set transaction-locally by an append so that its next statement can prove a transaction is open. */
const append_marker_setting = "event_store.append_in_transaction"

export interface PostgresEventStoreOptions {
  readonly notifyChannel?: string
  /**
   * Connections of the store's own pool for `appendStreamsInTransaction` (default 4). That pool
   * pipelines: BEGIN, the append and the statements of the caller's work go out together, so a
   * group commit costs one round trip when the work sent everything at once (COMMIT goes with it)
   * and two otherwise (that, then COMMIT), not one per statement.
   */
  readonly transactionConnections?: number
}

export type PostgresEventStore = EventStore["Service"] & PostgresEventStoreExtras

/** What the PostgreSQL store offers beyond the port. */
export interface PostgresEventStoreExtras {
  /**
   * Appends inside the caller's open transaction (READ COMMITTED, the default); the caller commits
   * or rolls back. It must be the transaction's first write: a transaction that already has a
   * transaction id could commit a stream's versions out of subscription order, so that is a
   * defect. On `WrongExpectedVersion` the caller must roll back.
   *
   * @example
   * await client.query("begin")
   * await Effect.runPromise(store.appendWithClient(client, "ledger-t1-sandbox", 4, events))
   * await boss.send("broadcast", job, { db: client }) // same transaction: a transactional outbox
   * await client.query("commit")
   */
  appendWithClient(
    client: pg.PoolClient | pg.Client,
    stream_id: string,
    expected: ExpectedVersion,
    events: ReadonlyArray<NewEvent>,
  ): Effect.Effect<AppendResult, WrongExpectedVersion>
  /**
   * Group commit across streams: appends to several streams in ONE transaction of the store's own,
   * runs `work` in it (rows that must commit with the events: an outbox, read models that may never
   * lag), then commits and announces the appends. BEGIN, the append and the work's statements are
   * pipelined, so the work sees the events as chained, before their positions are known. Each
   * stream's outcome is its own: a stream that is not at its expected version gets nothing
   * (`WrongExpectedVersion` in its place) while the others are appended, in a new transaction with
   * the work run again for them. Like `append`, it chains on the heads it last wrote, so a
   * pipelining writer needs no read first. A work that answers a `SentWork` has COMMIT sent right
   * behind its statements, after a guard that fails the transaction unless every stream reached
   * the head it was chained to: a conflict or any failed statement then makes COMMIT answer
   * ROLLBACK. A failure known to have rolled everything back is thrown as `NotCommitted`; any other
   * failure may have committed.
   * @example store.appendStreamsInTransaction([{ stream_id: "ledger-t1-sandbox", expected: 4, events }], (client) => insertOutbox(client))
   */
  appendStreamsInTransaction(
    appends: ReadonlyArray<StreamAppend>,
    work: GroupCommitWork,
  ): Effect.Effect<ReadonlyArray<Result.Result<AppendResult, WrongExpectedVersion>>>
  /**
   * Closes the LISTEN connection and the store's own group-commit pool, and wakes every waiter. The
   * pool it was given stays open: it is the caller's.
   */
  readonly close: Effect.Effect<void>
}

function assert(condition: boolean, message: string): asserts condition {
  if (!condition) throw new Error(`event store: ${message}`)
}

const toSafeInteger = (text: string, what: string): number => {
  const value = Number(text)
  assert(Number.isSafeInteger(value), `${what} ${text} is not a safe integer`)
  return value
}

const assertCount = (value: number | undefined, maximum: number, what: string): void => {
  if (value === undefined) return
  assert(Number.isSafeInteger(value) && value >= 0 && value <= maximum, `${what} must be in 0..${maximum}`)
}

// --- Rows -------------------------------------------------------------------------------------

interface EventRow {
  readonly global_position: string
  readonly stream_id: string
  readonly stream_version: string
  readonly event_id: string
  readonly event_type: string
  readonly schema_version: number
  readonly data: Record<string, unknown>
  readonly metadata: EventMetadata
  readonly recorded_at: string
  readonly transaction_id: string
  readonly hash: string
  readonly prev_hash: string
}

/**
 * The columns of `events e` as text where JavaScript needs exactness. `recorded_at` is formatted in
 * SQL so that it reads back as exactly the string that was hashed. The output names shadow the
 * column names in ORDER BY, so every query orders by the qualified column (`e.stream_version`),
 * never by a bare name, which would sort the text.
 */
const eventColumns = `
  e.global_position::text as global_position, e.stream_id, e.stream_version::text as stream_version,
  e.event_id::text as event_id, e.event_type, e.schema_version, e.data, e.metadata,
  to_char(e.recorded_at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') as recorded_at,
  e.transaction_id::text as transaction_id, encode(e.hash, 'hex') as hash, encode(e.prev_hash, 'hex') as prev_hash`

// The store wrote every row itself from typed values, so the row's JSON has the port's shapes.
const toRecordedEvent = (row: EventRow): RecordedEvent => ({
  event_id: row.event_id,
  event_type: row.event_type,
  schema_version: row.schema_version,
  data: row.data,
  metadata: row.metadata,
  stream_id: row.stream_id,
  stream_version: toSafeInteger(row.stream_version, "stream_version"),
  global_position: BigInt(row.global_position),
  recorded_at: row.recorded_at,
  hash: row.hash,
  prev_hash: row.prev_hash,
})

// --- Append -----------------------------------------------------------------------------------

type AppendOutcome =
  | { readonly _tag: "Appended"; readonly result: AppendResult }
  | { readonly _tag: "WrongVersion"; readonly actual: number }

const uuidPattern = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i

const assertAppendArguments = (
  stream_id: string,
  expected: ExpectedVersion,
  events: ReadonlyArray<NewEvent>,
) => {
  assert(stream_id.length > 0, "stream_id must not be empty")
  assert(
    expected === "any" || expected === "no_stream" || (Number.isSafeInteger(expected) && expected >= 0),
    `expected version ${String(expected)} must be "any", "no_stream" or a version >= 0`,
  )
  assertCount(events.length, append_event_count_max, "events per append")
  for (const event of events) {
    assert(uuidPattern.test(event.event_id), `event_id ${event.event_id} is not a UUID`)
    assert(event.event_type.length > 0, "event_type must not be empty")
    assert(Number.isInteger(event.schema_version) && event.schema_version >= 1, "schema_version must be >= 1")
  }
}

const matchesExpected = (expected: ExpectedVersion, actual: number): boolean =>
  expected === "any" || (expected === "no_stream" ? actual === 0 : expected === actual)

/** An event ready to insert: recorded, hashed, its JSON in canonical text; no position yet. */
interface ChainedEvent {
  readonly event: Omit<RecordedEvent, "global_position">
  readonly data_json: string
  readonly metadata_json: string
}

/** Versions and hashes continue from the head; `recorded_at` is shared by the whole append. */
const chainEvents = (
  stream_id: string,
  head: { readonly version: number; readonly last_hash: string },
  events: ReadonlyArray<NewEvent>,
  recorded_at: string,
): ReadonlyArray<ChainedEvent> => {
  // The events of one command share their metadata object: its text is written once.
  let last_metadata: NewEvent["metadata"] | undefined
  let metadata = { json: "", exact: true }
  const canonical = events.map((input, index) => {
    const data = canonicalJsonExact(input.data)
    if (input.metadata !== last_metadata) {
      last_metadata = input.metadata
      metadata = canonicalJsonExact(input.metadata)
    }
    const fields = {
      stream_id,
      stream_version: head.version + index + 1,
      // PostgreSQL reads a uuid back in lowercase; the hash must cover what is read back.
      event_id: input.event_id.toLowerCase(),
      event_type: input.event_type,
      schema_version: input.schema_version,
      recorded_at,
    }
    return { input, fields, data, metadata, data_json: data.json, metadata_json: metadata.json }
  })
  const hashes = eventHashesCanonical(head.last_hash, canonical)
  return canonical.map(({ input, fields, data, metadata, data_json, metadata_json }, index) => {
    // The returned event equals what a read gives back: the caller's objects when their canonical
    // text gives them back exactly, else that text parsed (it drops keys whose value is undefined,
    // as the database does).
    const event = {
      ...fields,
      data: (data.exact ? input.data : JSON.parse(data_json)) as Record<string, unknown>,
      metadata: (metadata.exact ? input.metadata : JSON.parse(metadata_json)) as EventMetadata,
      hash: hashes[index] as string,
      prev_hash: index === 0 ? head.last_hash : (hashes[index - 1] as string),
    }
    return { event, data_json, metadata_json }
  })
}

/** Calls `event_store_append` (schema.ts): one statement, one round trip, on `client`. */
const appendFunctionSql = `
  select out_position::text as position, out_version::text as version, out_conflict as conflict
  from event_store_append($1, $2, decode($3, 'hex'), $4::timestamptz, $5::bigint[], $6::uuid[], $7::text[],
                          $8::integer[], $9::jsonb, $10::jsonb, $11::bytea[], $12::bytea[], $13)`

type Queryable = pg.Pool | pg.ClientBase

/** Where the stream ends: its version and last hash (version 0 and the genesis hash if empty). */
interface Head {
  readonly version: number
  readonly last_hash: string
}

const readHead = async (client: Queryable, stream_id: string): Promise<Head> => {
  const found = await client.query<{ version: string; last_hash: string }>(
    "select version::text as version, encode(last_hash, 'hex') as last_hash from streams where stream_id = $1",
    [stream_id],
  )
  const row = found.rows[0]
  return row === undefined
    ? { version: 0, last_hash: GENESIS_HASH }
    : { version: toSafeInteger(row.version, "stream version"), last_hash: row.last_hash }
}

type ChainedOutcome =
  | { readonly _tag: "Appended"; readonly positions: ReadonlyArray<bigint> }
  | { readonly _tag: "Conflict"; readonly actual: number }

const callAppend = async (
  client: Queryable,
  channel: string | null,
  stream_id: string,
  base: Head,
  recorded_at: string,
  chained: ReadonlyArray<ChainedEvent>,
): Promise<ChainedOutcome> => {
  // A named statement: parsed and planned once per connection, not once per append.
  const found = await client.query<{ position: string | null; version: string; conflict: boolean }>({
    name: "event_store_append",
    text: appendFunctionSql,
    values: [
      stream_id,
      base.version,
      base.last_hash,
      recorded_at,
      chained.map((c) => c.event.stream_version),
      chained.map((c) => c.event.event_id),
      chained.map((c) => c.event.event_type),
      chained.map((c) => c.event.schema_version),
      `[${chained.map((c) => c.data_json).join(",")}]`,
      `[${chained.map((c) => c.metadata_json).join(",")}]`,
      chained.map((c) => `\\x${c.event.hash}`),
      chained.map((c) => `\\x${c.event.prev_hash}`),
      channel,
    ],
  })
  const first = found.rows[0]
  assert(first !== undefined, "event_store_append returned no row")
  if (first.conflict) return { _tag: "Conflict", actual: toSafeInteger(first.version, "stream version") }
  const positions = found.rows.map((row) => BigInt(row.position ?? "0"))
  assert(positions.length === chained.length, "append returned a different number of rows")
  positions.forEach((position, index) => {
    const previous = positions[index - 1]
    assert(previous === undefined || previous < position, "positions do not increase with versions")
  })
  return { _tag: "Appended", positions }
}

/** Calls `event_store_append_streams` (schema.ts): every stream of a group commit in one statement. */
const appendStreamsSql = `
  select out_stream as stream, out_position::text as position, out_version::text as version,
         out_conflict as conflict
  from event_store_append_streams($1::text[], $2::bigint[], $3::bytea[], $4::timestamptz, $5::integer[],
                                  $6::bigint[], $7::uuid[], $8::text[], $9::integer[], $10::jsonb,
                                  $11::jsonb, $12::bytea[], $13::bytea[])`

type StreamOutcome =
  | { readonly _tag: "Appended"; readonly positions: ReadonlyArray<bigint> }
  | { readonly _tag: "Conflict"; readonly actual: number }

/**
 * Holds a pipelining client's writes until the returned release is called (once; later calls do
 * nothing). node-postgres sends each statement in a write of its own; on loopback every write is a
 * system call that also runs the database's receive path and wakes its backend, so the statements
 * of one group commit sent in between leave together, in one write. Release before awaiting an
 * answer: a statement still held is never sent.
 */
const holdWrites = (client: pg.PoolClient): (() => void) => {
  const stream = (client as unknown as { readonly connection?: { readonly stream?: Partial<Writable> } })
    .connection?.stream
  if (typeof stream?.cork !== "function" || typeof stream.uncork !== "function") return () => {}
  stream.cork()
  let held = true
  return () => {
    if (!held) return
    held = false
    stream.uncork?.()
  }
}

/**
 * A PostgreSQL array literal of text: every element quoted, its `\\` and `"` escaped (nothing else
 * is special inside quotes), so any string, the empty one and "NULL" included, reads back as itself.
 * @example textArrayLiteral(["a", 'b"c']) // '{"a","b\\"c"}'
 */
export const textArrayLiteral = (values: ReadonlyArray<string>): string => {
  let literal = "{"
  for (let index = 0; index < values.length; index++) {
    const value = values[index] as string
    const escaped = value.includes("\\") || value.includes('"') ? value.replace(/[\\"]/g, "\\$&") : value
    literal += index === 0 ? `"${escaped}"` : `,"${escaped}"`
  }
  return `${literal}}`
}

const hex_digits = /^[0-9a-f]*$/

/**
 * A PostgreSQL bytea[] literal of hex strings: elements `\x<hex>`, the backslash escaped for the
 * array syntax. The elements are checked together (one pattern over all of them, each of even
 * length): a group commit passes a few hundred hashes.
 * @example byteaArrayLiteral(["00ff"]) // '{"\\\\x00ff"}'
 */
export const byteaArrayLiteral = (hexes: ReadonlyArray<string>): string => {
  assert(
    hexes.every((hex) => hex.length % 2 === 0) && hex_digits.test(hexes.join("")),
    "bytea elements are lowercase hex",
  )
  // Hex digits need no escaping inside the quotes.
  return hexes.length === 0 ? "{}" : `{"\\\\x${hexes.join('","\\\\x')}"}`
}

/** One statement for every stream; `chained[i]` are the events of `streams[i]`, chained on `bases[i]`. */
const callAppendStreams = async (
  client: pg.ClientBase,
  streams: ReadonlyArray<string>,
  bases: ReadonlyArray<Head>,
  recorded_at: string,
  chained: ReadonlyArray<ReadonlyArray<ChainedEvent>>,
): Promise<ReadonlyArray<StreamOutcome>> => {
  const all = chained.flatMap((events, index) => events.map((c) => ({ c, stream: index + 1 })))
  const found = await client.query<{
    stream: number
    position: string | null
    version: string
    conflict: boolean
  }>({
    name: "event_store_append_streams",
    text: appendStreamsSql,
    // Array literals built here: node-postgres would escape every element with two regular
    // expressions, and a group commit sends a few hundred of them.
    values: [
      textArrayLiteral(streams),
      `{${bases.map((b) => b.version).join(",")}}`,
      byteaArrayLiteral(bases.map((b) => b.last_hash)),
      recorded_at,
      `{${all.map((a) => a.stream).join(",")}}`,
      `{${all.map((a) => a.c.event.stream_version).join(",")}}`,
      textArrayLiteral(all.map((a) => a.c.event.event_id)),
      textArrayLiteral(all.map((a) => a.c.event.event_type)),
      `{${all.map((a) => a.c.event.schema_version).join(",")}}`,
      `[${all.map((a) => a.c.data_json).join(",")}]`,
      `[${all.map((a) => a.c.metadata_json).join(",")}]`,
      byteaArrayLiteral(all.map((a) => a.c.event.hash)),
      byteaArrayLiteral(all.map((a) => a.c.event.prev_hash)),
    ],
  })
  const positions = streams.map((): Array<bigint> => [])
  const conflicts = new Map<number, number>()
  for (const row of found.rows) {
    const index = row.stream - 1
    assert(index >= 0 && index < streams.length, `append_streams returned stream ${row.stream}`)
    if (row.conflict) conflicts.set(index, toSafeInteger(row.version, "stream version"))
    else positions[index]?.push(BigInt(row.position ?? "0"))
  }
  return streams.map((_stream, index): StreamOutcome => {
    const actual = conflicts.get(index)
    if (actual !== undefined) return { _tag: "Conflict", actual }
    const own = positions[index] ?? []
    assert(own.length === chained[index]?.length, "append_streams returned a different number of rows")
    own.forEach((position, i) => {
      const previous = own[i - 1]
      assert(previous === undefined || previous < position, "positions do not increase with versions")
    })
    return { _tag: "Appended", positions: own }
  })
}

/** Another transaction committed this stream version first (only a writer bypassing the lock can). */
const isLostRace = (error: unknown): boolean =>
  error instanceof pg.DatabaseError &&
  error.code === "23505" &&
  error.constraint === "events_stream_version_unique"

/** The version as committed, from the events themselves (the head is not trusted after a lost race). */
const committedVersion = async (client: Queryable, stream_id: string): Promise<number> => {
  const found = await client.query<{ version: string }>(
    "select coalesce(max(stream_version), 0)::text as version from events where stream_id = $1",
    [stream_id],
  )
  return toSafeInteger(found.rows[0]?.version ?? "0", "stream version")
}

/** Re-reading the head after a stale guess or a race under "any" is bounded. */
const append_attempt_max = 8

/**
 * The non-empty append. The base head comes from `guess` (the store's cache of heads it wrote)
 * when it matches the expected version, else from a read; the database function rejects a base
 * that is no longer the head, and then we read the head and decide again. A `speculative` append
 * chains only on the guess (see `AppendOptions`): without it, or when the database rejects it, the
 * append fails.
 */
const appendRows = async (
  client: Queryable,
  channel: string | null,
  stream_id: string,
  expected: ExpectedVersion,
  events: ReadonlyArray<NewEvent>,
  guess: Head | undefined,
  onChained: (head: Head) => void = () => {},
  speculative = false,
): Promise<AppendOutcome & { readonly head?: Head }> => {
  let base: Head | undefined =
    expected === "no_stream"
      ? { version: 0, last_hash: GENESIS_HASH }
      : typeof expected === "number" && guess?.version === expected
        ? guess
        : undefined
  if (speculative && base === undefined)
    return { _tag: "WrongVersion", actual: (await readHead(client, stream_id)).version }
  for (let attempt = 1; attempt <= append_attempt_max; attempt++) {
    base ??= await readHead(client, stream_id)
    if (!matchesExpected(expected, base.version)) return { _tag: "WrongVersion", actual: base.version }
    const recorded_at = new Date().toISOString()
    const chained = chainEvents(stream_id, base, events, recorded_at)
    const chainedLast = chained.at(-1)
    if (chainedLast !== undefined)
      onChained({ version: chainedLast.event.stream_version, last_hash: chainedLast.event.hash })
    let outcome: ChainedOutcome
    try {
      outcome = await callAppend(client, channel, stream_id, base, recorded_at, chained)
    } catch (error) {
      if (isLostRace(error))
        return { _tag: "WrongVersion", actual: await committedVersion(client, stream_id) }
      throw error
    }
    if (outcome._tag === "Appended") {
      const last = chained.at(-1)
      assert(last !== undefined, "nothing was appended")
      const recorded = chained.map(
        (c, index): RecordedEvent => ({ ...c.event, global_position: outcome.positions[index] ?? 0n }),
      )
      return {
        _tag: "Appended",
        result: {
          next_expected_version: last.event.stream_version,
          last_position: outcome.positions.at(-1) ?? 0n,
          events: recorded,
        },
        head: { version: last.event.stream_version, last_hash: last.event.hash },
      }
    }
    // The head moved (or our guess of its hash was stale). With an exact expectation a different
    // version is final, and so is any mismatch of a speculative append (the events it was decided
    // on are not there); otherwise read the head and try again.
    if (speculative || (expected !== "any" && outcome.actual !== base.version))
      return { _tag: "WrongVersion", actual: outcome.actual }
    base = undefined
  }
  throw new Error(
    `event store: append to ${stream_id} kept racing other appenders (${append_attempt_max} attempts)`,
  )
}

/** An empty append writes nothing but still checks the expected version. */
const appendNothing = async (
  client: Queryable,
  stream_id: string,
  expected: ExpectedVersion,
): Promise<AppendOutcome> => {
  const found = await client.query<{ version: string; last_position: string | null }>(
    `select s.version::text as version, e.global_position::text as last_position
     from streams s left join events e on e.stream_id = s.stream_id and e.stream_version = s.version
     where s.stream_id = $1`,
    [stream_id],
  )
  const row = found.rows[0]
  const actual = row === undefined ? 0 : toSafeInteger(row.version, "stream version")
  if (!matchesExpected(expected, actual)) return { _tag: "WrongVersion", actual }
  const last_position = row?.last_position == null ? 0n : BigInt(row.last_position)
  return { _tag: "Appended", result: { next_expected_version: actual, last_position, events: [] } }
}

/**
 * Proves that `client` is inside an open READ COMMITTED transaction with no transaction id yet:
 * a transaction-local setting survives to the next statement only inside a transaction.
 */
const assertOpenTransaction = async (client: pg.ClientBase): Promise<void> => {
  const first = await client.query<{ own_xid: string | null; isolation: string }>(
    `select pg_current_xact_id_if_assigned()::text as own_xid, current_setting('transaction_isolation') as isolation,
            set_config('${append_marker_setting}', 'on', true)`,
  )
  const row = first.rows[0]
  assert(row?.own_xid === null, "appendWithClient must be the transaction's first write")
  assert(row.isolation === "read committed", `appends need READ COMMITTED, not ${row.isolation}`)
  const second = await client.query<{ marker: string | null }>(
    `select current_setting('${append_marker_setting}', true) as marker`,
  )
  assert(second.rows[0]?.marker === "on", "appendWithClient needs an open transaction (begin first)")
}

const toAppendEffect = (
  stream_id: string,
  expected: ExpectedVersion,
  run: () => Promise<AppendOutcome>,
): Effect.Effect<AppendResult, WrongExpectedVersion> =>
  Effect.promise(() => run()).pipe(
    Effect.flatMap((outcome) =>
      outcome._tag === "Appended"
        ? Effect.succeed(outcome.result)
        : Effect.fail(new WrongExpectedVersion({ stream_id, expected, actual: outcome.actual })),
    ),
  )

// --- Notifications ----------------------------------------------------------------------------

/**
 * Signals an append after its commit. NOTIFY inside the appending transaction would serialise all
 * commits of the database (see schema.ts), so the store's own appends are announced here instead:
 * one `pg_notify` per stream, sent by a small transaction without WAL, and coalesced while one is in
 * flight. Waiters of this store wake at once. A lost notification only delays subscribers until
 * their wait times out; it never makes them miss an event.
 */
const makeCommitNotifier = (pool: pg.Pool, channel: string, wakeLocal: () => void) => {
  let pending = new Set<string>()
  let sending = false
  const send = async () => {
    sending = true
    try {
      while (pending.size > 0) {
        const streams = [...pending]
        pending = new Set()
        await pool
          .query("select pg_notify($1, stream_id) from unnest($2::text[]) as s(stream_id)", [
            channel,
            streams,
          ])
          .catch(() => {})
        // Under load, one notification per interval carries every stream appended meanwhile.
        await new Promise((resolve) => setTimeout(resolve, notify_interval_ms))
      }
    } finally {
      sending = false
    }
  }
  return {
    appended: (stream_id: string) => {
      wakeLocal()
      pending.add(stream_id)
      if (!sending) void send()
    },
  }
}

/** One LISTEN connection per store, opened on the first wait, shared by every waiter. */
const makeNotificationListener = (pool: pg.Pool, channel: string) => {
  const waiters = new Set<() => void>()
  let client: pg.Client | undefined
  let opening: Promise<void> | undefined
  let closed = false

  const wakeAll = () => {
    for (const wake of [...waiters]) wake()
  }
  // A lost connection wakes every waiter (a spurious wake-up is harmless: they read and wait
  // again); the next wait opens a new connection.
  const forget = (lost: pg.Client) => {
    if (client === lost) client = undefined
    wakeAll()
  }
  const open = async () => {
    const next = new pg.Client(pool.options)
    next.on("notification", wakeAll)
    next.on("error", () => {
      forget(next)
      next.end().catch(() => {})
    })
    next.on("end", () => forget(next))
    try {
      await next.connect()
      await next.query(`listen ${next.escapeIdentifier(channel)}`)
      assert(!closed, "the store was closed while its LISTEN connection opened")
    } catch (error) {
      await next.end().catch(() => {})
      throw error
    }
    client = next
  }
  const ensureListening = (): Promise<void> => {
    if (closed) return Promise.reject(new Error("event store: waitForEvents after close"))
    if (client !== undefined) return Promise.resolve()
    opening ??= open().finally(() => {
      opening = undefined
    })
    return opening
  }
  const waitUntilWoken = (timeout_ms: number) =>
    Effect.callback<void>((resume) => {
      let done = false
      const wake = () => {
        if (done) return
        done = true
        clearTimeout(timer)
        waiters.delete(wake)
        resume(Effect.void)
      }
      const timer = setTimeout(wake, timeout_ms)
      waiters.add(wake)
      return Effect.sync(() => {
        done = true
        clearTimeout(timer)
        waiters.delete(wake)
      })
    })
  return {
    wakeLocal: wakeAll,
    wait: (timeout_ms: number): Effect.Effect<void> =>
      Effect.suspend(() => {
        assertCount(timeout_ms, wait_timeout_ms_max, "timeout_ms")
        return Effect.promise(() => ensureListening()).pipe(Effect.andThen(waitUntilWoken(timeout_ms)))
      }),
    close: async (): Promise<void> => {
      closed = true
      await opening?.catch(() => {})
      const current = client
      client = undefined
      wakeAll()
      await current?.end()
    },
  }
}

// --- Reads ------------------------------------------------------------------------------------

const readStreamRows = (pool: pg.Pool, stream_id: string, options: ReadStreamOptions) => {
  assertCount(options.from_version, Number.MAX_SAFE_INTEGER, "from_version")
  assertCount(options.max_count, Number.MAX_SAFE_INTEGER, "max_count")
  const backwards = options.direction === "backwards"
  return pool.query<EventRow>(
    `select ${eventColumns} from events e
     where e.stream_id = $1 and e.stream_version ${backwards ? "<=" : ">="} $2
     order by e.stream_version ${backwards ? "desc" : "asc"}
     limit $3`,
    [stream_id, options.from_version ?? (backwards ? Number.MAX_SAFE_INTEGER : 1), options.max_count ?? null],
  )
}

/**
 * Rows after the cursor whose transaction is older than every transaction still running that may
 * append (`event_store_visible_before`: the snapshot's oldest running transaction, passing over
 * those declared in `event_store_quiet_transactions`, as a projection rebuild's index builds are;
 * see schema.ts, version 106), in commit-safe order. A running transaction
 * holds back everything after it.
 */
const subscriptionBatchSql = `
  select ${eventColumns} from events e
  where (e.transaction_id, e.global_position) > ($1::xid8, $2::bigint)
    and e.transaction_id < (select event_store_visible_before())
  order by e.transaction_id, e.global_position
  limit $3`

const readSubscriptionRows = async (pool: pg.Pool, checkpoint: Checkpoint, max_count: number) => {
  assert(max_count >= 1, "max_count must be at least 1")
  assertCount(max_count, subscription_batch_count_max, "max_count")
  const found = await pool.query<EventRow>(subscriptionBatchSql, [
    checkpoint.transaction_id,
    checkpoint.global_position.toString(),
    max_count,
  ])
  const last = found.rows.at(-1)
  const next: Checkpoint =
    last === undefined
      ? checkpoint
      : { transaction_id: last.transaction_id, global_position: BigInt(last.global_position) }
  return { events: found.rows.map(toRecordedEvent), checkpoint: next }
}

// --- The store --------------------------------------------------------------------------------

/**
 * The PostgreSQL event store on a pool whose database has `eventStoreMigrations` applied.
 *
 * @example
 * const store = makePostgresEventStore(pool)
 * const result = await Effect.runPromise(store.append("ledger-t1-sandbox", "no_stream", [opened]))
 * await Effect.runPromise(store.close)
 */
export const makePostgresEventStore = (
  pool: pg.Pool,
  options: PostgresEventStoreOptions = {},
): PostgresEventStore => {
  const channel = options.notifyChannel ?? defaultNotifyChannel
  const channelBytes = Buffer.byteLength(channel)
  assert(channelBytes > 0 && channelBytes <= channel_name_bytes_max, `notify channel must be 1..63 bytes`)
  const listener = makeNotificationListener(pool, channel)
  // Opened on the first group commit; idle connections never keep the process alive.
  let transactionPool: pg.Pool | undefined
  const transactionClient = (): Promise<pg.PoolClient> => {
    if (transactionPool === undefined) {
      transactionPool = new pg.Pool({
        ...pool.options,
        max: options.transactionConnections ?? 4,
        pipeline: true,
        allowExitOnIdle: true,
      } as pg.PoolConfig)
      // A client that loses its connection emits 'error', idle or checked out (the pool listens only
      // to idle ones; without a listener Node would crash): its transaction fails, the next connect
      // opens a new one.
      transactionPool.on("error", () => {})
      transactionPool.on("connect", (client) => {
        client.on("error", () => {})
      })
    }
    return transactionPool.connect()
  }
  const notifier = makeCommitNotifier(pool, channel, listener.wakeLocal)
  // The heads this store appended last, so that the next append to a stream needs no read first.
  const heads = new Map<string, Head>()
  const rememberHead = (stream_id: string, head: Head) => {
    if (heads.size >= head_cache_streams_max && !heads.has(stream_id)) heads.clear()
    heads.set(stream_id, head)
  }
  /** After a commit: a later append may already be chained on top (pipelining), never move back. */
  const advanceHead = (stream_id: string, head: Head) => {
    if ((heads.get(stream_id)?.version ?? 0) < head.version) rememberHead(stream_id, head)
    notifier.appended(stream_id)
  }

  const appendWith = (
    client: pg.PoolClient | pg.Client | undefined,
    stream_id: string,
    expected: ExpectedVersion,
    events: ReadonlyArray<NewEvent>,
    options: AppendOptions = {},
  ) =>
    toAppendEffect(stream_id, expected, async () => {
      assertAppendArguments(stream_id, expected, events)
      if (events.length === 0) return appendNothing(client ?? pool, stream_id, expected)
      if (client !== undefined) {
        // The caller may still roll back: its heads never go into the cache.
        await assertOpenTransaction(client)
        return appendRows(client, channel, stream_id, expected, events, undefined)
      }
      // Our own append is one autocommitted statement: the function's transaction.
      // The head is remembered as soon as the events are chained, before their commit: a pipelining
      // writer appends its next batch on top while this one commits. If this one fails, the next
      // one's base no longer matches the head and the database rejects it.
      const outcome = await appendRows(
        pool,
        null,
        stream_id,
        expected,
        events,
        heads.get(stream_id),
        (head) => rememberHead(stream_id, head),
        options.speculative === true,
      )
      if (outcome.head !== undefined) advanceHead(stream_id, outcome.head)
      else heads.delete(stream_id)
      return outcome
    })

  /** One transaction of a group commit; conflicted streams come back for the caller to retry without. */
  const groupCommitOnce = async (
    appends: ReadonlyArray<StreamAppend>,
    included: ReadonlyArray<number>,
    work: GroupCommitWork,
    results: Array<Result.Result<AppendResult, WrongExpectedVersion> | undefined>,
    wrong: (index: number, actual: number) => Result.Result<AppendResult, WrongExpectedVersion>,
  ): Promise<{ readonly retry: ReadonlyArray<number> }> => {
    const client = await transactionClient()
    /** The base each stream of this transaction was chained on, by its index in `appends`. */
    const chainedOn = new Map<number, Head>()
    const rememberBase = (index: number) => {
      const base = chainedOn.get(index)
      const { stream_id } = appends[index] as StreamAppend
      if (base === undefined) heads.delete(stream_id)
      else rememberHead(stream_id, base)
    }
    // BEGIN, the append and the work's statements leave in one write (see holdWrites).
    const releaseWrites = holdWrites(client)
    let open = false
    // Set once the outcome is no longer certain to be "nothing written".
    let uncertain = false
    let healthy = true
    try {
      // Pipelined: BEGIN, the append and the statements of `work` go out together; the work sees
      // the events as chained (versions and hashes, no positions yet), and COMMIT waits for all.
      const begun = client.query("begin")
      begun.catch(() => {})
      open = true
      // Bases: the cached head when it is the expected version, else a read (reads assign no
      // transaction id, so the append is still the transaction's first write).
      const streams: Array<number> = []
      const bases: Array<Head> = []
      for (const index of included) {
        const { stream_id, expected, speculative } = appends[index] as StreamAppend
        const version = expected === "no_stream" ? 0 : expected
        const guess =
          expected === "no_stream" ? { version: 0, last_hash: GENESIS_HASH } : heads.get(stream_id)
        let base = guess
        let chainable = true
        if (base?.version !== version) {
          releaseWrites()
          base = await readHead(client, stream_id)
          // A speculative append chains only on the head its predecessor chained (AppendOptions).
          chainable = speculative !== true
        }
        if (base.version !== version || !chainable) results[index] = wrong(index, base.version)
        else {
          streams.push(index)
          bases.push(base)
        }
      }
      if (streams.length === 0) return { retry: [] }
      streams.forEach((index, i) => {
        chainedOn.set(index, bases[i] as Head)
      })
      const recorded_at = new Date().toISOString()
      const chained = streams.map((index, i) => {
        const { stream_id, events } = appends[index] as StreamAppend
        const own = chainEvents(stream_id, bases[i] as Head, events, recorded_at)
        const last = own.at(-1)
        // Remembered before the commit: a pipelining writer chains its next batch on top.
        if (last !== undefined)
          rememberHead(stream_id, { version: last.event.stream_version, last_hash: last.event.hash })
        return own
      })
      const appending = callAppendStreams(
        client,
        streams.map((index) => (appends[index] as StreamAppend).stream_id),
        bases,
        recorded_at,
        chained,
      )
      appending.catch(() => {})
      const speculative: Array<ChainedAppend | undefined> = appends.map(() => undefined)
      streams.forEach((index, i) => {
        const own = chained[i] ?? []
        speculative[index] = {
          next_expected_version: own.at(-1)?.event.stream_version ?? 0,
          events: own.map((c) => c.event),
        }
      })
      const run = work(client, speculative)
      const sent_all = isSentWork(run)
      const working = (sent_all ? run.done : run).then(
        () => ({ failed: false as const }),
        (error: unknown) => ({ failed: true as const, error }),
      )
      // A work that sent everything is followed at once by the guard and COMMIT: one round trip
      // for the whole transaction, and its stream locks are released without waiting for us.
      let guarded: Promise<unknown> | undefined
      let committing: Promise<pg.QueryResult> | undefined
      if (sent_all) {
        // Every stream of the transaction has events (asserted above).
        const heads_after = chained.map((own) => (own.at(-1) as ChainedEvent).event)
        guarded = client.query({
          name: "event_store_require_heads",
          text: "select event_store_require_heads($1::text[], $2::bigint[], $3::bytea[])",
          values: [
            textArrayLiteral(streams.map((index) => (appends[index] as StreamAppend).stream_id)),
            `{${heads_after.map((event) => event.stream_version).join(",")}}`,
            byteaArrayLiteral(heads_after.map((event) => event.hash)),
          ],
        })
        guarded.catch(() => {})
        committing = client.query("commit")
        committing.catch(() => {})
      }
      // What the work sent without waiting goes with BEGIN and the append; nothing is awaited before.
      releaseWrites()
      // Had BEGIN failed, the append would have run (and perhaps committed) on its own.
      await begun.catch((error: unknown) => {
        uncertain = true
        throw error
      })
      /** The streams' results from the append's answer; true when a stream conflicted. */
      const record = (outcomes: ReadonlyArray<StreamOutcome>): boolean => {
        let conflicted = false
        outcomes.forEach((outcome, i) => {
          const index = streams[i] as number
          if (outcome._tag === "Conflict") {
            conflicted = true
            results[index] = wrong(index, outcome.actual)
            return
          }
          const events = (chained[i] ?? []).map(
            (c, n): RecordedEvent => ({ ...c.event, global_position: outcome.positions[n] ?? 0n }),
          )
          const last = events.at(-1) as RecordedEvent
          results[index] = Result.succeed({
            next_expected_version: last.stream_version,
            last_position: last.global_position,
            events,
          })
        })
        return conflicted
      }
      /** After a conflict, rolled back: the streams that were appended go again, without the others. */
      const retryAppended = () => {
        const retry = streams.filter((index) => {
          const result = results[index]
          return result !== undefined && Result.isSuccess(result)
        })
        // Rolled back: each stream's head is the base it was chained on again, so the retry (a
        // speculative one too) chains there; the database still checks it.
        for (const index of retry) {
          results[index] = undefined
          rememberBase(index)
        }
        return { retry }
      }
      /** A writer bypassing the locks won a race: the transaction is aborted, nothing is ours. */
      const lostRace = async () => {
        for (const index of streams) {
          const stream_id = (appends[index] as StreamAppend).stream_id
          results[index] = wrong(index, await committedVersion(pool, stream_id))
        }
        return { retry: [] }
      }
      /** The streams' heads move to what was committed. */
      const advanceHeads = () => {
        for (const index of streams) {
          const result = results[index]
          if (result === undefined || Result.isFailure(result)) continue
          const last = result.success.events.at(-1) as RecordedEvent
          advanceHead((appends[index] as StreamAppend).stream_id, {
            version: last.stream_version,
            last_hash: last.hash,
          })
        }
      }
      if (committing !== undefined) {
        // COMMIT is on its way: until it answers, the outcome is not known. Statements answer in
        // order, so when it has answered, so has everything sent before it.
        uncertain = true
        const committed = await committing
        open = false
        const appended = await appending.then(
          (outcomes) => ({ outcomes }),
          (error: unknown) => ({ error }),
        )
        const worked = await working
        if (committed.command === "COMMIT") {
          // Committed, so no statement failed: the append met every expected head (the guard).
          if ("error" in appended) throw appended.error
          if (record(appended.outcomes)) throw new Error("event store: a conflicted append was committed")
          advanceHeads()
          // The work's own code failed after its statements had all succeeded: they are committed.
          if (worked.failed) throw worked.error
          return { retry: [] }
        }
        // COMMIT of a transaction that a statement aborted answers ROLLBACK: nothing was written.
        uncertain = false
        if ("error" in appended) {
          if (isLostRace(appended.error)) return await lostRace()
          throw appended.error
        }
        if (record(appended.outcomes)) return retryAppended()
        if (worked.failed) throw worked.error
        await guarded
        throw new Error(`event store: COMMIT answered ${committed.command}`)
      }
      let outcomes: ReadonlyArray<StreamOutcome>
      try {
        outcomes = await appending
      } catch (error) {
        await working
        if (!isLostRace(error)) throw error
        await client.query("rollback")
        open = false
        return await lostRace()
      }
      const worked = await working
      if (worked.failed) throw worked.error
      if (record(outcomes)) {
        // The work was done for streams that did not all get their events: undo it all and let
        // the caller go again with the streams that were appended.
        await client.query("rollback")
        open = false
        return retryAppended()
      }
      uncertain = true
      const committed = await client.query("commit")
      open = false
      // COMMIT of a transaction that a statement aborted answers ROLLBACK instead of failing.
      if (committed.command !== "COMMIT") {
        uncertain = false
        throw new Error(`event store: COMMIT answered ${committed.command}: a statement of the work failed`)
      }
      advanceHeads()
      return { retry: [] }
    } catch (error) {
      // Known rolled back: the chained streams' heads are their bases again (see retryAppended);
      // otherwise nothing is known.
      for (const index of included) {
        if (!uncertain && chainedOn.has(index)) rememberBase(index)
        else heads.delete((appends[index] as StreamAppend).stream_id)
      }
      throw uncertain ? error : new NotCommitted(error)
    } finally {
      releaseWrites()
      if (open) await client.query("rollback").catch(() => (healthy = false))
      client.release(healthy ? undefined : true)
    }
  }

  const appendStreamsInTransaction = (
    appends: ReadonlyArray<StreamAppend>,
    work: GroupCommitWork,
  ): Effect.Effect<ReadonlyArray<Result.Result<AppendResult, WrongExpectedVersion>>> =>
    Effect.promise(async () => {
      assert(appends.length > 0, "appendStreamsInTransaction needs at least one stream")
      const seen = new Set<string>()
      for (const { stream_id, expected, events } of appends) {
        assertAppendArguments(stream_id, expected, events)
        assert(events.length > 0, `the append to ${stream_id} has no events`)
        assert(!seen.has(stream_id), `stream ${stream_id} appears twice in one transaction`)
        seen.add(stream_id)
      }
      const total = appends.reduce((sum, a) => sum + a.events.length, 0)
      assertCount(total, append_event_count_max, "events per transaction")
      const wrong = (index: number, actual: number) => {
        const { stream_id, expected } = appends[index] as StreamAppend
        heads.delete(stream_id)
        return Result.fail(new WrongExpectedVersion({ stream_id, expected, actual }))
      }
      const results: Array<Result.Result<AppendResult, WrongExpectedVersion> | undefined> = appends.map(
        () => undefined,
      )
      // Each round drops at least one conflicted stream, so this ends.
      let included: ReadonlyArray<number> = appends.map((_append, index) => index)
      while (included.length > 0) {
        included = (await groupCommitOnce(appends, included, work, results, wrong)).retry
      }
      return results.map((result, index) => {
        assert(result !== undefined, `no outcome for ${(appends[index] as StreamAppend).stream_id}`)
        return result
      })
    })

  return {
    append: (stream_id, expected, events, options) =>
      appendWith(undefined, stream_id, expected, events, options).pipe(Effect.withSpan("EventStore.append")),
    appendStreamsInTransaction,
    appendWithClient: (client, stream_id, expected, events) =>
      appendWith(client, stream_id, expected, events).pipe(Effect.withSpan("EventStore.appendWithClient")),
    readStream: (stream_id, readOptions = {}) =>
      Effect.promise(async () =>
        (await readStreamRows(pool, stream_id, readOptions)).rows.map(toRecordedEvent),
      ),
    streamVersion: (stream_id) =>
      Effect.promise(async () => {
        const found = await pool.query<{ version: string }>(
          "select version::text as version from streams where stream_id = $1",
          [stream_id],
        )
        const row = found.rows[0]
        return row === undefined ? 0 : toSafeInteger(row.version, "stream version")
      }),
    readAll: (readOptions: ReadAllOptions = {}) =>
      Effect.promise(async () => {
        assertCount(readOptions.max_count, Number.MAX_SAFE_INTEGER, "max_count")
        const found = await pool.query<EventRow>(
          `select ${eventColumns} from events e
            where e.global_position > $1 and ($3::bigint is null or e.global_position <= $3)
            order by e.global_position limit $2`,
          [
            (readOptions.after_position ?? 0n).toString(),
            readOptions.max_count ?? null,
            readOptions.up_to_position?.toString() ?? null,
          ],
        )
        return found.rows.map(toRecordedEvent)
      }),
    readSubscriptionBatch: (checkpoint, max_count): Effect.Effect<SubscriptionBatch> =>
      Effect.promise(() => readSubscriptionRows(pool, checkpoint, max_count)),
    waitForEvents: (timeout_ms) => listener.wait(timeout_ms),
    close: Effect.promise(async () => {
      await listener.close()
      await transactionPool?.end()
    }),
  }
}

/**
 * The event store on the platform's pool; its LISTEN connection closes with the layer's scope.
 *
 * @example
 * const live = PostgresEventStoreLive.pipe(Layer.provide(Layer.succeed(Database, { pool })))
 * await Effect.runPromise(program.pipe(Effect.provide(live)))
 */
export const PostgresEventStoreLive: Layer.Layer<EventStore, never, Database> = Layer.effect(
  EventStore,
  Effect.gen(function* () {
    const { pool } = yield* Database
    return yield* Effect.acquireRelease(
      Effect.sync(() => makePostgresEventStore(pool)),
      (store) => store.close,
    )
  }),
)
