// The contract every event-store adapter passes: appends are atomic and versioned, reads are
// ordered, streams are hash-chained, and a subscriber sees every event exactly once, each stream in
// version order, even with concurrent writers, late commits and a restart from a checkpoint.
import { randomUUID } from "node:crypto"
import { Effect, Exit, Result } from "effect"
import { afterEach, beforeEach, describe, expect, it } from "vitest"
import { eventHash, GENESIS_HASH } from "../../adapters/eventstore/hash.ts"
import {
  type AppendResult,
  type Checkpoint,
  checkpointStart,
  type EventStore,
  type ExpectedVersion,
  type NewEvent,
  type RecordedEvent,
  type SubscriptionBatch,
  WrongExpectedVersion,
} from "../../src/ports/event-store.ts"

type Store = EventStore["Service"]

export interface HeldAppend {
  /** The append's result, known while its transaction is still open. */
  readonly appended: AppendResult
  /** Settles once the transaction has committed (after `hold` resolved). */
  readonly committed: Promise<void>
}

export interface ContractSubject {
  readonly store: Store
  /** Another store instance on the same storage, as a restarted process would open it. */
  readonly reopen: () => Promise<Store>
  /**
   * Appends (expected version "any") in a transaction that stays open until `hold` resolves: the
   * events have their positions but nobody sees them yet. Adapters without transactions omit it.
   */
  readonly appendHeldOpen?: (
    stream_id: string,
    events: ReadonlyArray<NewEvent>,
    hold: Promise<void>,
  ) => Promise<HeldAppend>
  /** Releases what the subject holds: stores, connections, storage. */
  readonly dispose: () => Promise<void>
}

export interface EventStoreHarness {
  /** A fresh, empty store for one test. */
  readonly create: () => Promise<ContractSubject>
}

// --- Helpers ----------------------------------------------------------------------------------

export const run = <A, E>(effect: Effect.Effect<A, E>): Promise<A> => Effect.runPromise(effect)

/** The typed error of an effect that must fail; rejects if it succeeds. */
export const failureOf = <A, E>(effect: Effect.Effect<A, E>): Promise<E> =>
  Effect.runPromise(Effect.flip(effect))

export const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms))

export const newEvent = (label: string, data: Readonly<Record<string, unknown>> = {}): NewEvent => ({
  event_id: randomUUID(),
  event_type: "ThingHappened",
  schema_version: 1,
  data: { label, ...data },
  metadata: {
    tenant: "t1",
    environment: "sandbox",
    actor: "contract",
    correlation_id: `correlation-${label}`,
    causation_id: null,
    idempotency_key: null,
  },
})

export const newEvents = (prefix: string, count: number): ReadonlyArray<NewEvent> =>
  Array.from({ length: count }, (_, index) => newEvent(`${prefix}-${index + 1}`))

/** A small deterministic generator, so that a failing run can be repeated. */
const randomInts = (seed: number) => {
  let state = seed >>> 0
  return (below: number): number => {
    state = (Math.imul(state, 1_664_525) + 1_013_904_223) >>> 0
    return state % below
  }
}

const versionsOf = (events: ReadonlyArray<RecordedEvent>) => events.map((event) => event.stream_version)
const idsOf = (events: ReadonlyArray<{ readonly event_id: string }>) => events.map((event) => event.event_id)

/**
 * Loops `readSubscriptionBatch` / `waitForEvents` like a real subscriber until `done` says so,
 * within `deadline_ms`.
 */
const subscribe = async (
  store: Store,
  options: {
    readonly from: Checkpoint
    readonly batch_count_max: number
    readonly done: (received: ReadonlyArray<RecordedEvent>) => boolean
    readonly deadline_ms: number
  },
): Promise<{ readonly received: ReadonlyArray<RecordedEvent>; readonly checkpoint: Checkpoint }> => {
  const received: RecordedEvent[] = []
  const deadline = Date.now() + options.deadline_ms
  let checkpoint = options.from
  for (;;) {
    const batch = await run(store.readSubscriptionBatch(checkpoint, options.batch_count_max))
    expect(batch.events.length).toBeLessThanOrEqual(options.batch_count_max)
    received.push(...batch.events)
    checkpoint = batch.checkpoint
    if (options.done(received)) return { received, checkpoint }
    if (Date.now() > deadline) throw new Error(`subscriber timed out after ${received.length} events`)
    if (batch.events.length === 0) await run(store.waitForEvents(50))
  }
}

/** Every event once, and each stream's events in version order from version 1, without a gap. */
const expectExactlyOnceInStreamOrder = (
  received: ReadonlyArray<RecordedEvent>,
  all: ReadonlyArray<RecordedEvent>,
): void => {
  expect(new Set(idsOf(received)).size).toBe(received.length)
  expect([...idsOf(received)].sort()).toEqual([...idsOf(all)].sort())
  const versions = new Map<string, number>()
  for (const event of received) {
    expect(event.stream_version, `${event.stream_id} out of order`).toBe(
      (versions.get(event.stream_id) ?? 0) + 1,
    )
    versions.set(event.stream_id, event.stream_version)
  }
}

// --- The contract -----------------------------------------------------------------------------

export const eventStoreContract = (name: string, harness: EventStoreHarness): void => {
  describe(`event store contract: ${name}`, () => {
    let subject: ContractSubject
    let store: Store
    beforeEach(async () => {
      subject = await harness.create()
      store = subject.store
    })
    afterEach(async () => {
      await subject.dispose()
    })

    appendAndReadCases(() => store)
    expectedVersionCases(() => store)
    concurrencyCases(() => store)
    hashChainCases(() => store)
    subscriptionCases(() => subject)
  })
}

const appendAndReadCases = (current: () => Store) => {
  it("reads back what it appended: data, metadata, versions, positions and recorded_at", async () => {
    const store = current()
    const input: ReadonlyArray<NewEvent> = [
      newEvent("first", {
        amount: "1000000000000000000000",
        nested: { list: [1, 2.5, null, true], empty: {} },
      }),
      newEvent("second", { text: 'quotes " \\ \n tabs \t unicode ünï 😀', zero: 0, negative: -12 }),
      {
        ...newEvent("third"),
        event_type: "OtherThingHappened",
        schema_version: 2,
        metadata: {
          ...newEvent("third").metadata,
          causation_id: "cause-1",
          idempotency_key: "key-1",
          fingerprint: { command: "transfer", hash: "ab" },
        },
      },
    ]
    const before = Date.now()
    const result = await run(store.append("round-trip", "no_stream", input))
    const after = Date.now()
    const read = await run(store.readStream("round-trip"))

    expect(read).toEqual(result.events)
    expect(result.next_expected_version).toBe(3)
    expect(result.last_position).toBe(read[2]?.global_position)
    read.forEach((event, index) => {
      const sent = input[index]
      expect(event).toMatchObject({ stream_id: "round-trip", stream_version: index + 1 })
      expect(event.event_id).toBe(sent?.event_id)
      expect(event.event_type).toBe(sent?.event_type)
      expect(event.schema_version).toBe(sent?.schema_version)
      expect(event.data).toEqual(sent?.data)
      expect(event.metadata).toEqual(sent?.metadata)
      expect(event.recorded_at).toMatch(/^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/)
      expect(Date.parse(event.recorded_at)).toBeGreaterThanOrEqual(before - 5_000)
      expect(Date.parse(event.recorded_at)).toBeLessThanOrEqual(after + 5_000)
      expect(event.global_position).toBeGreaterThan(
        index === 0 ? 0n : (read[index - 1]?.global_position ?? 0n),
      )
    })
  })

  it("numbers versions 1..n across appends; an unknown stream reads as empty at version 0", async () => {
    const store = current()
    await run(store.append("counted", "no_stream", newEvents("a", 2)))
    await run(store.append("counted", 2, newEvents("b", 3)))
    const last = await run(store.append("counted", "any", newEvents("c", 1)))
    expect(last.next_expected_version).toBe(6)
    expect(versionsOf(await run(store.readStream("counted")))).toEqual([1, 2, 3, 4, 5, 6])
    expect(await run(store.streamVersion("counted"))).toBe(6)
    expect(await run(store.readStream("never-written"))).toEqual([])
    expect(await run(store.streamVersion("never-written"))).toBe(0)
  })

  it.each([
    { name: "forwards from the start", options: {}, versions: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10] },
    { name: "forwards from a version", options: { from_version: 4 }, versions: [4, 5, 6, 7, 8, 9, 10] },
    { name: "forwards, limited", options: { from_version: 4, max_count: 3 }, versions: [4, 5, 6] },
    { name: "forwards past the end", options: { from_version: 11 }, versions: [] },
    { name: "no events asked for", options: { max_count: 0 }, versions: [] },
    {
      name: "backwards from the end",
      options: { direction: "backwards" },
      versions: [10, 9, 8, 7, 6, 5, 4, 3, 2, 1],
    },
    {
      name: "backwards from a version",
      options: { direction: "backwards", from_version: 4 },
      versions: [4, 3, 2, 1],
    },
    { name: "backwards, limited", options: { direction: "backwards", max_count: 2 }, versions: [10, 9] },
    {
      name: "backwards from a version, limited",
      options: { direction: "backwards", from_version: 7, max_count: 3 },
      versions: [7, 6, 5],
    },
    {
      name: "backwards from past the end",
      options: { direction: "backwards", from_version: 20 },
      versions: [10, 9, 8, 7, 6, 5, 4, 3, 2, 1],
    },
  ] as const)("readStream $name", async ({ options, versions }) => {
    const store = current()
    await run(store.append("paged", "no_stream", newEvents("paged", 10)))
    expect(versionsOf(await run(store.readStream("paged", options)))).toEqual(versions)
  })

  it("readAll returns every stream's events in global position order, and pages without overlap", async () => {
    const store = current()
    for (let round = 0; round < 3; round += 1) {
      for (const stream_id of ["x", "y", "z"])
        await run(store.append(stream_id, "any", newEvents(`${stream_id}${round}`, 2)))
    }
    const all = await run(store.readAll())
    expect(all).toHaveLength(18)
    all.forEach((event, index) => {
      if (index > 0) expect(event.global_position).toBeGreaterThan(all[index - 1]?.global_position ?? 0n)
    })
    const paged: RecordedEvent[] = []
    let after_position = 0n
    for (let page = 0; page < 10; page += 1) {
      const next = await run(store.readAll({ after_position, max_count: 5 }))
      if (next.length === 0) break
      expect(next.length).toBeLessThanOrEqual(5)
      paged.push(...next)
      after_position = next.at(-1)?.global_position ?? after_position
    }
    expect(paged).toEqual(all)
  })
}

type ExpectedCase = {
  readonly name: string
  readonly existing: number
  readonly expected: ExpectedVersion
  /** `ok`, or the actual version reported by `WrongExpectedVersion`. */
  readonly outcome: "ok" | number
}

const expectedVersionTable: ReadonlyArray<ExpectedCase> = [
  { name: '"any" on a new stream', existing: 0, expected: "any", outcome: "ok" },
  { name: '"any" on a stream with events', existing: 2, expected: "any", outcome: "ok" },
  { name: '"no_stream" on a new stream', existing: 0, expected: "no_stream", outcome: "ok" },
  { name: '"no_stream" on a stream with events', existing: 2, expected: "no_stream", outcome: 2 },
  { name: "the exact version", existing: 2, expected: 2, outcome: "ok" },
  { name: "0 on a new stream", existing: 0, expected: 0, outcome: "ok" },
  { name: "a version too low", existing: 2, expected: 1, outcome: 2 },
  { name: "a version too high", existing: 2, expected: 3, outcome: 2 },
  { name: "a version on a new stream", existing: 0, expected: 5, outcome: 0 },
  { name: "0 on a stream with events", existing: 2, expected: 0, outcome: 2 },
]

const expectedVersionCases = (current: () => Store) => {
  it.each(expectedVersionTable)("expected version: $name", async ({ existing, expected, outcome }) => {
    const store = current()
    if (existing > 0) await run(store.append("checked", "no_stream", newEvents("existing", existing)))
    const attempt = store.append("checked", expected, newEvents("attempt", 2))
    if (outcome === "ok") {
      expect((await run(attempt)).next_expected_version).toBe(existing + 2)
      return
    }
    const error = await failureOf(attempt)
    expect(error).toBeInstanceOf(WrongExpectedVersion)
    expect(error).toMatchObject({
      _tag: "WrongExpectedVersion",
      stream_id: "checked",
      expected,
      actual: outcome,
    })
    expect(await run(store.streamVersion("checked"))).toBe(existing)
    expect(await run(store.readStream("checked"))).toHaveLength(existing)
    expect(await run(store.readAll())).toHaveLength(existing)
  })

  it("an empty append writes nothing but still checks the expected version", async () => {
    const store = current()
    const nothing = await run(store.append("empty", "no_stream", []))
    expect(nothing).toEqual({ next_expected_version: 0, last_position: 0n, events: [] })
    expect(await run(store.streamVersion("empty"))).toBe(0)
    const written = await run(store.append("empty", 0, newEvents("e", 2)))
    expect(await run(store.append("empty", 2, []))).toEqual({
      next_expected_version: 2,
      last_position: written.last_position,
      events: [],
    })
    expect(await failureOf(store.append("empty", 1, []))).toMatchObject({ actual: 2 })
    expect(await failureOf(store.append("empty", "no_stream", []))).toMatchObject({ actual: 2 })
    expect(await run(store.readAll())).toHaveLength(2)
  })

  it("an append is all or nothing: a batch with a duplicate event id writes none of its events", async () => {
    const store = current()
    const first = await run(store.append("atomic", "no_stream", newEvents("first", 1)))
    const fresh = newEvent("fresh")
    const withinBatch = await Effect.runPromiseExit(store.append("atomic", 1, [fresh, newEvent("x"), fresh]))
    expect(Exit.isFailure(withinBatch)).toBe(true)
    const reused = { ...newEvent("reused"), event_id: first.events[0]?.event_id ?? "" }
    const acrossStreams = await Effect.runPromiseExit(store.append("other", "any", [newEvent("y"), reused]))
    expect(Exit.isFailure(acrossStreams)).toBe(true)
    expect(await run(store.streamVersion("atomic"))).toBe(1)
    expect(await run(store.streamVersion("other"))).toBe(0)
    expect(idsOf(await run(store.readAll()))).toEqual(idsOf(first.events))
    // The stream is still usable at the version the failed appends left it.
    expect((await run(store.append("atomic", 1, [fresh]))).next_expected_version).toBe(2)
  })
}

const concurrencyCases = (current: () => Store) => {
  it("concurrent appenders expecting the same version: exactly one wins each version", async () => {
    const store = current()
    const contender_count = 6
    const winners: NewEvent[] = []
    let version = 0
    for (let round = 0; round < 5; round += 1) {
      const batches = Array.from({ length: contender_count }, (_, c) =>
        newEvents(`r${round}c${c}`, 1 + (c % 3)),
      )
      const outcomes = await Promise.all(
        batches.map((batch) => run(Effect.result(store.append("contended", version, batch)))),
      )
      const won = outcomes.flatMap((outcome, index) => (Result.isSuccess(outcome) ? [index] : []))
      expect(won).toHaveLength(1)
      const winner = batches[won[0] ?? -1] ?? []
      winners.push(...winner)
      version += winner.length
      for (const outcome of outcomes) {
        if (Result.isFailure(outcome))
          expect(outcome.failure).toMatchObject({ expected: version - winner.length, actual: version })
      }
    }
    const read = await run(store.readStream("contended"))
    expect(versionsOf(read)).toEqual(Array.from({ length: version }, (_, index) => index + 1))
    expect(idsOf(read)).toEqual(idsOf(winners))
  })
}

const hashChainCases = (current: () => Store) => {
  it("chains each stream's hashes: prev_hash links, and each hash recomputes", async () => {
    const store = current()
    const appended: RecordedEvent[] = []
    for (const [stream_id, count] of [
      ["chain-a", 1],
      ["chain-b", 2],
      ["chain-a", 3],
      ["chain-b", 1],
      ["chain-a", 2],
    ] as const) {
      appended.push(...(await run(store.append(stream_id, "any", newEvents(stream_id, count)))).events)
    }
    for (const stream_id of ["chain-a", "chain-b"]) {
      const read = await run(store.readStream(stream_id))
      expect(read).toEqual(appended.filter((event) => event.stream_id === stream_id))
      read.forEach((event, index) => {
        expect(event.hash).toMatch(/^[0-9a-f]{64}$/)
        expect(event.prev_hash).toBe(index === 0 ? GENESIS_HASH : read[index - 1]?.hash)
        expect(eventHash(event.prev_hash, event)).toBe(event.hash)
      })
    }
    expect(new Set(appended.map((event) => event.hash)).size).toBe(appended.length)
  })
}

const subscriptionCases = (current: () => ContractSubject) => {
  it("waitForEvents wakes on an append, and otherwise returns after its timeout", async () => {
    const { store } = current()
    const started = Date.now()
    await run(store.waitForEvents(60))
    expect(Date.now() - started).toBeGreaterThanOrEqual(50)
    const woken = run(store.waitForEvents(30_000)).then(() => Date.now())
    await sleep(100)
    const appended_at = Date.now()
    await run(store.append("wake", "any", newEvents("wake", 1)))
    expect((await woken) - appended_at).toBeLessThan(10_000)
  })

  it("a subscriber catches up, then follows concurrent writers: each event once, streams in order", async () => {
    const { store } = current()
    for (const stream_id of ["s1", "s2", "s3"])
      await run(store.append(stream_id, "no_stream", newEvents(stream_id, 10)))
    let total: number | undefined
    const subscriber = subscribe(store, {
      from: checkpointStart,
      batch_count_max: 7,
      done: (received) => total !== undefined && received.length >= total,
      deadline_ms: 20_000,
    })
    await Promise.all(
      ["s1", "s2", "s3", "s4"].map(async (stream_id) => {
        for (let round = 0; round < 8; round += 1)
          await run(store.append(stream_id, "any", newEvents(stream_id, 1 + (round % 3))))
      }),
    )
    const all = await run(store.readAll())
    total = all.length
    expectExactlyOnceInStreamOrder((await subscriber).received, all)
  })

  it("a late commit is delivered, not skipped, even after later positions were delivered", async (context) => {
    const { store, appendHeldOpen } = current()
    if (appendHeldOpen === undefined) return context.skip()
    let release = () => {}
    const held = await appendHeldOpen(
      "late",
      newEvents("late", 2),
      new Promise<void>((resolve) => (release = resolve)),
    )
    let before: SubscriptionBatch
    try {
      const later = await run(store.append("early", "no_stream", newEvents("early", 2)))
      expect(later.events[0]?.global_position).toBeGreaterThan(held.appended.last_position)
      before = await run(store.readSubscriptionBatch(checkpointStart, 100))
    } finally {
      release()
      await held.committed
    }
    const rest = await subscribe(store, {
      from: before.checkpoint,
      batch_count_max: 100,
      done: (received) => before.events.length + received.length >= 4,
      deadline_ms: 10_000,
    })
    expectExactlyOnceInStreamOrder([...before.events, ...rest.received], await run(store.readAll()))
  })

  it("concurrent writers with deliberately delayed commits: each event once, streams in order", async (context) => {
    const { store, appendHeldOpen } = current()
    if (appendHeldOpen === undefined) return context.skip()
    const random = randomInts(20_251_122)
    for (const stream_id of ["w0", "w1"])
      await run(store.append(stream_id, "no_stream", newEvents(stream_id, 5)))
    let total: number | undefined
    const subscriber = subscribe(store, {
      from: checkpointStart,
      batch_count_max: 5,
      done: (received) => total !== undefined && received.length >= total,
      deadline_ms: 30_000,
    })
    const ownStreamWriter = async (stream_id: string) => {
      for (let round = 0; round < 8; round += 1) {
        const batch = newEvents(`${stream_id}-${round}`, 1 + random(3))
        if (round % 3 === 1) await (await appendHeldOpen(stream_id, batch, sleep(5 + random(40)))).committed
        else await run(store.append(stream_id, "any", batch))
      }
    }
    /** Two of these share a stream and append with the exact version, retrying after a conflict. */
    const sharedStreamWriter = async (writer: string) => {
      for (let round = 0; round < 6; round += 1) {
        for (let attempt = 0; ; attempt += 1) {
          expect(attempt).toBeLessThan(50)
          const version = await run(store.streamVersion("shared"))
          const outcome = await run(
            Effect.result(store.append("shared", version, newEvents(`${writer}-${round}`, 2))),
          )
          if (Result.isSuccess(outcome)) break
        }
      }
    }
    await Promise.all([
      ...["w0", "w1", "w2", "w3"].map(ownStreamWriter),
      sharedStreamWriter("left"),
      sharedStreamWriter("right"),
    ])
    const all = await run(store.readAll())
    total = all.length
    expectExactlyOnceInStreamOrder((await subscriber).received, all)
    expect(await run(store.streamVersion("shared"))).toBe(24)
  })

  it("a subscriber restarted from a persisted checkpoint continues without gap or duplicate", async () => {
    const subject = current()
    for (const stream_id of ["r1", "r2"])
      await run(subject.store.append(stream_id, "no_stream", newEvents(stream_id, 10)))
    const first = await subscribe(subject.store, {
      from: checkpointStart,
      batch_count_max: 6,
      done: (received) => received.length >= 12,
      deadline_ms: 10_000,
    })
    expect(first.received).toHaveLength(12)
    const persisted = JSON.stringify({
      transaction_id: first.checkpoint.transaction_id,
      global_position: first.checkpoint.global_position.toString(),
    })
    for (const stream_id of ["r1", "r3"])
      await run(subject.store.append(stream_id, "any", newEvents(`${stream_id}-more`, 5)))

    const restarted = await subject.reopen()
    const parsed = JSON.parse(persisted) as { transaction_id: string; global_position: string }
    const resumed = await subscribe(restarted, {
      from: { transaction_id: parsed.transaction_id, global_position: BigInt(parsed.global_position) },
      batch_count_max: 6,
      // By count, not by "an empty batch": a writing transaction anywhere on the server may hold
      // events back for a moment, and that must not end the test early.
      done: (received) => received.length === 18,
      deadline_ms: 10_000,
    })
    expectExactlyOnceInStreamOrder([...first.received, ...resumed.received], await run(restarted.readAll()))
    const idle = await run(restarted.readSubscriptionBatch(resumed.checkpoint, 6))
    expect(idle).toEqual({ events: [], checkpoint: resumed.checkpoint })
  })
}
