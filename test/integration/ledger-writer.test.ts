// Proves the ledger writer: answers only after commit, group-commits concurrent commands into few
// appends, is exactly-once with idempotency keys, and stays correct with two writers on one ledger.
import { Cause, Effect, Exit, Result } from "effect"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { makePostgresEventStore } from "../../adapters/eventstore/postgres/event-store.ts"
import type { LedgerEvent } from "../../domain/ledger/events.ts"
import { ledgerStreamId } from "../../domain/ledger/events.ts"
import {
  evolve,
  finalRecordCountMax,
  hasTransfer,
  initialState,
  type LedgerState,
} from "../../domain/ledger/index.ts"
import { type LedgerWriterService, makeLedgerWriter, sentAll } from "../../src/ledger/writer.ts"
import { type StoredResponse, storeResponses } from "../../src/platform/idempotency.ts"
import type { EventStore } from "../../src/ports/event-store.ts"
import { freshDatabase, type TestDatabase } from "../support/db.ts"
import { createTransfers, openAccount, transfer } from "../support/ledger-fixtures.ts"

let db: TestDatabase
let store: EventStore["Service"]
beforeAll(async () => {
  db = await freshDatabase()
  store = makePostgresEventStore(db.pool)
})
afterAll(async () => {
  await db.drop()
})

const ctx = (idempotency_key: string | null = null) => ({
  actor: "test",
  correlation_id: "c",
  idempotency_key,
})
const run = <A, E>(effect: Effect.Effect<A, E>) => Effect.runPromise(Effect.result(effect))
let ledgerCounter = 0
const newLedger = () => ({ tenant: `tenant${++ledgerCounter}`, environment: "sandbox" })

/** Opens a world account and `wallets` wallets funded with `funding` each. */
const setup = async (
  writer: LedgerWriterService,
  ledger: { tenant: string; environment: string },
  wallets: number,
  funding: bigint,
) => {
  const now = 1_700_000_000_000
  for (const id of ["world", "fees", ...Array.from({ length: wallets }, (_, i) => `w${i}`)]) {
    const kind = id === "world" ? "world" : id === "fees" ? "fee_revenue" : "wallet"
    const opened = await run(writer.execute(ledger, openAccount(id, kind, now), ctx()))
    expect(Result.isSuccess(opened)).toBe(true)
  }
  for (let i = 0; i < wallets; i++) {
    const funded = await run(
      writer.execute(ledger, createTransfers([transfer(`fund${i}`, "world", `w${i}`, funding)], now), ctx()),
    )
    expect(Result.isSuccess(funded)).toBe(true)
  }
}

/**
 * Reserves `count` units of w0 for w1, one per pending transfer, in two commands, all lapsing one
 * second after `now`: more than one append can hold once they are due.
 */
const reserveBurst = async (
  writer: LedgerWriterService,
  ledger: { tenant: string; environment: string },
  count: number,
  now: number,
) => {
  const half = Math.ceil(count / 2)
  for (const [from, to] of [
    [0, half],
    [half, count],
  ] as const) {
    const held = await run(
      writer.execute(
        ledger,
        createTransfers(
          Array.from({ length: to - from }, (_, i) =>
            transfer(`hold${from + i}`, "w0", "w1", 1n, { pending: { timeout_ms: 1_000 } }),
          ),
          now,
        ),
        ctx(),
      ),
    )
    expect(Result.isSuccess(held)).toBe(true)
  }
}

/** An account's available balance: credits posted less debits posted and pending. */
const available = (state: LedgerState, account_id: string): bigint => {
  const account = state.accounts.get(account_id)
  return account === undefined ? 0n : account.credits_posted - account.debits_posted - account.debits_pending
}

/**
 * Two writers on one database: A with one command per batch and two batches in flight (the second
 * decided on the first's state), appending directly or by group commit; B plain.
 */
const pipelinedWriters = (path: string) => {
  const a_store = makePostgresEventStore(db.pool)
  const a = makeLedgerWriter(a_store, {
    batch_commands_max: 1,
    pipeline_depth: 2,
    ...(path === "group commit"
      ? { transaction: { appendStreams: a_store.appendStreamsInTransaction, hook: async () => {} } }
      : {}),
  })
  return { a, b: makeLedgerWriter(makePostgresEventStore(db.pool)) }
}

const foldStream = async (streamId: string): Promise<{ state: LedgerState; versions: number[] }> => {
  const events = await Effect.runPromise(store.readStream(streamId))
  let state = initialState
  for (const event of events)
    state = evolve(state, { type: event.event_type, data: event.data } as unknown as LedgerEvent)
  return { state, versions: events.map((e) => e.stream_version) }
}

/** An append-counting view of the real store: what the writer sends to PostgreSQL. */
const countingStore = (inner: EventStore["Service"]) => {
  const counter = { appends: 0, conflicts: 0 }
  const wrapped: EventStore["Service"] = {
    ...inner,
    append: (...args) => {
      counter.appends++
      return inner.append(...args).pipe(Effect.tapError(() => Effect.sync(() => counter.conflicts++)))
    },
  }
  return { store: wrapped, counter }
}

describe("LedgerWriter", () => {
  it("answers after commit: the acknowledged events are in the stream", async () => {
    const writer = makeLedgerWriter(store)
    const ledger = newLedger()
    await setup(writer, ledger, 1, 1_000n)
    const result = await run(
      writer.execute(ledger, createTransfers([transfer("t1", "w0", "fees", 5n)], 1_700_000_000_001), ctx()),
    )
    if (!Result.isSuccess(result)) throw new Error("expected success")
    const stream = await Effect.runPromise(store.readStream(ledgerStreamId(ledger)))
    expect(stream.map((e) => e.event_id)).toContain(result.success.events[0]?.event_id)
    expect(result.success.stream_version).toBe(stream.length)
  })

  it("group-commits concurrent commands into far fewer appends than commands", async () => {
    const { store: counted, counter } = countingStore(store)
    const writer = makeLedgerWriter(counted)
    const ledger = newLedger()
    await setup(writer, ledger, 4, 1_000_000n)
    const before = counter.appends
    const results = await Promise.all(
      Array.from({ length: 400 }, (_, i) =>
        run(
          writer.execute(
            ledger,
            createTransfers([transfer(`x${i}`, `w${i % 4}`, `w${(i + 1) % 4}`, 1n)], 1_700_000_000_100),
            ctx(),
          ),
        ),
      ),
    )
    expect(results.every(Result.isSuccess)).toBe(true)
    const appends = counter.appends - before
    expect(appends).toBeLessThan(50)
    // Pipelined appends are chained on each other: a single writer never conflicts with itself.
    expect(counter.conflicts).toBe(0)
    const { versions } = await foldStream(ledgerStreamId(ledger))
    expect(versions).toEqual(versions.map((_, i) => i + 1))
  })

  it("rejects an overdraft with a typed error and writes nothing", async () => {
    const writer = makeLedgerWriter(store)
    const ledger = newLedger()
    await setup(writer, ledger, 2, 100n)
    const before = await Effect.runPromise(store.streamVersion(ledgerStreamId(ledger)))
    const result = await run(
      writer.execute(ledger, createTransfers([transfer("big", "w0", "w1", 101n)], 1_700_000_000_200), ctx()),
    )
    expect(Result.isFailure(result) && result.failure._tag).toBe("InsufficientFunds")
    expect(await Effect.runPromise(store.streamVersion(ledgerStreamId(ledger)))).toBe(before)
  })

  it("20 concurrent identical commands with one idempotency key have one effect", async () => {
    const writer = makeLedgerWriter(store)
    const ledger = newLedger()
    await setup(writer, ledger, 2, 1_000n)
    const command = createTransfers([transfer("once", "w0", "w1", 10n)], 1_700_000_000_300)
    const results = await Promise.all(
      Array.from({ length: 20 }, () => run(writer.execute(ledger, command, ctx("key-1")))),
    )
    const successes = results.filter(Result.isSuccess)
    expect(successes).toHaveLength(20)
    expect(successes.filter((r) => !r.success.replayed)).toHaveLength(1)
    const eventIds = new Set(successes.map((r) => r.success.events[0]?.event_id))
    expect(eventIds.size).toBe(1)
    // A replay answers the original events in full (read back from the store, not kept in memory).
    const firstRun = successes.find((r) => !r.success.replayed)?.success
    for (const r of successes) expect(r.success.events).toEqual(firstRun?.events)
    const later = await run(writer.execute(ledger, command, ctx("key-1")))
    expect(Result.isSuccess(later) && later.success).toEqual({ ...firstRun, replayed: true })
    const { state } = await foldStream(ledgerStreamId(ledger))
    expect(state.accounts.get("w1")?.credits_posted).toBe(1_010n)
  })

  it("a reused idempotency key with a different command is rejected; after a restart the key is remembered", async () => {
    const ledger = newLedger()
    const first = makeLedgerWriter(store)
    await setup(first, ledger, 2, 1_000n)
    // Two events (a payment and its fee): a replay after the restart answers both, and the version
    // of the last, as the first run did.
    const pair = () => [transfer("k1", "w0", "w1", 7n), transfer("k1-fee", "w0", "w1", 1n)]
    const original = await run(
      first.execute(ledger, createTransfers(pair(), 1_700_000_000_400), ctx("key-2")),
    )
    if (!Result.isSuccess(original)) throw new Error("expected success")
    const other = await run(
      first.execute(
        ledger,
        createTransfers([transfer("k2", "w0", "w1", 8n)], 1_700_000_000_401),
        ctx("key-2"),
      ),
    )
    expect(Result.isFailure(other) && other.failure._tag).toBe("IdempotencyKeyReused")
    // A new writer (as after a restart) loads the key from the log.
    const restarted = makeLedgerWriter(store)
    const retry = await run(
      restarted.execute(ledger, createTransfers(pair(), 1_700_000_009_999), ctx("key-2")),
    )
    if (!Result.isSuccess(retry)) throw new Error("expected success")
    expect(original.success.events).toHaveLength(2)
    expect(retry.success).toEqual({ ...original.success, replayed: true })
    expect(retry.success.events.map((e) => e.event_id)).toEqual(
      original.success.events.map((e) => e.event_id),
    )
  })

  it("a key whose command wrote nothing is not consumed, in the process that ran it as after a restart", async () => {
    const ledger = newLedger()
    const first = makeLedgerWriter(store)
    await setup(first, ledger, 2, 1_000n)
    // Nothing is due: this command writes no event, so its key is in no event either.
    const noop = await run(
      first.execute(ledger, { type: "ExpirePendingTransfers", now_ms: 1_700_000_000_500 }, ctx("key-noop")),
    )
    expect(Result.isSuccess(noop) && noop.success.events).toEqual([])
    const again = (writer: LedgerWriterService, id: string) =>
      run(
        writer.execute(
          ledger,
          createTransfers([transfer(id, "w0", "w1", 1n)], 1_700_000_000_501),
          ctx("key-noop"),
        ),
      )
    // The same process and a restarted one answer alike: the key is free, the command is decided.
    const here = await again(first, "noop-here")
    expect(Result.isSuccess(here) && here.success.events.length).toBe(1)
    // Likewise within one batch: a no-op and another command with its key, sent together.
    const [noop2, other] = await Promise.all([
      run(
        first.execute(
          ledger,
          { type: "ExpirePendingTransfers", now_ms: 1_700_000_000_502 },
          ctx("key-noop-2"),
        ),
      ),
      run(
        first.execute(
          ledger,
          createTransfers([transfer("noop-batch", "w0", "w1", 1n)], 1_700_000_000_502),
          ctx("key-noop-2"),
        ),
      ),
    ])
    expect(Result.isSuccess(noop2)).toBe(true)
    expect(Result.isSuccess(other) && other.success.events.length).toBe(1)
    // Now the key is consumed, by events a restarted writer reads back.
    const there = await again(makeLedgerWriter(store), "noop-there")
    expect(Result.isFailure(there) && there.failure._tag).toBe("IdempotencyKeyReused")
  })

  it("two writers on one ledger: every command lands once, versions stay contiguous, nobody is overdrawn", async () => {
    const ledger = newLedger()
    const a = makeLedgerWriter(store)
    const b = makeLedgerWriter(makePostgresEventStore(db.pool))
    await setup(a, ledger, 3, 50n)
    const commands = Array.from({ length: 120 }, (_, i) =>
      createTransfers(
        [transfer(`m${i}`, `w${i % 3}`, `w${(i + 2) % 3}`, BigInt(1 + (i % 7)))],
        1_700_000_001_000 + i,
      ),
    )
    const results = await Promise.all(
      commands.map((c, i) => run((i % 2 === 0 ? a : b).execute(ledger, c, ctx()))),
    )
    const failures = results.filter(Result.isFailure).map((r) => r.failure._tag)
    expect(failures.every((tag) => tag === "InsufficientFunds")).toBe(true)
    const { state, versions } = await foldStream(ledgerStreamId(ledger))
    expect(versions).toEqual(versions.map((_, i) => i + 1))
    const succeeded = results.filter(Result.isSuccess).length
    const transfersRecorded = [...state.transfers.keys()].filter((id) => String(id).startsWith("m")).length
    expect(transfersRecorded).toBe(succeeded)
    for (const id of ["w0", "w1", "w2"]) {
      const account = state.accounts.get(id)
      expect(account).toBeDefined()
      if (account)
        expect(account.debits_posted + account.debits_pending).toBeLessThanOrEqual(account.credits_posted)
    }
  })

  it("two writers on one ledger: a refusal, an expiry or a sync is decided on what the other wrote, not a stale view", async () => {
    const ledger = newLedger()
    const now = 1_700_000_002_000
    const a = makeLedgerWriter(store)
    const b = makeLedgerWriter(makePostgresEventStore(db.pool))
    await setup(a, ledger, 2, 10n)
    // B loads the ledger (w0 holds 10), then A credits w0 with 100 more.
    expect(available((await Effect.runPromise(b.snapshot(ledger))).state, "w0")).toBe(10n)
    expect(
      Result.isSuccess(
        await run(a.execute(ledger, createTransfers([transfer("top", "world", "w0", 100n)], now), ctx())),
      ),
    ).toBe(true)
    // B writes nothing for a refusal, so no version conflict would tell it its view is old: it
    // looks, reloads and decides again. Today's 50 is affordable.
    const paid = await run(
      b.execute(ledger, createTransfers([transfer("pay50", "w0", "w1", 50n)], now), ctx()),
    )
    expect(Result.isSuccess(paid)).toBe(true)
    // A reserves with a timeout; B's expiry, due after it, finds the reservation A made.
    const reserve = transfer("hold", "w1", "w0", 5n, { pending: { timeout_ms: 1_000 } })
    expect(Result.isSuccess(await run(a.execute(ledger, createTransfers([reserve], now), ctx())))).toBe(true)
    const expired = await run(
      b.execute(ledger, { type: "ExpirePendingTransfers", now_ms: now + 2_000 }, ctx()),
    )
    expect(Result.isSuccess(expired) && expired.success.events.map((event) => event.event_type)).toEqual([
      "PendingTransferExpired",
    ])
    // A snapshot is as old as the writer's last read; `sync` catches it up with what A wrote.
    expect(
      Result.isSuccess(
        await run(a.execute(ledger, createTransfers([transfer("more", "world", "w1", 7n)], now), ctx())),
      ),
    ).toBe(true)
    const before = (await Effect.runPromise(b.snapshot(ledger))).state
    expect(hasTransfer(before, "more")).toBe(false)
    expect(Result.isSuccess(await run(b.sync(ledger)))).toBe(true)
    const after = await Effect.runPromise(b.snapshot(ledger))
    expect(hasTransfer(after.state, "more")).toBe(true)
    const { versions } = await foldStream(ledgerStreamId(ledger))
    expect(after.version).toBe(versions.length)
    // A refusal that stands is still refused (and costs no write): w1 cannot pay 1,000.
    const refused = await run(
      b.execute(ledger, createTransfers([transfer("big", "w1", "w0", 1_000n)], now), ctx()),
    )
    expect(Result.isFailure(refused) && refused.failure._tag).toBe("InsufficientFunds")
    expect((await foldStream(ledgerStreamId(ledger))).versions.length).toBe(versions.length)
  })

  it.each(["direct appends", "group commit"])(
    "two writers, %s: a pipelined batch chained on a batch that conflicted is never written on the other writer's events",
    async (path) => {
      const ledger = newLedger()
      const now = 1_700_000_002_500
      const { a, b } = pipelinedWriters(path)
      await setup(a, ledger, 2, 1n)
      await Effect.runPromise(b.snapshot(ledger))
      // B writes as many events as A's first batch will, so the stream reaches the version A's
      // second batch expects, with other events: A's view (and its head cache) is now stale.
      const other = await run(
        b.execute(ledger, createTransfers([transfer("other", "world", "w1", 1n)], now), ctx()),
      )
      expect(Result.isSuccess(other)).toBe(true)
      // A credits w0, then (pipelined on that credit) pays all of it away. The credit conflicts.
      const [credit, pay] = await Promise.all([
        run(a.execute(ledger, createTransfers([transfer("credit", "world", "w0", 100n)], now), ctx())),
        run(a.execute(ledger, createTransfers([transfer("spend", "w0", "w1", 101n)], now), ctx())),
      ])
      expect(Result.isSuccess(credit)).toBe(true)
      expect(Result.isSuccess(pay)).toBe(true)
      // Replayed in order, w0 is never overdrawn: the payment comes after the credit it spent.
      const events = await Effect.runPromise(store.readStream(ledgerStreamId(ledger)))
      let state = initialState
      for (const event of events) {
        state = evolve(state, { type: event.event_type, data: event.data } as unknown as LedgerEvent)
        expect(available(state, "w0")).toBeGreaterThanOrEqual(0n)
      }
      expect(events.map((e) => e.stream_version)).toEqual(events.map((_, i) => i + 1))
    },
  )

  it.each(["direct appends", "group commit"])(
    "two writers, %s: a refusal pipelined on a batch that conflicted is decided again on what was committed",
    async (path) => {
      const ledger = newLedger()
      const now = 1_700_000_002_700
      const { a, b } = pipelinedWriters(path)
      await setup(a, ledger, 2, 100n)
      // B spends 60 of w0's 100, unseen by A.
      const spent = await run(
        b.execute(ledger, createTransfers([transfer("b-spend", "w0", "w1", 60n)], now), ctx()),
      )
      expect(Result.isSuccess(spent)).toBe(true)
      // A, on its stale view (100): 80, then 30 pipelined on it (refused there: 20 left). The first
      // conflicts; decided again on what was committed (40), 80 is refused and 30 goes through.
      const [big, small] = await Promise.all([
        run(a.execute(ledger, createTransfers([transfer("a-big", "w0", "w1", 80n)], now), ctx())),
        run(a.execute(ledger, createTransfers([transfer("a-small", "w0", "w1", 30n)], now), ctx())),
      ])
      expect(Result.isFailure(big) && big.failure._tag).toBe("InsufficientFunds")
      expect(Result.isSuccess(small)).toBe(true)
      expect(available((await foldStream(ledgerStreamId(ledger))).state, "w0")).toBe(10n)
    },
  )

  it("group commit across ledgers: one transaction carries the batches of many ledgers, each hook sees its commands", async () => {
    const pg_store = makePostgresEventStore(db.pool)
    const transactions: Array<ReadonlyArray<string>> = []
    const writer = makeLedgerWriter(pg_store, {
      transaction: {
        appendStreams: pg_store.appendStreamsInTransaction,
        hook: async (client, appended) => {
          transactions.push(appended.map((c) => c.ledger.tenant))
          for (const command of appended) {
            const attachment = command.context.attachment as { note: string } | undefined
            if (attachment !== undefined)
              await client.query("insert into writer_notes (note, version) values ($1, $2)", [
                attachment.note,
                command.events.at(-1)?.stream_version,
              ])
          }
        },
      },
    })
    await db.pool.query("create table writer_notes (note text primary key, version bigint not null)")
    const ledgers = Array.from({ length: 6 }, () => newLedger())
    for (const ledger of ledgers) await setup(writer, ledger, 2, 1_000n)
    transactions.length = 0
    const results = await Promise.all(
      Array.from({ length: 300 }, (_, i) => {
        const ledger = ledgers[i % ledgers.length] as (typeof ledgers)[number]
        return run(
          writer.execute(
            ledger,
            createTransfers([transfer(`g${i}`, `w${i % 2}`, `w${(i + 1) % 2}`, 1n)], 1_700_000_002_000),
            { ...ctx(), attachment: { note: `g${i}` } },
          ),
        )
      }),
    )
    expect(results.every(Result.isSuccess)).toBe(true)
    // Far fewer transactions than ledger batches, and most carry several ledgers.
    expect(transactions.length).toBeLessThan(60)
    expect(transactions.filter((tenants) => new Set(tenants).size > 1).length).toBeGreaterThan(0)
    // Each note was written with the events of its own command, in the same transaction.
    const notes = await db.pool.query<{ note: string; version: string }>(
      "select note, version::text from writer_notes",
    )
    expect(notes.rows).toHaveLength(300)
    for (const [i, result] of results.entries()) {
      if (!Result.isSuccess(result)) continue
      const note = notes.rows.find((row) => row.note === `g${i}`)
      expect(Number(note?.version)).toBe(result.success.stream_version)
    }
    const shared = await db.pool.query<{ streams: string }>(
      `select max(n)::text as streams from (select count(distinct stream_id) as n from events
        where stream_id = any($1::text[]) group by transaction_id) t`,
      [ledgers.map(ledgerStreamId)],
    )
    expect(Number(shared.rows[0]?.streams)).toBeGreaterThan(1)
    for (const ledger of ledgers) {
      const { versions } = await foldStream(ledgerStreamId(ledger))
      expect(versions).toEqual(versions.map((_, i) => i + 1))
    }
  })

  it("group commit: a command whose stored response's key another request holds fails alone, pipelined; the rest of its batch is written", async () => {
    const pg_store = makePostgresEventStore(db.pool)
    const ledger = newLedger()
    let batched_with_taken = 0
    const writer = makeLedgerWriter(pg_store, {
      transaction: {
        appendStreams: pg_store.appendStreamsInTransaction,
        // As the platform's hook: the responses insert, then more statements, all sent at once.
        hook: (client, appended) => {
          const rows = appended.flatMap((c) =>
            c.context.attachment === undefined ? [] : [c.context.attachment],
          )
          if (rows.some((row) => (row as StoredResponse).idempotency_key === "taken"))
            batched_with_taken = Math.max(batched_with_taken, rows.length)
          return sentAll([storeResponses(client, rows as Array<StoredResponse>), client.query("select 1")])
        },
        commits_in_flight_max: 1,
      },
    })
    await setup(writer, ledger, 2, 1_000n)
    const stored = (idempotency_key: string): StoredResponse => ({
      tenant_id: ledger.tenant,
      environment: ledger.environment,
      idempotency_key,
      fingerprint: "this request",
      response_status: 200,
      response_body: { idempotency_key },
    })
    await db.pool.query(
      `insert into platform.idempotency_keys
         (tenant_id, environment, idempotency_key, fingerprint, response_status, response_body)
       values ($1, $2, 'taken', 'another request', 201, '{}')`,
      [ledger.tenant, ledger.environment],
    )
    const keys = ["k0", "k1", "taken", "k3", "k4"]
    const outcomes = await Promise.all(
      keys.map((key, i) =>
        Effect.runPromiseExit(
          writer.execute(ledger, createTransfers([transfer(`s${i}`, "w0", "w1", 1n)], 1_700_000_004_000), {
            ...ctx(),
            attachment: stored(key),
          }),
        ),
      ),
    )
    expect(outcomes.map((exit) => exit._tag)).toEqual(["Success", "Success", "Failure", "Success", "Success"])
    const taken = outcomes[2]
    expect(taken?._tag === "Failure" && Cause.hasDies(taken.cause)).toBe(true)
    expect(taken?._tag === "Failure" && String(Cause.squash(taken.cause))).toContain(
      "taken by another request",
    )
    // It shared a batch with others, which were written again without it.
    expect(batched_with_taken).toBeGreaterThan(1)
    const { state } = await foldStream(ledgerStreamId(ledger))
    expect([...state.transfers.keys()].filter((id) => String(id).startsWith("s")).sort()).toEqual([
      "s0",
      "s1",
      "s3",
      "s4",
    ])
    const rows = await db.pool.query<{ idempotency_key: string; fingerprint: string }>(
      "select idempotency_key, fingerprint from platform.idempotency_keys where tenant_id = $1 order by idempotency_key",
      [ledger.tenant],
    )
    expect(rows.rows).toEqual([
      { idempotency_key: "k0", fingerprint: "this request" },
      { idempotency_key: "k1", fingerprint: "this request" },
      { idempotency_key: "k3", fingerprint: "this request" },
      { idempotency_key: "k4", fingerprint: "this request" },
      { idempotency_key: "taken", fingerprint: "another request" },
    ])
  })

  it.each(["direct appends", "group commit"])(
    "%s: more reservations lapsing together than one append can hold are expired in bounded commands, and the ledger goes on",
    async (path) => {
      const ledger = newLedger()
      const pg_store = makePostgresEventStore(db.pool)
      const hooked: Array<number> = []
      const writer = makeLedgerWriter(pg_store, {
        ...(path === "group commit"
          ? {
              transaction: {
                appendStreams: pg_store.appendStreamsInTransaction,
                hook: async (
                  _client: unknown,
                  appended: ReadonlyArray<{ events: ReadonlyArray<unknown> }>,
                ) => {
                  for (const command of appended) hooked.push(command.events.length)
                },
              },
            }
          : {}),
      })
      const reservations = 10_050
      await setup(writer, ledger, 2, BigInt(reservations))
      const now = 1_700_000_003_000
      await reserveBurst(writer, ledger, reservations, now)
      const before = (await foldStream(ledgerStreamId(ledger))).versions.length
      // From here on, the hook sees the expiries' commands and the payments only.
      hooked.splice(0)
      // A payment after the expiry: every reservation lapses first, more than one append holds.
      const pay = await run(
        writer.execute(ledger, createTransfers([transfer("after", "w0", "w1", 10n)], now + 2_000), ctx()),
      )
      if (!Result.isSuccess(pay)) throw new Error(`the payment failed: ${pay.failure._tag}`)
      const { state, versions } = await foldStream(ledgerStreamId(ledger))
      expect(versions).toEqual(versions.map((_, i) => i + 1))
      expect(versions.length - before).toBe(reservations + 1)
      expect(available(state, "w0")).toBe(BigInt(reservations) - 10n)
      expect(state.expiries).toBeNull()
      // The payment's own answer carries its transfer and at most one command's worth of expiries.
      expect(pay.success.events.at(-1)?.event_type).toBe("TransferCreated")
      expect(pay.success.events.length).toBeLessThanOrEqual(1_001)
      // The ledger takes the next command as usual.
      const next = await run(
        writer.execute(ledger, createTransfers([transfer("next", "w1", "w0", 1n)], now + 3_000), ctx()),
      )
      expect(Result.isSuccess(next)).toBe(true)
      if (path === "group commit") {
        // Every reservation's expiry reached the hook (a transaction rolled back and tried again
        // shows its commands twice), in commands of at most 1,000 (the payment's own command
        // carries its transfer besides).
        expect(hooked.reduce((sum, events) => sum + events, 0)).toBeGreaterThanOrEqual(reservations + 2)
        expect(Math.max(...hooked)).toBeLessThanOrEqual(1_001)
      }
    },
    60_000,
  )

  it("a backlog of expiries that cannot commit fails the commands behind it after bounded tries, and the ledger recovers", async () => {
    const ledger = newLedger()
    const pg_store = makePostgresEventStore(db.pool)
    let failing = false
    const writer = makeLedgerWriter(pg_store, {
      transaction: {
        appendStreams: pg_store.appendStreamsInTransaction,
        hook: async (_client, appended) => {
          if (
            failing &&
            appended.some((c) => c.events.some((e) => e.event_type === "PendingTransferExpired"))
          )
            throw new Error("releasing the lapsed payments failed")
        },
      },
    })
    const reservations = 10_050
    await setup(writer, ledger, 2, BigInt(reservations) + 10n)
    const now = 1_700_000_003_500
    await reserveBurst(writer, ledger, reservations, now)
    // More than a batch of the writer's own expiries is due, and they cannot commit.
    failing = true
    const outcome = await Promise.race([
      Effect.runPromiseExit(
        writer.execute(ledger, createTransfers([transfer("after", "w0", "w1", 1n)], now + 5_000), ctx()),
      ).then((exit) => (Exit.isFailure(exit) ? String(Cause.squash(exit.cause)) : "succeeded")),
      new Promise<string>((resolve) => setTimeout(() => resolve("still waiting after 30 s"), 30_000)),
    ])
    expect(outcome).toMatch(/releasing the lapsed payments failed/)
    failing = false
    const next = await run(
      writer.execute(ledger, createTransfers([transfer("after", "w0", "w1", 1n)], now + 6_000), ctx()),
    )
    expect(Result.isSuccess(next)).toBe(true)
    const { state } = await foldStream(ledgerStreamId(ledger))
    expect(state.expiries).toBeNull()
  }, 90_000)

  it("group commit: a hook failing for one command fails only that command; its ledger's other commands and the other ledgers commit", async () => {
    const pg_store = makePostgresEventStore(db.pool)
    let shared_with_poison = 0
    let batched_with_poison = 0
    const writer = makeLedgerWriter(pg_store, {
      transaction: {
        appendStreams: pg_store.appendStreamsInTransaction,
        hook: async (_client, appended) => {
          if (appended.some((c) => c.context.attachment === "poison")) {
            shared_with_poison = Math.max(
              shared_with_poison,
              new Set(appended.map((c) => c.ledger.tenant)).size,
            )
            const poisoned_tenant = appended.find((c) => c.context.attachment === "poison")?.ledger.tenant
            batched_with_poison = Math.max(
              batched_with_poison,
              appended.filter((c) => c.ledger.tenant === poisoned_tenant).length,
            )
            throw new Error("poisoned hook")
          }
        },
        // One transaction at a time: the first ledger's batch commits alone, the rest share the next.
        commits_in_flight_max: 1,
      },
    })
    const ledgers = Array.from({ length: 4 }, () => newLedger())
    for (const ledger of ledgers) await setup(writer, ledger, 2, 1_000n)
    const outcomes = await Promise.all(
      Array.from({ length: 40 }, (_, i) => {
        const ledger = ledgers[i % ledgers.length] as (typeof ledgers)[number]
        const poison = i === 17
        return Effect.runPromiseExit(
          writer.execute(ledger, createTransfers([transfer(`p${i}`, "w0", "w1", 1n)], 1_700_000_003_000), {
            ...ctx(),
            attachment: poison ? "poison" : undefined,
          }),
        )
      }),
    )
    const poisoned = ledgers[17 % ledgers.length] as (typeof ledgers)[number]
    const failed = outcomes.flatMap((exit, i) => (exit._tag === "Failure" ? [i] : []))
    // The poisoned command died alone, though it shared a transaction with other ledgers and a
    // batch with commands of its own ledger: those were tried again without it.
    expect(failed).toEqual([17])
    expect(shared_with_poison).toBeGreaterThan(1)
    expect(batched_with_poison).toBeGreaterThan(1)
    const poison_exit = outcomes[17]
    expect(poison_exit?._tag === "Failure" && String(poison_exit.cause)).toContain("poisoned hook")
    for (const ledger of ledgers) {
      const { state, versions } = await foldStream(ledgerStreamId(ledger))
      expect(versions).toEqual(versions.map((_, i) => i + 1))
      const recorded = [...state.transfers.keys()].filter((id) => String(id).startsWith("p"))
      const acknowledged = outcomes.flatMap((exit, i) =>
        exit._tag === "Success" && ledgers[i % ledgers.length] === ledger ? [`p${i}`] : [],
      )
      expect(recorded.sort()).toEqual(acknowledged.sort())
    }
    // The writer goes on after the failure: the poisoned ledger takes new commands.
    const after = await run(
      writer.execute(
        poisoned,
        createTransfers([transfer("p-after", "w0", "w1", 1n)], 1_700_000_003_001),
        ctx(),
      ),
    )
    expect(Result.isSuccess(after)).toBe(true)
  })

  it.each(["group commit"])(
    "%s: a command committed whose answer was lost, under a pipelined batch that committed, keeps its key: its retry is a replay, not a second payment",
    async (path) => {
      const ledger = newLedger()
      const pg_store = makePostgresEventStore(db.pool)
      let lose_answer = false
      /** The append commits, then the connection drops before its answer arrives. */
      const answerLost = <A, E>(append: Effect.Effect<A, E>) =>
        append.pipe(
          Effect.flatMap(() => Effect.promise(() => new Promise((resolve) => setTimeout(resolve, 50)))),
          Effect.flatMap(() => Effect.die(new Error("connection terminated after COMMIT"))),
        )
      const flaky: EventStore["Service"] = {
        ...pg_store,
        append: (stream_id, expected, events, options) => {
          const append = pg_store.append(stream_id, expected, events, options)
          if (!lose_answer) return append
          lose_answer = false
          return answerLost(append)
        },
      }
      const writer = makeLedgerWriter(flaky, {
        batch_commands_max: 1,
        pipeline_depth: 2,
        ...(path === "group commit"
          ? {
              transaction: {
                appendStreams: (appends, work) => {
                  const append = pg_store.appendStreamsInTransaction(appends, work)
                  if (!lose_answer) return append
                  lose_answer = false
                  return answerLost(append)
                },
                hook: async () => {},
              },
            }
          : {}),
      })
      await setup(writer, ledger, 2, 200n)
      const keyed = (idempotency_key: string) => ({
        ...ctx(idempotency_key),
        fingerprint: "the request's body",
      })
      // As the API does, each attempt of a request makes its transfer's id anew.
      const pay = (attempt: number, key: string, from = "w0", to = "w1") =>
        Effect.runPromise(
          Effect.exit(
            writer.execute(
              ledger,
              createTransfers([transfer(`pay-${key}-${attempt}`, from, to, 60n)], 1_700_000_005_000),
              keyed(key),
            ),
          ),
        )
      lose_answer = true
      const [lost, chained] = await Promise.all([pay(1, "K"), pay(1, "L", "world", "w0")])
      // The caller of the first saw a defect (it may have committed): it retries with its key.
      expect(Exit.isFailure(lost)).toBe(true)
      expect(Exit.isSuccess(chained)).toBe(true)
      const retry = await pay(2, "K")
      if (!Exit.isSuccess(retry)) throw new Error(`the retry failed: ${String(retry.cause)}`)
      expect(retry.value.replayed).toBe(true)
      const { state } = await foldStream(ledgerStreamId(ledger))
      expect([...state.transfers.keys()].filter((id) => String(id).startsWith("pay-K")).sort()).toEqual([
        "pay-K-1",
      ])
      // w0 paid 60 once and was paid 60 back.
      expect(available(state, "w0")).toBe(200n)
    },
  )

  it.each([2, 4])(
    "holds in full only the records that can still change: final ones are compacted, and a retry of one is still exact (%i batches in flight)",
    async (pipeline_depth) => {
      const ledger = newLedger()
      const writer = makeLedgerWriter(store, { pipeline_depth })
      // A second writer on the same ledger makes the first one lose races, reload and compact anew.
      const other = makeLedgerWriter(makePostgresEventStore(db.pool))
      await setup(writer, ledger, 2, 1_000_000n)
      const count = finalRecordCountMax * 3
      const results = await Promise.all(
        Array.from({ length: count }, (_, i) =>
          run(
            (i % 3 === 0 ? other : writer).execute(
              ledger,
              createTransfers(
                [transfer(`k${i}`, `w${i % 2}`, `w${(i + 1) % 2}`, 1n + BigInt(i % 5))],
                1_700_000_004_000,
              ),
              ctx(),
            ),
          ),
        ),
      )
      expect(results.every(Result.isSuccess)).toBe(true)
      // A reservation stays in full however many final records pass it.
      const reserve = createTransfers(
        [transfer("held", "w0", "w1", 7n, { pending: { timeout_ms: 0 } })],
        1_700_000_004_001,
      )
      expect(Result.isSuccess(await run(writer.execute(ledger, reserve, ctx())))).toBe(true)
      const check = async (view: LedgerWriterService) => {
        const { state, version } = await Effect.runPromise(view.snapshot(ledger))
        expect(state.transfers.size).toBeLessThan(finalRecordCountMax + 1)
        expect(state.transfers.get("held")).toMatchObject({ kind: "pending", status: "pending" })
        expect(state.compacted_count).toBeGreaterThan(count - finalRecordCountMax)
        expect(hasTransfer(state, "k0")).toBe(true)
        // The first transfer is compacted by now: its exact retry records nothing, a clash is refused.
        expect(state.transfers.has("k0")).toBe(false)
        const retry = await run(
          view.execute(ledger, createTransfers([transfer("k0", "w0", "w1", 1n)], 1_700_000_004_002), ctx()),
        )
        if (!Result.isSuccess(retry)) throw new Error(`the retry failed: ${retry.failure._tag}`)
        expect(retry.success.events).toEqual([])
        const clash = await run(
          view.execute(ledger, createTransfers([transfer("k0", "w0", "w1", 2n)], 1_700_000_004_002), ctx()),
        )
        expect(Result.isFailure(clash) && clash.failure._tag).toBe("TransferIdAlreadyUsed")
        expect((await Effect.runPromise(view.snapshot(ledger))).version).toBe(version)
      }
      await check(writer)
      // A writer that loads the ledger from its events (a restart) compacts as it loads.
      await check(makeLedgerWriter(store))
    },
  )
})
