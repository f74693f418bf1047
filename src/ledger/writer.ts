/**
 * The ledger writer: decides commands of one ledger against its in-memory state and appends their
 * events with the expected version.
 *
 * - Group commit: while one append of a ledger is in flight, further commands of that ledger queue
 *   up; the next append decides all of them in order and writes their events in ONE append, so
 *   throughput is not one database round trip per command.
 * - A caller is answered only after its events are durably committed (the append's COMMIT).
 * - Several processes may write the same ledger: a version conflict reloads the events written by
 *   the others and decides the batch again, a bounded number of times.
 * - Idempotency: a command whose idempotency key was already used in the ledger returns the original
 *   result and writes nothing; the same key with a different command is rejected.
 */
import { createHash } from "node:crypto"
import { Context, Data, Effect, Layer, Result } from "effect"
import type { LedgerCommand } from "../../domain/ledger/commands.ts"
import { decideAndEvolve, evolve, initialState, type LedgerError, type LedgerState } from "../../domain/ledger/index.ts"
import {
  type LedgerEvent,
  type LedgerId,
  ledgerEventSchemaVersion,
  ledgerStreamId,
} from "../../domain/ledger/events.ts"
import { uuidv7 } from "../ids.ts"
import {
  type EventMetadata,
  EventStore,
  type NewEvent,
  type RecordedEvent,
  WrongExpectedVersion,
} from "../ports/event-store.ts"

/** Who sends a command and why; the ledger (tenant, environment) comes from the writer call. */
export interface CommandContext {
  readonly actor: string
  readonly correlation_id: string
  readonly causation_id?: string | null
  readonly idempotency_key?: string | null
  /**
   * What makes two requests "the same" for idempotency. Defaults to a hash of the command without
   * its time; an API that generates ids per request passes a hash of the request body instead.
   */
  readonly fingerprint?: string
}

export interface CommandResult {
  /** The events the command recorded (pending transfers that lapsed first come first). */
  readonly events: ReadonlyArray<RecordedEvent>
  /** Stream version after the command; wait for projections to reach it for read-your-writes. */
  readonly stream_version: number
  /** True when this is the stored result of an earlier command with the same idempotency key. */
  readonly replayed: boolean
}

/** The idempotency key was used before for a different command. Nothing was written. */
export class IdempotencyKeyReused extends Data.TaggedError("IdempotencyKeyReused")<{
  readonly idempotency_key: string
}> {}

/** Other writers kept winning the race for this ledger; nothing of this command was written. */
export class ConcurrencyRetriesExhausted extends Data.TaggedError("ConcurrencyRetriesExhausted")<{
  readonly stream_id: string
  readonly attempts: number
}> {}

/** Too many commands are queued for this ledger; the caller should retry later. */
export class LedgerOverloaded extends Data.TaggedError("LedgerOverloaded")<{
  readonly stream_id: string
  readonly queued: number
}> {}

export type WriterError = LedgerError | IdempotencyKeyReused | ConcurrencyRetriesExhausted | LedgerOverloaded

export interface WriterOptions {
  /** Commands decided and appended together at most. */
  readonly batch_commands_max?: number
  /** Commands waiting per ledger at most before new ones are refused. */
  readonly queue_commands_max?: number
  /** Reload-and-retry rounds after version conflicts at most. */
  readonly conflict_retry_max?: number
  /** Events read per page when loading a ledger. */
  readonly load_page_events?: number
}

interface Waiter {
  readonly ledger: LedgerId
  readonly command: LedgerCommand
  readonly context: CommandContext
  readonly fingerprint: string
  readonly resolve: (result: Result.Result<CommandResult, WriterError>) => void
  readonly reject: (defect: unknown) => void
}

interface IdempotencyEntry {
  readonly fingerprint: string
  readonly events: ReadonlyArray<RecordedEvent>
  readonly stream_version: number
}

interface LedgerSlot {
  readonly stream_id: string
  state: LedgerState
  version: number
  readonly idempotency: Map<string, IdempotencyEntry>
  readonly queue: Array<Waiter>
  flushing: boolean
  loaded: boolean
  loading: Promise<void> | undefined
}

const bigintAsString = (_key: string, value: unknown): unknown =>
  typeof value === "bigint" ? value.toString() : value

/** Default idempotency fingerprint: the command minus its clock reading. */
export const commandFingerprint = (command: LedgerCommand): string => {
  const { now_ms: _ignored, ...rest } = command
  return createHash("sha256").update(JSON.stringify(rest, bigintAsString)).digest("hex")
}

const toNewEvent = (event: LedgerEvent, metadata: EventMetadata, now_ms: number): NewEvent => ({
  event_id: uuidv7(now_ms),
  event_type: event.type,
  schema_version: ledgerEventSchemaVersion,
  data: event.data as unknown as Readonly<Record<string, unknown>>,
  metadata,
})

const asLedgerEvent = (event: RecordedEvent): LedgerEvent =>
  ({ type: event.event_type, data: event.data }) as unknown as LedgerEvent

export interface LedgerWriterService {
  /** Decides and durably records one command; answers after COMMIT. */
  readonly execute: (
    ledger: LedgerId,
    command: LedgerCommand,
    context: CommandContext,
  ) => Effect.Effect<CommandResult, WriterError>
  /** The writer's view of a ledger (loading it if needed): state and stream version. */
  readonly snapshot: (ledger: LedgerId) => Effect.Effect<{ readonly state: LedgerState; readonly version: number }>
}

export const makeLedgerWriter = (
  store: EventStore["Service"],
  options: WriterOptions = {},
): LedgerWriterService => {
  const batch_commands_max = options.batch_commands_max ?? 1024
  const queue_commands_max = options.queue_commands_max ?? 20_000
  const conflict_retry_max = options.conflict_retry_max ?? 16
  const load_page_events = options.load_page_events ?? 10_000
  const slots = new Map<string, LedgerSlot>()

  const slotOf = (ledger: LedgerId): LedgerSlot => {
    const stream_id = ledgerStreamId(ledger)
    let slot = slots.get(stream_id)
    if (slot === undefined) {
      slot = {
        stream_id,
        state: initialState,
        version: 0,
        idempotency: new Map(),
        queue: [],
        flushing: false,
        loaded: false,
        loading: undefined,
      }
      slots.set(stream_id, slot)
    }
    return slot
  }

  /** Folds the events others (or we, before a restart) wrote after our version into the slot. */
  const catchUp = async (slot: LedgerSlot): Promise<void> => {
    // A key is written by one command only (a later use is a replay or a rejection, never written),
    // so the consecutive events carrying a key are that command's stored result. Its first event
    // also carries the command's fingerprint.
    let command: { key: string; fingerprint: string; events: Array<RecordedEvent> } | undefined
    const closeCommand = () => {
      if (command === undefined) return
      const last = command.events[command.events.length - 1]
      if (last !== undefined) {
        slot.idempotency.set(command.key, {
          fingerprint: command.fingerprint,
          events: command.events,
          stream_version: last.stream_version,
        })
      }
      command = undefined
    }
    for (;;) {
      const page = await Effect.runPromise(
        store.readStream(slot.stream_id, { from_version: slot.version + 1, max_count: load_page_events }),
      )
      for (const event of page) {
        if (event.stream_version !== slot.version + 1) {
          throw new Error(`ledger ${slot.stream_id}: expected version ${slot.version + 1}, read ${event.stream_version}`)
        }
        slot.state = evolve(slot.state, asLedgerEvent(event))
        slot.version = event.stream_version
        const { idempotency_key: key, command_fingerprint: fingerprint } = event.metadata
        if (typeof key !== "string") {
          closeCommand()
        } else if (command?.key === key) {
          command.events.push(event)
        } else {
          closeCommand()
          if (typeof fingerprint !== "string") throw new Error(`ledger ${slot.stream_id}: key ${key} without fingerprint`)
          command = { key, fingerprint, events: [event] }
        }
      }
      if (page.length < load_page_events) break
    }
    closeCommand()
    slot.loaded = true
  }

  /** Loads a ledger once, however many callers ask at the same time. */
  const ensureLoaded = (slot: LedgerSlot): Promise<void> => {
    if (slot.loaded) return Promise.resolve()
    if (slot.loading === undefined) {
      slot.loading = catchUp(slot).finally(() => {
        slot.loading = undefined
      })
    }
    return slot.loading
  }

  interface Outcome {
    readonly waiter: Waiter
    readonly outcome:
      | { readonly kind: "events"; readonly from: number; readonly count: number }
      | { readonly kind: "error"; readonly error: WriterError }
      | { readonly kind: "replay"; readonly entry: IdempotencyEntry }
      | { readonly kind: "same_batch"; readonly index: number }
  }

  /** Decides a batch against the slot's state without touching it; returns the new state. */
  const decideBatch = (slot: LedgerSlot, batch: ReadonlyArray<Waiter>) => {
    let state = slot.state
    const events: Array<NewEvent> = []
    const decided: Array<Outcome> = []
    const keysInBatch = new Map<string, { index: number; fingerprint: string }>()
    for (const waiter of batch) {
      const key = waiter.context.idempotency_key ?? null
      if (key !== null) {
        const earlier = slot.idempotency.get(key)
        const inBatch = keysInBatch.get(key)
        const fingerprint = earlier?.fingerprint ?? inBatch?.fingerprint
        if (fingerprint !== undefined) {
          if (fingerprint !== waiter.fingerprint) {
            decided.push({ waiter, outcome: { kind: "error", error: new IdempotencyKeyReused({ idempotency_key: key }) } })
          } else if (earlier !== undefined) {
            decided.push({ waiter, outcome: { kind: "replay", entry: earlier } })
          } else if (inBatch !== undefined) {
            decided.push({ waiter, outcome: { kind: "same_batch", index: inBatch.index } })
          }
          continue
        }
      }
      const result = decideAndEvolve(waiter.command, state)
      if (Result.isFailure(result)) {
        decided.push({ waiter, outcome: { kind: "error", error: result.failure } })
        continue
      }
      const metadata: EventMetadata = {
        tenant: waiter.ledger.tenant,
        environment: waiter.ledger.environment,
        actor: waiter.context.actor,
        correlation_id: waiter.context.correlation_id,
        causation_id: waiter.context.causation_id ?? null,
        idempotency_key: key,
      }
      state = result.success.state
      if (key !== null) keysInBatch.set(key, { index: decided.length, fingerprint: waiter.fingerprint })
      decided.push({ waiter, outcome: { kind: "events", from: events.length, count: result.success.events.length } })
      result.success.events.forEach((event, index) => {
        const withFingerprint = key !== null && index === 0 ? { ...metadata, command_fingerprint: waiter.fingerprint } : metadata
        events.push(toNewEvent(event, withFingerprint, waiter.command.now_ms))
      })
    }
    return { state, events, decided }
  }

  const settle = (slot: LedgerSlot, decided: ReadonlyArray<Outcome>, recorded: ReadonlyArray<RecordedEvent>) => {
    const results: Array<CommandResult | undefined> = []
    for (const { waiter, outcome } of decided) {
      switch (outcome.kind) {
        case "events": {
          const events = recorded.slice(outcome.from, outcome.from + outcome.count)
          const stream_version = events[events.length - 1]?.stream_version ?? slot.version
          const result: CommandResult = { events, stream_version, replayed: false }
          const key = waiter.context.idempotency_key ?? null
          if (key !== null) slot.idempotency.set(key, { fingerprint: waiter.fingerprint, events, stream_version })
          results.push(result)
          waiter.resolve(Result.succeed(result))
          break
        }
        case "replay": {
          const { events, stream_version } = outcome.entry
          results.push(undefined)
          waiter.resolve(Result.succeed({ events, stream_version, replayed: true }))
          break
        }
        case "same_batch": {
          const original = results[outcome.index]
          results.push(undefined)
          if (original === undefined) throw new Error("same_batch refers to a command without events")
          waiter.resolve(Result.succeed({ ...original, replayed: true }))
          break
        }
        case "error":
          results.push(undefined)
          waiter.resolve(Result.fail(outcome.error))
          break
        default: {
          const unreachable: never = outcome
          throw new Error(`unknown outcome ${String(unreachable)}`)
        }
      }
    }
  }

  const appendBatch = async (slot: LedgerSlot, batch: ReadonlyArray<Waiter>): Promise<void> => {
    for (let attempt = 1; attempt <= conflict_retry_max; attempt++) {
      const { state, events, decided } = decideBatch(slot, batch)
      if (events.length === 0) {
        settle(slot, decided, [])
        return
      }
      const expected = slot.version === 0 ? "no_stream" : slot.version
      const appended = await Effect.runPromise(Effect.result(store.append(slot.stream_id, expected, events)))
      if (Result.isSuccess(appended)) {
        slot.state = state
        slot.version = appended.success.next_expected_version
        settle(slot, decided, appended.success.events)
        return
      }
      if (!(appended.failure instanceof WrongExpectedVersion)) throw appended.failure
      await catchUp(slot)
    }
    for (const waiter of batch) {
      waiter.resolve(
        Result.fail(new ConcurrencyRetriesExhausted({ stream_id: slot.stream_id, attempts: conflict_retry_max })),
      )
    }
  }

  const flush = async (slot: LedgerSlot): Promise<void> => {
    slot.flushing = true
    try {
      while (slot.queue.length > 0) {
        const batch = slot.queue.splice(0, batch_commands_max)
        try {
          await ensureLoaded(slot)
          await appendBatch(slot, batch)
        } catch (defect) {
          // The outcome of the append is unknown (e.g. the connection dropped during COMMIT): reload
          // from the log before deciding anything else, and let the callers retry with their keys.
          slot.loaded = false
          for (const waiter of batch) waiter.reject(defect)
        }
      }
    } finally {
      slot.flushing = false
    }
  }

  const execute = (ledger: LedgerId, command: LedgerCommand, context: CommandContext) =>
    Effect.flatMap(
      Effect.callback<Result.Result<CommandResult, WriterError>>((resume) => {
        const slot = slotOf(ledger)
        if (slot.queue.length >= queue_commands_max) {
          resume(Effect.succeed(Result.fail(new LedgerOverloaded({ stream_id: slot.stream_id, queued: slot.queue.length }))))
          return
        }
        slot.queue.push({
          ledger,
          command,
          context,
          fingerprint: context.fingerprint ?? commandFingerprint(command),
          resolve: (result) => resume(Effect.succeed(result)),
          reject: (defect) => resume(Effect.die(defect)),
        })
        if (!slot.flushing) void flush(slot)
      }),
      (result) => (Result.isSuccess(result) ? Effect.succeed(result.success) : Effect.fail(result.failure)),
    )

  const snapshot = (ledger: LedgerId) =>
    Effect.promise(async () => {
      const slot = slotOf(ledger)
      await ensureLoaded(slot)
      return { state: slot.state, version: slot.version }
    })

  return { execute, snapshot }
}

export class LedgerWriter extends Context.Service<LedgerWriter, LedgerWriterService>()("platform/ledger/LedgerWriter") {
  static readonly layer = (options: WriterOptions = {}) =>
    Layer.effect(
      LedgerWriter,
      EventStore.useSync((store) => makeLedgerWriter(store, options)),
    )
}
