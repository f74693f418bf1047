// Runs the event-store contract against the PostgreSQL adapter, then proves what only PostgreSQL
// shows: migrations are safe to repeat and to race, a running transaction stalls subscribers
// instead of making them skip, the events table is append-only and tampering breaks the chain,
// misuse of appendWithClient is caught, and the layer closes its LISTEN connection.
import type { Writable } from "node:stream"
import { Cause, Effect, Exit, Layer, Result } from "effect"
import pg from "pg"
import { describe, expect, it } from "vitest"
import { eventHash } from "../../adapters/eventstore/hash.ts"
import {
  byteaArrayLiteral,
  makePostgresEventStore,
  type PostgresEventStore,
  PostgresEventStoreLive,
  textArrayLiteral,
} from "../../adapters/eventstore/postgres/event-store.ts"
import { eventStoreMigrations } from "../../adapters/eventstore/postgres/schema.ts"
import { runMigrations } from "../../src/db/migrate.ts"
import { composeHooks, sentAll, type TransactionHook } from "../../src/ledger/writer.ts"
import { Database } from "../../src/ports/database.ts"
import {
  type Checkpoint,
  checkpointStart,
  EventStore,
  type GroupCommitWork,
  isSentWork,
  type NewEvent,
  NotCommitted,
  sentNothing,
  WrongExpectedVersion,
} from "../../src/ports/event-store.ts"
import { postgresReader } from "../../src/projections/postgres-reader.ts"
import { freshDatabase, type TestDatabase } from "../support/db.ts"
import {
  type EventStoreHarness,
  eventStoreContract,
  failureOf,
  type HeldAppend,
  newEvent,
  newEvents,
  run,
  sleep,
} from "./event-store-contract.ts"

/**
 * A fresh database for one test. `drop()` ends the pool, which resolves before its idle connections
 * have closed, then terminates what is left (`drop database ... with (force)`); a connection
 * terminated that way reports an error on the pool, which is expected here, not a failure.
 */
const testDatabase = async (options: { readonly migrate?: boolean } = {}): Promise<TestDatabase> => {
  const db = await freshDatabase(options)
  db.pool.on("error", () => {})
  return db
}

/** A second pool on the same database, as another process would have. */
const otherPool = (db: TestDatabase, max: number, options?: string): pg.Pool => {
  const pool = new pg.Pool({ connectionString: db.url, max, ...(options === undefined ? {} : { options }) })
  pool.on("error", () => {})
  return pool
}

/** Appends in a transaction of its own that commits only after `hold` resolves. */
const appendHeldOpen = async (
  db: TestDatabase,
  store: PostgresEventStore,
  stream_id: string,
  events: ReadonlyArray<NewEvent>,
  hold: Promise<void>,
): Promise<HeldAppend> => {
  const client = await db.pool.connect()
  try {
    await client.query("begin")
    const appended = await run(store.appendWithClient(client, stream_id, "any", events))
    const committed = hold
      .then(() => client.query("commit"))
      .then(() => undefined)
      .finally(() => client.release())
    return { appended, committed }
  } catch (error) {
    await client.query("rollback")
    client.release()
    throw error
  }
}

const harness: EventStoreHarness = {
  create: async () => {
    const db = await testDatabase()
    const stores: PostgresEventStore[] = []
    const pools: pg.Pool[] = []
    const store = makePostgresEventStore(db.pool)
    stores.push(store)
    return {
      store,
      reopen: async () => {
        // A restarted process has its own pool and its own store.
        const pool = otherPool(db, 4)
        pools.push(pool)
        const reopened = makePostgresEventStore(pool)
        stores.push(reopened)
        return reopened
      },
      appendHeldOpen: (stream_id, events, hold) => appendHeldOpen(db, store, stream_id, events, hold),
      dispose: async () => {
        for (const each of stores) await run(each.close)
        for (const pool of pools) await pool.end()
        await db.drop()
      },
    }
  },
}

eventStoreContract("PostgreSQL", harness)

/** Runs a test body on a fresh database and store, and always cleans up. */
const withStore = async (
  body: (db: TestDatabase, store: PostgresEventStore) => Promise<void>,
): Promise<void> => {
  const db = await testDatabase()
  const store = makePostgresEventStore(db.pool)
  try {
    await body(db, store)
  } finally {
    await run(store.close)
    await db.drop()
  }
}

const expectDefect = async <A, E>(effect: Effect.Effect<A, E>, message: RegExp): Promise<void> => {
  const exit = await Effect.runPromiseExit(effect)
  expect(Exit.isFailure(exit) && Cause.hasDies(exit.cause)).toBe(true)
  if (Exit.isFailure(exit)) expect(String(Cause.squash(exit.cause))).toMatch(message)
}

/**
 * Appends `requests` in a transaction of their own (with `work`, by default none) and expects the
 * first stream's append to succeed: after a failed transaction, the store's cached heads are right
 * for what comes next.
 */
const expectAppendGoesOn = async (
  store: PostgresEventStore,
  requests: Parameters<PostgresEventStore["appendStreamsInTransaction"]>[0],
  work: Parameters<PostgresEventStore["appendStreamsInTransaction"]>[1] = () => sentNothing,
): Promise<void> => {
  const [first] = await run(store.appendStreamsInTransaction(requests, work))
  expect(first !== undefined && Result.isSuccess(first)).toBe(true)
}

/** Calls `onWrite` for every write from here on to `client`'s socket (a Writable's write hooks). */
const countWrites = (client: pg.ClientBase, onWrite: () => void): void => {
  const socket = (client as unknown as { connection: { stream: Writable } }).connection.stream
  for (const hook of ["_write", "_writev"] as const) {
    const original = socket[hook]
    if (original === undefined) continue
    socket[hook] = function (this: Writable, ...args: Array<never>) {
      onWrite()
      return (original as (...a: Array<never>) => void).apply(this, args)
    }
  }
}

/**
 * Appends two events to a stream "w" holding one, in a group commit whose work inserts 1 and 2 into
 * a new table `work_rows` and answers as `answer` makes it of those inserts. Checks that the append
 * and the rows committed; returns the writes to the transaction's connection from the work on.
 */
const groupCommitWrites = async (
  db: TestDatabase,
  store: PostgresEventStore,
  answer: (inserts: ReadonlyArray<Promise<unknown>>) => ReturnType<GroupCommitWork>,
): Promise<number> => {
  await db.pool.query("create table work_rows (n integer not null)")
  await run(store.append("w", "no_stream", newEvents("w", 1)))
  let writes = 0
  const results = await run(
    store.appendStreamsInTransaction(
      [{ stream_id: "w", expected: 1, events: newEvents("w", 2) }],
      (client) => {
        // Count from here the writes of this transaction's connection.
        countWrites(client, () => (writes += 1))
        return answer([
          client.query("insert into work_rows values (1)"),
          client.query("insert into work_rows values (2)"),
        ])
      },
    ),
  )
  expect(results.every((r) => r !== undefined && Result.isSuccess(r))).toBe(true)
  const rows = await db.pool.query<{ n: number }>("select n from work_rows order by n")
  expect(rows.rows.map((r) => r.n)).toEqual([1, 2])
  return writes
}

describe("event store on PostgreSQL", () => {
  it("applies its migrations exactly once, when run twice and from two pools at once", async () => {
    const db = await testDatabase({ migrate: false })
    const other = otherPool(db, 2)
    try {
      const [a, b] = await Promise.all([
        runMigrations(db.pool, eventStoreMigrations),
        runMigrations(other, eventStoreMigrations),
      ])
      expect([...a, ...b].sort()).toEqual(eventStoreMigrations.map((m) => m.version).sort())
      expect(await runMigrations(db.pool, eventStoreMigrations)).toEqual([])
      const store = makePostgresEventStore(db.pool)
      expect(
        (await run(store.append("migrated", "no_stream", newEvents("m", 1)))).next_expected_version,
      ).toBe(1)
      await run(store.close)
    } finally {
      await other.end()
      await db.drop()
    }
  })

  it("a running transaction stalls the subscriber; committing it releases everything, nothing skipped", () =>
    withStore(async (db, store) => {
      await run(store.append("before", "no_stream", newEvents("before", 1)))
      const blocker = await db.pool.connect()
      try {
        await blocker.query("begin")
        await blocker.query("select pg_current_xact_id()")
        await run(store.append("after", "no_stream", newEvents("after", 2)))
        const first = await run(store.readSubscriptionBatch(checkpointStart, 100))
        expect(first.events.map((e) => e.stream_id)).toEqual(["before"])
        expect(await run(store.readSubscriptionBatch(first.checkpoint, 100))).toEqual({
          events: [],
          checkpoint: first.checkpoint,
        })
        await blocker.query("commit")
      } finally {
        blocker.release()
      }
      const rest = await run(store.readSubscriptionBatch(checkpointStart, 100))
      expect(rest.events.map((e) => `${e.stream_id}@${e.stream_version}`)).toEqual([
        "before@1",
        "after@1",
        "after@2",
      ])
    }))

  it("a transaction declared quiet (it never appends) holds no subscriber back, while an older undeclared one still does", () =>
    withStore(async (db, store) => {
      const bulk = postgresReader(db.pool, [])
      const streamsOf = async (
        read: (c: Checkpoint) => Promise<{ events: ReadonlyArray<{ stream_id: string }> }>,
      ) => (await read(checkpointStart)).events.map((e) => e.stream_id)
      const both = async () => [
        await streamsOf((c) => run(store.readSubscriptionBatch(c, 100))),
        await streamsOf((c) => bulk(c, 100)),
      ]
      const quiet = await db.pool.connect()
      const older = await db.pool.connect()
      try {
        // A long transaction with an id (a CREATE INDEX has one from its start), declared quiet.
        await quiet.query("begin")
        const own = await quiet.query<{ xid: string }>("select pg_current_xact_id()::text as xid")
        await db.pool.query("insert into event_store_quiet_transactions (transaction_id) values ($1::xid8)", [
          own.rows[0]?.xid,
        ])
        await run(store.append("during", "no_stream", newEvents("during", 1)))
        expect(await both()).toEqual([["during"], ["during"]])
        // It cannot append: an append must be its transaction's first write.
        const appended = await Effect.runPromiseExit(
          store.appendWithClient(quiet, "from-quiet", "no_stream", newEvents("from-quiet", 1)),
        )
        expect(Exit.isFailure(appended)).toBe(true)
        // An undeclared transaction still holds back what commits after it.
        await older.query("begin")
        await older.query("select pg_current_xact_id()")
        await run(store.append("held", "no_stream", newEvents("held", 1)))
        expect(await both()).toEqual([["during"], ["during"]])
        await older.query("commit")
        expect(await both()).toEqual([
          ["during", "held"],
          ["during", "held"],
        ])
      } finally {
        await quiet.query("rollback").catch(() => {})
        await older.query("rollback").catch(() => {})
        quiet.release()
        older.release()
      }
    }))

  it.each([false, true])(
    "a group commit rolled back for another stream's conflict retries the rest on their bases (speculative %s)",
    (speculative) =>
      withStore(async (db, store) => {
        const other = makePostgresEventStore(db.pool)
        try {
          // A's previous batch, committed by this store (its head cached); B written by another process.
          const first = await run(
            store.appendStreamsInTransaction(
              [{ stream_id: "a", expected: "no_stream", events: newEvents("a", 1) }],
              () => sentNothing,
            ),
          )
          expect(first.every(Result.isSuccess)).toBe(true)
          await run(other.append("b", "no_stream", newEvents("b", 1)))
          // A's next batch (speculative when it was decided while the first was in flight) shares a
          // transaction with B's stale one, which rolls the transaction back.
          const results = await run(
            store.appendStreamsInTransaction(
              [
                { stream_id: "b", expected: "no_stream", events: newEvents("b2", 1) },
                { stream_id: "a", expected: 1, events: newEvents("a2", 1), speculative },
              ],
              () => sentNothing,
            ),
          )
          expect(Result.isFailure(results[0] as Result.Result<unknown, unknown>)).toBe(true)
          expect(Result.isSuccess(results[1] as Result.Result<unknown, unknown>)).toBe(true)
        } finally {
          await run(other.close)
        }
      }),
  )

  it("an uncommitted append holds back later commits, then is delivered before them", () =>
    withStore(async (db, store) => {
      let release = () => {}
      const held = await appendHeldOpen(
        db,
        store,
        "late",
        newEvents("late", 1),
        new Promise((r) => (release = r)),
      )
      try {
        await run(store.append("early", "no_stream", newEvents("early", 1)))
        expect((await run(store.readSubscriptionBatch(checkpointStart, 100))).events).toEqual([])
      } finally {
        release()
        await held.committed
      }
      const batch = await run(store.readSubscriptionBatch(checkpointStart, 100))
      expect(batch.events.map((e) => e.stream_id)).toEqual(["late", "early"])
    }))

  it("rejects UPDATE, DELETE and TRUNCATE of events; a tampered event no longer matches its hash", () =>
    withStore(async (db, store) => {
      await run(store.append("audited", "no_stream", newEvents("audited", 3)))
      for (const statement of [
        "update events set data = '{}'::jsonb",
        "delete from events",
        "truncate events",
      ]) {
        await expect(db.pool.query(statement)).rejects.toThrow(/append-only/)
      }
      // What an attacker with owner rights could do; the chain must show it.
      await db.pool.query("alter table events disable trigger events_append_only")
      await db.pool.query(
        `update events set data = jsonb_set(data, '{label}', '"forged"') where stream_id = 'audited' and stream_version = 2`,
      )
      await db.pool.query("alter table events enable trigger events_append_only")
      const read = await run(store.readStream("audited"))
      const verified = read.map((event) => eventHash(event.prev_hash, event) === event.hash)
      expect(verified).toEqual([true, false, true])
    }))

  it("a writer that bypassed the stream lock makes the append fail with WrongExpectedVersion", () =>
    withStore(async (db, store) => {
      const rogue = await db.pool.connect()
      try {
        await rogue.query("begin")
        await rogue.query(
          `insert into events (stream_id, stream_version, event_id, event_type, schema_version, data, metadata,
                               recorded_at, hash, prev_hash)
           values ('raced', 1, gen_random_uuid(), 'Rogue', 1, '{}', '{}', now(), decode(repeat('00', 32), 'hex'),
                   decode(repeat('00', 32), 'hex'))`,
        )
        const attempt = failureOf(store.append("raced", "no_stream", newEvents("raced", 1)))
        await sleep(100)
        await rogue.query("commit")
        const error = await attempt
        expect(error).toBeInstanceOf(WrongExpectedVersion)
        expect(error).toMatchObject({ expected: "no_stream", actual: 1 })
      } finally {
        rogue.release()
      }
    }))

  it("appendWithClient refuses a transaction that already wrote, no transaction, and REPEATABLE READ", () =>
    withStore(async (db, store) => {
      const client = await db.pool.connect()
      try {
        await client.query("begin")
        await client.query("select pg_current_xact_id()")
        await expectDefect(store.appendWithClient(client, "misuse", "any", newEvents("a", 1)), /first write/)
        await client.query("rollback")
        await expectDefect(
          store.appendWithClient(client, "misuse", "any", newEvents("b", 1)),
          /open transaction/,
        )
        await client.query("begin isolation level repeatable read")
        await expectDefect(
          store.appendWithClient(client, "misuse", "any", newEvents("c", 1)),
          /READ COMMITTED/,
        )
        await client.query("rollback")
      } finally {
        client.release()
      }
      expect(await run(store.readAll())).toEqual([])
    }))

  it("appendStreamsInTransaction commits the events with what its work wrote, or neither when the work fails", () =>
    withStore(async (db, store) => {
      await db.pool.query("create table side_effects (note text not null)")
      const one = (stream_id: string, expected: number | "no_stream", events: ReadonlyArray<NewEvent>) => [
        { stream_id, expected, events },
      ]
      const [appended] = await run(
        store.appendStreamsInTransaction(
          one("tx", "no_stream", newEvents("tx", 2)),
          async (client, results) => {
            await client.query("insert into side_effects values ($1)", [
              `v${results[0]?.next_expected_version}`,
            ])
          },
        ),
      )
      expect(appended !== undefined && Result.isSuccess(appended)).toBe(true)
      const failing = Effect.runPromise(
        store.appendStreamsInTransaction(one("tx", 2, newEvents("tx-more", 1)), async (client) => {
          await client.query("insert into side_effects values ('never')")
          throw new Error("work failed")
        }),
      )
      // Failed before COMMIT: reported as certainly not committed.
      await expect(failing).rejects.toBeInstanceOf(NotCommitted)
      await expect(failing).rejects.toThrow(/work failed/)
      // The head cache forgot the speculative head: the next append at version 2 chains correctly.
      await run(store.appendStreamsInTransaction(one("tx", 2, newEvents("tx-last", 1)), async () => {}))
      const notes = await db.pool.query<{ note: string }>("select note from side_effects order by note")
      expect(notes.rows.map((r) => r.note)).toEqual(["v2"])
      const events = await run(store.readStream("tx"))
      expect(events.map((e) => e.stream_version)).toEqual([1, 2, 3])
      expect(events[2]?.prev_hash).toBe(events[1]?.hash)
      const [wrong] = await run(
        store.appendStreamsInTransaction(one("tx", 1, newEvents("late", 1)), async () => {}),
      )
      expect(wrong !== undefined && Result.isFailure(wrong) && wrong.failure).toMatchObject({
        stream_id: "tx",
        expected: 1,
        actual: 3,
      })
    }))

  it("a group commit whose work left a failed statement behind is rolled back whole, never half committed", () =>
    withStore(async (_db, store) => {
      const failing = Effect.runPromise(
        store.appendStreamsInTransaction(
          [{ stream_id: "half", expected: "no_stream", events: newEvents("half", 2) }],
          async (client) => {
            // Not awaited: the work "succeeds", but the transaction is aborted and COMMIT answers ROLLBACK.
            client.query("insert into no_such_table values (1)").catch(() => {})
          },
        ),
      )
      await expect(failing).rejects.toBeInstanceOf(NotCommitted)
      expect(await run(store.readStream("half"))).toEqual([])
      await expectAppendGoesOn(
        store,
        [{ stream_id: "half", expected: "no_stream", events: newEvents("half", 1) }],
        async () => {},
      )
    }))

  it("a group commit appends every stream at its expected version in one transaction and skips only the stale ones", () =>
    withStore(async (db, store) => {
      await run(store.append("b", "no_stream", newEvents("b", 2)))
      // Another store (process) moves "c" on: our cached head of "c" is stale.
      await run(store.append("c", "no_stream", newEvents("c", 1)))
      const other = makePostgresEventStore(otherPool(db, 2))
      await run(other.append("c", 1, newEvents("c-other", 1)))
      await db.pool.query("create table work_runs (run integer not null, streams text not null)")
      const seen: Array<Array<number | undefined>> = []
      const results = await run(
        store.appendStreamsInTransaction(
          [
            { stream_id: "a", expected: "no_stream", events: newEvents("a", 3) },
            { stream_id: "b", expected: 2, events: newEvents("b-more", 1) },
            { stream_id: "c", expected: 1, events: newEvents("c-late", 1) },
            { stream_id: "d", expected: 5, events: newEvents("d", 1) },
          ],
          async (client, appended) => {
            seen.push(appended.map((r) => r?.next_expected_version))
            await client.query("insert into work_runs values ($1, $2)", [
              seen.length,
              appended.map((r) => r?.next_expected_version ?? "-").join(","),
            ])
          },
        ),
      )
      await run(other.close)
      // "d" is refused before anything is sent. "c" was chained on our stale head: the database
      // refuses it, that transaction (with the work done for "c") is rolled back, and a second
      // one appends "a" and "b" with the work run again for them alone.
      expect(seen).toEqual([
        [3, 3, 2, undefined],
        [3, 3, undefined, undefined],
      ])
      const runs = await db.pool.query<{ run: number; streams: string }>("select run, streams from work_runs")
      expect(runs.rows).toEqual([{ run: 2, streams: "3,3,-,-" }])
      const [a, b, c, d] = results
      expect(a !== undefined && Result.isSuccess(a) && a.success.events.map((e) => e.stream_version)).toEqual(
        [1, 2, 3],
      )
      expect(b !== undefined && Result.isSuccess(b) && b.success.next_expected_version).toBe(3)
      expect(c !== undefined && Result.isFailure(c) && c.failure).toMatchObject({ expected: 1, actual: 2 })
      expect(d !== undefined && Result.isFailure(d) && d.failure).toMatchObject({ expected: 5, actual: 0 })
      // One transaction: the events of "a" and "b" share a transaction id; "c" and "d" got nothing.
      const rows = await db.pool.query<{ stream_id: string; transactions: string; versions: string }>(
        `select stream_id, count(distinct transaction_id)::text as transactions, max(stream_version)::text as versions
           from events group by stream_id order by stream_id`,
      )
      expect(rows.rows).toEqual([
        { stream_id: "a", transactions: "1", versions: "3" },
        { stream_id: "b", transactions: "2", versions: "3" },
        { stream_id: "c", transactions: "2", versions: "2" },
      ])
      const shared = await db.pool.query<{ n: string }>(
        `select count(distinct transaction_id)::text as n from events where stream_id = 'a' or (stream_id = 'b' and stream_version = 3)`,
      )
      expect(shared.rows[0]?.n).toBe("1")
      // Read back, the appended events are exactly what the store answered (hash chains intact).
      expect(await run(store.readStream("a"))).toEqual(
        a !== undefined && Result.isSuccess(a) && a.success.events,
      )
      // "c" goes on from the head read after the conflict.
      await expectAppendGoesOn(
        store,
        [{ stream_id: "c", expected: 2, events: newEvents("c", 1) }],
        async () => {},
      )
    }))

  it("the append's array literals read back as the strings and bytes they were built from", () =>
    withStore(async (db, store) => {
      const awkward = [
        "",
        "NULL",
        "null",
        'a "quoted" one',
        "back\\slash\\",
        "{braces},commas",
        " spaced ",
        "ünï 😀",
      ]
      const text = await db.pool.query<{ values: Array<string> }>("select $1::text[] as values", [
        textArrayLiteral(awkward),
      ])
      expect(text.rows[0]?.values).toEqual(awkward)
      const hexes = ["", "00ff", "0".repeat(64), "deadbeef"]
      const bytes = await db.pool.query<{ values: Array<Buffer> }>("select $1::bytea[] as values", [
        byteaArrayLiteral(hexes),
      ])
      expect(bytes.rows[0]?.values.map((b) => b.toString("hex"))).toEqual(hexes)
      expect(() => byteaArrayLiteral(["0F"])).toThrow(/lowercase hex/)
      // Through a group commit: awkward stream ids and event types are stored as given.
      const streams = ['s "1"', "s\\2", "{s3}"]
      const results = await run(
        store.appendStreamsInTransaction(
          streams.map((stream_id) => ({
            stream_id,
            expected: "no_stream" as const,
            events: [{ ...newEvent("x"), event_type: `type "${stream_id}", \\ {}` }],
          })),
          async () => {},
        ),
      )
      expect(results.every((r) => Result.isSuccess(r))).toBe(true)
      for (const stream_id of streams) {
        const [event] = await run(store.readStream(stream_id))
        expect(event).toMatchObject({ stream_id, event_type: `type "${stream_id}", \\ {}` })
      }
    }))

  it("a group commit sends BEGIN, the append and what its work sends at once in one write, then COMMIT", () =>
    withStore(async (db, store) => {
      const writes = await groupCommitWrites(db, store, async (inserts) => {
        await Promise.all(inserts)
      })
      // Held until the work had sent its statements: one write for all of them, one for COMMIT
      // (a write per statement would make it three from the work on).
      expect(writes).toBe(2)
    }))

  it("a work that sent everything: BEGIN, the append, its statements, the guard and COMMIT leave in one write", () =>
    withStore(async (db, store) => {
      const writes = await groupCommitWrites(db, store, sentAll)
      expect(writes).toBe(1)
      expect((await run(store.readStream("w"))).map((e) => e.stream_version)).toEqual([1, 2, 3])
    }))

  it("composed hooks: all sent at once stays one round trip; a hook that reads first makes the rest wait, in order", () =>
    withStore(async (db, store) => {
      await db.pool.query("create table hook_rows (n serial primary key, hook text not null)")
      const sent =
        (name: string): TransactionHook =>
        (client) =>
          sentAll([client.query("insert into hook_rows (hook) values ($1)", [name])])
      const reading: TransactionHook = async (client) => {
        const found = await client.query<{ count: string }>("select count(*)::text as count from hook_rows")
        await client.query("insert into hook_rows (hook) values ($1)", [`reader saw ${found.rows[0]?.count}`])
      }
      const allSent = composeHooks(sent("a"), sent("b"))
      const mixed = composeHooks(sent("c"), reading, sent("d"))
      const kinds: Array<string> = []
      const work =
        (hook: TransactionHook): GroupCommitWork =>
        (client) => {
          const run = hook(client, [])
          kinds.push(isSentWork(run) ? "sent" : "promise")
          return run
        }
      await run(
        store.appendStreamsInTransaction(
          [{ stream_id: "h1", expected: "no_stream", events: newEvents("h", 1) }],
          work(allSent),
        ),
      )
      await run(
        store.appendStreamsInTransaction(
          [{ stream_id: "h2", expected: "no_stream", events: newEvents("h", 1) }],
          work(mixed),
        ),
      )
      expect(kinds).toEqual(["sent", "promise"])
      const rows = await db.pool.query<{ hook: string }>("select hook from hook_rows order by n")
      // The reader ran after "c" answered and before "d" was sent.
      expect(rows.rows.map((r) => r.hook)).toEqual(["a", "b", "c", "reader saw 3", "d"])
    }))

  it("a work that sent everything, beside a stale stream: that transaction is rolled back whole, work and all", () =>
    withStore(async (db, store) => {
      await run(store.append("c", "no_stream", newEvents("c", 1)))
      // Another store moves "c" on: our cached head of "c" is stale, and only the database sees it.
      const other = makePostgresEventStore(otherPool(db, 2))
      await run(other.append("c", 1, newEvents("c-other", 1)))
      await run(other.close)
      await db.pool.query("create table work_runs (run integer not null, streams text not null)")
      let runs = 0
      const results = await run(
        store.appendStreamsInTransaction(
          [
            { stream_id: "a", expected: "no_stream", events: newEvents("a", 2) },
            { stream_id: "c", expected: 1, events: newEvents("c-late", 1) },
          ],
          (client, appended) => {
            runs += 1
            return sentAll([
              client.query("insert into work_runs values ($1, $2)", [
                runs,
                appended.map((r) => r?.next_expected_version ?? "-").join(","),
              ]),
            ])
          },
        ),
      )
      // COMMIT had left with the work: the guard made it answer ROLLBACK, so the work done for "c"
      // in the first transaction is gone; the second one appended "a" with the work for "a" alone.
      expect(runs).toBe(2)
      const rows = await db.pool.query<{ run: number; streams: string }>("select run, streams from work_runs")
      expect(rows.rows).toEqual([{ run: 2, streams: "2,-" }])
      const [a, c] = results
      expect(a !== undefined && Result.isSuccess(a) && a.success.next_expected_version).toBe(2)
      expect(c !== undefined && Result.isFailure(c) && c.failure).toMatchObject({ expected: 1, actual: 2 })
      const late = await db.pool.query("select 1 from events where event_type like 'c-late%'")
      expect(late.rowCount).toBe(0)
      // The heads are right for what comes next.
      await expectAppendGoesOn(store, [
        { stream_id: "a", expected: 2, events: newEvents("a", 1) },
        { stream_id: "c", expected: 2, events: newEvents("c", 1) },
      ])
    }))

  it("a work that sent everything and whose statement fails: COMMIT answers ROLLBACK, nothing is written, NotCommitted", () =>
    withStore(async (db, store) => {
      await db.pool.query("create table side_effects (note text not null)")
      const failing = Effect.runPromise(
        store.appendStreamsInTransaction(
          [{ stream_id: "sent", expected: "no_stream", events: newEvents("sent", 2) }],
          (client) =>
            sentAll([
              client.query("insert into side_effects values ('first')"),
              client.query("insert into no_such_table values (1)"),
              client.query("insert into side_effects values ('after')"),
            ]),
        ),
      )
      await expect(failing).rejects.toBeInstanceOf(NotCommitted)
      await expect(failing).rejects.toThrow(/no_such_table/)
      expect(await run(store.readStream("sent"))).toEqual([])
      expect((await db.pool.query("select note from side_effects")).rowCount).toBe(0)
      // The head cache forgot the speculative head.
      await expectAppendGoesOn(store, [
        { stream_id: "sent", expected: "no_stream", events: newEvents("sent", 1) },
      ])
    }))

  it("a work that sent everything and then threw: its statements committed, so the failure is not NotCommitted", () =>
    withStore(async (db, store) => {
      await db.pool.query("create table side_effects (note text not null)")
      const failing = Effect.runPromise(
        store.appendStreamsInTransaction(
          [{ stream_id: "late-throw", expected: "no_stream", events: newEvents("late-throw", 1) }],
          (client) => ({
            sent_all: true,
            done: client.query("insert into side_effects values ('kept')").then(() => {
              throw new Error("the work's own code failed")
            }),
          }),
        ),
      )
      const error = await failing.then(
        () => undefined,
        (e: unknown) => e,
      )
      expect(error).not.toBeInstanceOf(NotCommitted)
      expect(String(error)).toMatch(/own code failed/)
      expect((await run(store.readStream("late-throw"))).length).toBe(1)
      expect((await db.pool.query("select note from side_effects")).rows).toEqual([{ note: "kept" }])
    }))

  it("a work that sent everything, against a writer that bypassed the stream lock: WrongExpectedVersion, nothing written", () =>
    withStore(async (db, store) => {
      await db.pool.query("create table side_effects (note text not null)")
      const rogue = await db.pool.connect()
      try {
        await rogue.query("begin")
        await rogue.query(
          `insert into events (stream_id, stream_version, event_id, event_type, schema_version, data, metadata,
                               recorded_at, hash, prev_hash)
           values ('raced', 1, gen_random_uuid(), 'Rogue', 1, '{}', '{}', now(), decode(repeat('00', 32), 'hex'),
                   decode(repeat('00', 32), 'hex'))`,
        )
        const attempt = run(
          store.appendStreamsInTransaction(
            [{ stream_id: "raced", expected: "no_stream", events: newEvents("raced", 1) }],
            (client) => sentAll([client.query("insert into side_effects values ('never')")]),
          ),
        )
        await sleep(100)
        await rogue.query("commit")
        const [result] = await attempt
        expect(result !== undefined && Result.isFailure(result) && result.failure).toMatchObject({
          stream_id: "raced",
          expected: "no_stream",
          actual: 1,
        })
      } finally {
        rogue.release()
      }
      expect((await db.pool.query("select note from side_effects")).rowCount).toBe(0)
      expect((await run(store.readStream("raced"))).map((e) => e.event_type)).toEqual(["Rogue"])
    }))

  it("group commits that share streams from two stores never deadlock and keep each stream's versions in subscription order", () =>
    withStore(async (db, store) => {
      const other = makePostgresEventStore(otherPool(db, 8))
      const streams = ["s0", "s1", "s2", "s3", "s4"]
      // Each round, both stores append to overlapping sets of streams in opposite orders at once.
      const appendAll = async (each: PostgresEventStore, order: ReadonlyArray<string>, round: number) => {
        for (let attempt = 0; attempt < 50; attempt++) {
          const versions = await Promise.all(order.map((s) => run(each.streamVersion(s))))
          const results = await run(
            each.appendStreamsInTransaction(
              order.map((stream_id, i) => ({
                stream_id,
                expected: versions[i] === 0 ? ("no_stream" as const) : (versions[i] as number),
                events: newEvents(`${stream_id}-${round}`, 1),
              })),
              async () => {},
            ),
          )
          if (results.every((r) => Result.isSuccess(r))) return
          order = order.filter((_s, i) => {
            const r = results[i]
            return r === undefined || Result.isFailure(r)
          })
        }
        throw new Error("kept conflicting")
      }
      for (let round = 0; round < 15; round++) {
        await Promise.all([
          appendAll(store, streams, round),
          appendAll(other, [...streams].reverse(), round),
          appendAll(store, [streams[1] as string, streams[3] as string], round),
        ])
      }
      await run(other.close)
      const counts = await db.pool.query<{ stream_id: string; n: string }>(
        "select stream_id, count(*)::text as n from events group by stream_id order by stream_id",
      )
      expect(counts.rows.map((r) => [r.stream_id, r.n])).toEqual([
        ["s0", "30"],
        ["s1", "45"],
        ["s2", "30"],
        ["s3", "45"],
        ["s4", "30"],
      ])
      // A subscriber reads in (transaction id, position) order: each stream's versions come in order.
      const order = await db.pool.query<{ stream_id: string; stream_version: string }>(
        "select stream_id, stream_version::text from events order by transaction_id, global_position",
      )
      const last = new Map<string, number>()
      for (const row of order.rows) {
        const version = Number(row.stream_version)
        expect(version).toBe((last.get(row.stream_id) ?? 0) + 1)
        last.set(row.stream_id, version)
      }
    }))

  it("recorded_at and uppercase event ids read back exactly as hashed, whatever the session time zone", () =>
    withStore(async (db) => {
      const pool = otherPool(db, 2, "-c TimeZone=America/St_Johns")
      const store = makePostgresEventStore(pool)
      try {
        const upper = { ...newEvent("upper"), event_id: newEvent("id").event_id.toUpperCase() }
        const appended = await run(store.append("zoned", "no_stream", [upper]))
        const [read] = await run(store.readStream("zoned"))
        expect(read).toEqual(appended.events[0])
        expect(read?.event_id).toBe(upper.event_id.toLowerCase())
        expect(read?.recorded_at).toMatch(/Z$/)
        expect(read && eventHash(read.prev_hash, read)).toBe(read?.hash)
      } finally {
        await run(store.close)
        await pool.end()
      }
    }))

  it("invalid events are defects and write nothing", () =>
    withStore(async (_, store) => {
      const cases: ReadonlyArray<readonly [NewEvent, RegExp]> = [
        [{ ...newEvent("id"), event_id: "not-a-uuid" }, /not a UUID/],
        [newEvent("nan", { amount: Number.NaN }), /no JSON form/],
        [newEvent("bigint", { amount: 1n }), /no JSON form/],
        [newEvent("date", { at: new Date(0) }), /plain objects/],
        [{ ...newEvent("version"), schema_version: 0 }, /schema_version/],
      ]
      for (const [event, message] of cases) {
        await expectDefect(store.append("invalid", "any", [newEvent("valid"), event]), message)
      }
      expect(await run(store.readAll())).toEqual([])
    }))

  it("the layer provides the store and closes its LISTEN connection with its scope", () =>
    withStore(async (db) => {
      const listening = async () =>
        Number(
          (
            await db.pool.query<{ count: string }>(
              `select count(*)::text as count from pg_stat_activity
               where datname = current_database() and query like 'listen %'`,
            )
          ).rows[0]?.count,
        )
      const program = Effect.gen(function* () {
        const store = yield* EventStore
        yield* store.append("layered", "no_stream", newEvents("layered", 1))
        yield* store.waitForEvents(1)
        return yield* Effect.promise(listening)
      })
      const live = PostgresEventStoreLive.pipe(Layer.provide(Layer.succeed(Database, { pool: db.pool })))
      expect(await Effect.runPromise(program.pipe(Effect.provide(live)))).toBe(1)
      for (let attempt = 0; attempt < 200 && (await listening()) > 0; attempt += 1) await sleep(50)
      expect(await listening()).toBe(0)
    }))
})
