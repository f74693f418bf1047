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
import { hash } from "node:crypto"
import { Context, Data, Effect, Layer, Result } from "effect"
import type pg from "pg"
import type { LedgerCommand } from "../../domain/ledger/commands.ts"
import {
  type LedgerEvent,
  type LedgerId,
  ledgerEventSchemaVersion,
  ledgerStreamId,
} from "../../domain/ledger/events.ts"
import {
  compactTransfersWhenDue,
  countDue,
  type Decided,
  decideAndEvolve,
  evolve,
  expiriesPerCommandMax,
  initialState,
  type LedgerError,
  type LedgerState,
  rebaseOnCompacted,
} from "../../domain/ledger/index.ts"
import { uuidv7 } from "../ids.ts"
import {
  type AppendResult,
  type EventMetadata,
  EventStore,
  type GroupCommitWork,
  isSentWork,
  type NewEvent,
  NotCommitted,
  type RecordedEvent,
  type SentWork,
  type StreamAppend,
  type WrongExpectedVersion,
} from "../ports/event-store.ts"
import { type IdempotencyEntry, IdempotencyKeys, sameFingerprint } from "./idempotency-keys.ts"

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
  /**
   * Caller data handed to the transaction hook (`WriterOptions.transaction`) with the command's
   * events, e.g. the payment record to write beside them. Never stored in the events.
   */
  readonly attachment?: unknown
}

/** One command of an appended batch, as the transaction hook sees it (events without positions). */
export interface AppendedCommand {
  readonly ledger: LedgerId
  readonly command: LedgerCommand
  readonly context: CommandContext
  readonly events: ReadonlyArray<Omit<RecordedEvent, "global_position">>
}

/**
 * Writes what must commit or roll back together with a batch's events (read models that must never
 * lag, a transactional outbox). It runs inside the append's transaction, after the events; if it
 * throws, nothing of the batch is written and its callers get the error as a defect. A hook that
 * sends all its statements before it first waits answers a `SentWork` (`sentAll`), and the
 * transaction's COMMIT goes with them in one round trip; one that must read answers before it
 * knows what to write answers a promise.
 */
export type TransactionHook = (
  client: pg.PoolClient,
  appended: ReadonlyArray<AppendedCommand>,
) => Promise<void> | SentWork

/**
 * Waits for every answer and rejects, if any failed, with the first failure in the order given:
 * statements sent in that order, the first to fail is the cause, and those after it only report
 * the aborted transaction (whose rejections may well be seen first).
 */
export const allInOrder = async (answers: ReadonlyArray<Promise<unknown>>): Promise<void> => {
  const settled = await Promise.allSettled(answers)
  for (const outcome of settled) if (outcome.status === "rejected") throw outcome.reason
}

/** The `SentWork` of statements already sent: `done` settles when they have all answered. */
export const sentAll = (answers: ReadonlyArray<Promise<unknown>>): SentWork => ({
  sent_all: true,
  done: allInOrder(answers),
})

/**
 * Runs several hooks in one transaction, in order; each picks the attachments it knows. Hooks that
 * sent everything are not waited for before the next one runs; one that answers a promise is.
 */
export const composeHooks =
  (...hooks: ReadonlyArray<TransactionHook>): TransactionHook =>
  (client, appended) => {
    const answers: Array<Promise<void>> = []
    for (const [index, hook] of hooks.entries()) {
      const run = hook(client, appended)
      if (isSentWork(run)) {
        answers.push(run.done)
        continue
      }
      // This one reads before it writes: the rest run once it is done.
      return (async () => {
        await allInOrder([...answers, run])
        for (const later of hooks.slice(index + 1)) {
          const next = later(client, appended)
          await (isSentWork(next) ? next.done : next)
        }
      })()
    }
    return sentAll(answers)
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
  /**
   * Events of one batch at most (a command alone may have more: up to `transferBatchCountMax` of its
   * own and `expiriesPerCommandMax` expiries before them, within the store's 10,000 per append).
   */
  readonly batch_events_max?: number
  /** Commands waiting per ledger at most before new ones are refused. */
  readonly queue_commands_max?: number
  /** Reload-and-retry rounds after version conflicts at most. */
  readonly conflict_retry_max?: number
  /** Appends of one ledger in flight at once (pipelining); 1 waits for each commit. */
  readonly pipeline_depth?: number
  /** Events read per page when loading a ledger. */
  readonly load_page_events?: number
  /**
   * Group commit across ledgers: batches of different ledgers that are ready at the same time are
   * appended in ONE transaction with the store's `appendStreams`, and `hook` runs in it before
   * COMMIT. Only the composition root knows the store can do this.
   */
  readonly transaction?: {
    readonly appendStreams: (
      appends: ReadonlyArray<StreamAppend>,
      work: GroupCommitWork,
    ) => Effect.Effect<ReadonlyArray<Result.Result<AppendResult, WrongExpectedVersion>>>
    readonly hook: TransactionHook
    /** Transactions in flight at once (pipelining); 1 waits for each commit. */
    readonly commits_in_flight_max?: number
    /** Events appended by one transaction at most. */
    readonly commit_events_max?: number
  }
}

interface Waiter {
  readonly ledger: LedgerId
  readonly command: LedgerCommand
  readonly context: CommandContext
  readonly fingerprint: string
  readonly resolve: (result: Result.Result<CommandResult, WriterError>) => void
  readonly reject: (defect: unknown) => void
  /** Appends of this command lost to a version conflict so far. */
  conflicts: number
  /**
   * Set when a batch it was in was rolled back (its hook failed, say): it is then decided and
   * appended in a batch of its own, so that one command's failure is not its neighbours'.
   */
  alone: boolean
}

interface Outcome {
  readonly waiter: Waiter
  readonly outcome:
    | { readonly kind: "events"; readonly from: number; readonly count: number }
    | { readonly kind: "error"; readonly error: WriterError }
    | { readonly kind: "replay"; readonly entry: IdempotencyEntry }
    | { readonly kind: "same_batch"; readonly index: number }
}

type FlightOutcome =
  | { readonly kind: "appended"; readonly events: ReadonlyArray<RecordedEvent>; readonly version: number }
  | { readonly kind: "conflict" }
  | { readonly kind: "defect"; readonly defect: unknown }

interface InFlightBatch {
  readonly batch: ReadonlyArray<Waiter>
  readonly decided: ReadonlyArray<Outcome>
  /** The ledger state once this batch is committed (rebased when the committed state is compacted). */
  state: LedgerState
  readonly version_after: number
  /** Idempotency keys this batch writes. */
  readonly keys: ReadonlySet<string>
  readonly done: Promise<FlightOutcome>
}

interface LedgerSlot {
  readonly stream_id: string
  state: LedgerState
  version: number
  /** Every key the ledger's commands used (outside the heap: idempotency-keys.ts). */
  readonly idempotency: IdempotencyKeys
  readonly queue: Array<Waiter>
  /** Appended batches not yet answered, oldest first; each is chained on the one before. */
  readonly inFlight: Array<InFlightBatch>
  flushing: boolean
  loaded: boolean
  loading: Promise<void> | undefined
  /** Batches of the writer's own commands only (a backlog of expiries) that failed in a row. */
  backlog_failures: number
}

const bigintAsString = (_key: string, value: unknown): unknown =>
  typeof value === "bigint" ? value.toString() : value

/** Default idempotency fingerprint: the command minus its clock reading. */
export const commandFingerprint = (command: LedgerCommand): string => {
  const { now_ms: _ignored, ...rest } = command
  return hash("sha256", JSON.stringify(rest, bigintAsString), "hex")
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

interface Submission {
  readonly append: StreamAppend
  readonly decided: ReadonlyArray<Outcome>
  readonly resolve: (result: Result.Result<AppendResult, WrongExpectedVersion>) => void
  readonly reject: (defect: unknown) => void
}

/** The commands of a batch that recorded events, with their events, for the transaction hook. */
const appendedCommands = (
  decided: ReadonlyArray<Outcome>,
  events: ReadonlyArray<Omit<RecordedEvent, "global_position">>,
  into: Array<AppendedCommand>,
) => {
  for (const { waiter, outcome } of decided) {
    if (outcome.kind !== "events") continue
    into.push({
      ledger: waiter.ledger,
      command: waiter.command,
      context: waiter.context,
      events: events.slice(outcome.from, outcome.from + outcome.count),
    })
  }
}

/**
 * The group commit across ledgers. Batches submitted while `commits_in_flight_max` transactions are
 * running wait, and the next transaction takes all of them (one batch per ledger; a ledger's next
 * batch goes into the transaction after), so under load one COMMIT carries the batches of every
 * busy ledger. A transaction that was rolled back (`NotCommitted`) wrote nothing: its batches are
 * then retried one per transaction, so one ledger's failing hook never fails another ledger's
 * commands.
 */
const makeCommitter = (transaction: NonNullable<WriterOptions["transaction"]>) => {
  const in_flight_max = transaction.commits_in_flight_max ?? 2
  const events_max = transaction.commit_events_max ?? 4_096
  const queue: Array<Submission> = []
  let running = 0

  const run = (taken: ReadonlyArray<Submission>): Promise<void> => {
    const work: GroupCommitWork = (client, appended) => {
      const commands: Array<AppendedCommand> = []
      taken.forEach((submission, index) => {
        const result = appended[index]
        if (result !== undefined) appendedCommands(submission.decided, result.events, commands)
      })
      return transaction.hook(client, commands)
    }
    return Effect.runPromise(
      transaction.appendStreams(
        taken.map((submission) => submission.append),
        work,
      ),
    ).then(
      (results) =>
        taken.forEach((submission, index) => {
          const result = results[index]
          if (result === undefined) submission.reject(new Error("appendStreams answered too few streams"))
          else submission.resolve(result)
        }),
      async (defect: unknown) => {
        if (defect instanceof NotCommitted && taken.length > 1) {
          // Nothing was written: find the batch that fails by committing each alone.
          await Promise.all(taken.map((submission) => run([submission])))
          return
        }
        // Still wrapped: the ledger's slot tells "wrote nothing" from "may have committed".
        for (const submission of taken) submission.reject(defect)
      },
    )
  }

  const pump = () => {
    while (running < in_flight_max && queue.length > 0) {
      const taken: Array<Submission> = []
      const streams = new Set<string>()
      let events = 0
      for (let index = 0; index < queue.length; ) {
        const next = queue[index] as Submission
        const fits = taken.length === 0 || events + next.append.events.length <= events_max
        if (!fits) break
        if (streams.has(next.append.stream_id)) {
          index += 1
          continue
        }
        taken.push(next)
        streams.add(next.append.stream_id)
        events += next.append.events.length
        queue.splice(index, 1)
      }
      running += 1
      void run(taken).finally(() => {
        running -= 1
        pump()
      })
    }
  }

  return {
    submit: (append: StreamAppend, decided: ReadonlyArray<Outcome>) =>
      new Promise<Result.Result<AppendResult, WrongExpectedVersion>>((resolve, reject) => {
        queue.push({ append, decided, resolve, reject })
        pump()
      }),
  }
}

export interface LedgerWriterService {
  /** Decides and durably records one command; answers after COMMIT. */
  readonly execute: (
    ledger: LedgerId,
    command: LedgerCommand,
    context: CommandContext,
  ) => Effect.Effect<CommandResult, WriterError>
  /**
   * The writer's view of a ledger (loading it if needed): state and stream version. It is as recent
   * as this process's last write or read of the ledger; other processes may have written since
   * (see `sync`).
   */
  readonly snapshot: (
    ledger: LedgerId,
  ) => Effect.Effect<{ readonly state: LedgerState; readonly version: number }>
  /**
   * Catches the writer's view of a ledger up with everything committed before the call, by any
   * process (a no-op command through the ledger's queue, which reloads when the stream moved). Call
   * it before a `snapshot` whose answer refuses something or acts on it.
   */
  readonly sync: (ledger: LedgerId) => Effect.Effect<void, WriterError>
}

export const makeLedgerWriter = (
  store: EventStore["Service"],
  options: WriterOptions = {},
): LedgerWriterService => {
  const batch_commands_max = options.batch_commands_max ?? 1024
  const batch_events_max = options.batch_events_max ?? 4_096
  const queue_commands_max = options.queue_commands_max ?? 20_000
  const conflict_retry_max = options.conflict_retry_max ?? 16
  const pipeline_depth = options.pipeline_depth ?? 2
  const load_page_events = options.load_page_events ?? 10_000
  const transaction = options.transaction
  const slots = new Map<string, LedgerSlot>()

  const slotOf = (ledger: LedgerId): LedgerSlot => {
    const stream_id = ledgerStreamId(ledger)
    let slot = slots.get(stream_id)
    if (slot === undefined) {
      slot = {
        stream_id,
        state: initialState,
        version: 0,
        idempotency: new IdempotencyKeys(),
        queue: [],
        inFlight: [],
        flushing: false,
        loaded: false,
        loading: undefined,
        backlog_failures: 0,
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
    let command:
      | { key: string; fingerprint: string; first_version: number; stream_version: number }
      | undefined
    const closeCommand = () => {
      if (command === undefined) return
      const { key, ...entry } = command
      slot.idempotency.set(key, entry)
      command = undefined
    }
    for (;;) {
      const page = await Effect.runPromise(
        store.readStream(slot.stream_id, { from_version: slot.version + 1, max_count: load_page_events }),
      )
      for (const event of page) {
        if (event.stream_version !== slot.version + 1) {
          throw new Error(
            `ledger ${slot.stream_id}: expected version ${slot.version + 1}, read ${event.stream_version}`,
          )
        }
        slot.state = compactTransfersWhenDue(evolve(slot.state, asLedgerEvent(event)))
        slot.version = event.stream_version
        const { idempotency_key: key, command_fingerprint: fingerprint } = event.metadata
        if (typeof key !== "string") {
          closeCommand()
        } else if (command?.key === key) {
          command.stream_version = event.stream_version
        } else {
          closeCommand()
          if (typeof fingerprint !== "string")
            throw new Error(`ledger ${slot.stream_id}: key ${key} without fingerprint`)
          command = {
            key,
            fingerprint,
            first_version: event.stream_version,
            stream_version: event.stream_version,
          }
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

  /**
   * A command of the writer's own that lapses `expiriesPerCommandMax` of the reservations due before
   * `waiter`'s command. Nobody waits for it; like any command it goes through the transaction hook.
   */
  const backlogExpiry = (waiter: Waiter): Waiter => ({
    ledger: waiter.ledger,
    command: {
      type: "ExpirePendingTransfers",
      now_ms: waiter.command.now_ms,
      max_count: expiriesPerCommandMax,
    },
    context: { actor: "system:expiry", correlation_id: waiter.context.correlation_id, idempotency_key: null },
    fingerprint: "",
    resolve: () => {},
    reject: () => {},
    conflicts: 0,
    alone: false,
  })

  /**
   * Decides a batch against `base` (committed or speculative) without touching the slot. Before a
   * command that would lapse more than `expiriesPerCommandMax` reservations, the backlog is lapsed
   * in commands of the writer's own (`backlogExpiry`), so no command outgrows an append. The batch
   * stops before a command that would take it past `batch_events_max`: that one and the rest are
   * `leftover`, for the next batch; `taken` are the commands it decided.
   */
  const decideBatch = (slot: LedgerSlot, base: LedgerState, batch: ReadonlyArray<Waiter>) => {
    let state = base
    const events: Array<NewEvent> = []
    const decided: Array<Outcome> = []
    const taken: Array<Waiter> = []
    let leftover: ReadonlyArray<Waiter> = []
    const keysInBatch = new Map<string, { index: number; fingerprint: string }>()
    /** Adds a decided command's events to the batch. */
    const record = (waiter: Waiter, key: string | null, result: Decided) => {
      // Keys in sorted order: the event store then writes their canonical JSON natively.
      const metadata: EventMetadata = {
        actor: waiter.context.actor,
        causation_id: waiter.context.causation_id ?? null,
        correlation_id: waiter.context.correlation_id,
        environment: waiter.ledger.environment,
        idempotency_key: key,
        tenant: waiter.ledger.tenant,
      }
      state = result.state
      // A key is consumed only by a command that wrote events (see `settle`).
      if (key !== null && result.events.length > 0)
        keysInBatch.set(key, { index: decided.length, fingerprint: waiter.fingerprint })
      decided.push({ waiter, outcome: { kind: "events", from: events.length, count: result.events.length } })
      result.events.forEach((event, index) => {
        const withFingerprint: EventMetadata =
          key !== null && index === 0
            ? {
                actor: metadata.actor,
                causation_id: metadata.causation_id,
                command_fingerprint: waiter.fingerprint,
                correlation_id: metadata.correlation_id,
                environment: metadata.environment,
                idempotency_key: key,
                tenant: metadata.tenant,
              }
            : metadata
        events.push(toNewEvent(event, withFingerprint, waiter.command.now_ms))
      })
    }
    /** Whether `count` more events would take a batch that has some past its bound. */
    const overflows = (count: number) => events.length > 0 && events.length + count > batch_events_max
    for (const [position, waiter] of batch.entries()) {
      const key = waiter.context.idempotency_key ?? null
      if (key !== null) {
        const earlier = slot.idempotency.get(key)
        const inBatch = keysInBatch.get(key)
        if (earlier !== undefined || inBatch !== undefined) {
          const same =
            earlier !== undefined
              ? sameFingerprint(earlier, waiter.fingerprint)
              : inBatch?.fingerprint === waiter.fingerprint
          if (!same) {
            decided.push({
              waiter,
              outcome: { kind: "error", error: new IdempotencyKeyReused({ idempotency_key: key }) },
            })
          } else if (earlier !== undefined) {
            decided.push({ waiter, outcome: { kind: "replay", entry: earlier } })
          } else if (inBatch !== undefined) {
            decided.push({ waiter, outcome: { kind: "same_batch", index: inBatch.index } })
          }
          taken.push(waiter)
          continue
        }
      }
      const now_ms = Math.max(state.clock_ms, waiter.command.now_ms)
      let backlog = countDue(state.expiries, now_ms, expiriesPerCommandMax + 1) > expiriesPerCommandMax
      while (backlog && !overflows(expiriesPerCommandMax)) {
        const expiry = backlogExpiry(waiter)
        const lapsed = decideAndEvolve(expiry.command, state)
        if (Result.isFailure(lapsed)) throw new Error(`ledger ${slot.stream_id}: an expiry was refused`)
        record(expiry, null, lapsed.success)
        backlog = countDue(state.expiries, now_ms, expiriesPerCommandMax + 1) > expiriesPerCommandMax
      }
      const result = backlog ? undefined : decideAndEvolve(waiter.command, state)
      if (result === undefined || (Result.isSuccess(result) && overflows(result.success.events.length))) {
        leftover = batch.slice(position)
        break
      }
      taken.push(waiter)
      if (Result.isFailure(result))
        decided.push({ waiter, outcome: { kind: "error", error: result.failure } })
      else record(waiter, key, result.success)
    }
    return { state, events, decided, taken, leftover }
  }

  /** The events of an earlier command, read back from the store. */
  const replay = async (slot: LedgerSlot, entry: IdempotencyEntry): Promise<ReadonlyArray<RecordedEvent>> => {
    const count = entry.stream_version - entry.first_version + 1
    if (count <= 0) return []
    const events = await Effect.runPromise(
      store.readStream(slot.stream_id, { from_version: entry.first_version, max_count: count }),
    )
    if (events.length !== count)
      throw new Error(
        `ledger ${slot.stream_id}: a replay read ${events.length} of its command's ${count} events`,
      )
    return events
  }

  const settle = (
    slot: LedgerSlot,
    decided: ReadonlyArray<Outcome>,
    recorded: ReadonlyArray<RecordedEvent>,
  ) => {
    const results: Array<CommandResult | undefined> = []
    for (const { waiter, outcome } of decided) {
      switch (outcome.kind) {
        case "events": {
          const events = recorded.slice(outcome.from, outcome.from + outcome.count)
          const stream_version = events[events.length - 1]?.stream_version ?? slot.version
          const result: CommandResult = { events, stream_version, replayed: false }
          const key = waiter.context.idempotency_key ?? null
          const first = events[0]
          // A key is consumed by the events that carry it: one whose command wrote none (a no-op)
          // is not remembered here either, so every process, restarted or not, answers it alike.
          if (key !== null && first !== undefined)
            slot.idempotency.set(key, {
              fingerprint: waiter.fingerprint,
              first_version: first.stream_version,
              stream_version,
            })
          results.push(result)
          waiter.resolve(Result.succeed(result))
          break
        }
        case "replay": {
          results.push(undefined)
          replay(slot, outcome.entry).then(
            (events) =>
              waiter.resolve(
                Result.succeed({ events, stream_version: outcome.entry.stream_version, replayed: true }),
              ),
            waiter.reject,
          )
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

  const committer = transaction === undefined ? undefined : makeCommitter(transaction)

  /**
   * Appends a batch's events; with a transaction hook, in a group commit with what it writes. A
   * batch decided on another batch in flight is `speculative`: its events go only on the events
   * that batch chained, so should that one fail, this one fails too (rather than land on whatever
   * another process wrote at the same version).
   */
  const appendBatch = (
    stream_id: string,
    expected: number | "no_stream",
    events: ReadonlyArray<NewEvent>,
    decided: ReadonlyArray<Outcome>,
    speculative: boolean,
  ): Promise<Result.Result<AppendResult, WrongExpectedVersion>> =>
    committer === undefined
      ? Effect.runPromise(Effect.result(store.append(stream_id, expected, events, { speculative })))
      : committer.submit({ stream_id, expected, events, speculative }, decided)

  /**
   * Decides the next batch on top of the newest in-flight batch (or the committed state) and starts
   * its append without waiting: while the database commits batch k, batch k+1 is decided, hashed and
   * sent, and waits for the stream lock. A batch stops before a command whose idempotency key an
   * in-flight batch is writing (it is decided once that batch is answered). Returns false when
   * nothing could be launched.
   */
  const launchBatch = (slot: LedgerSlot): boolean => {
    const newest = slot.inFlight[slot.inFlight.length - 1]
    const base =
      newest === undefined
        ? { state: slot.state, version: slot.version }
        : { state: newest.state, version: newest.version_after }
    const keysInFlight = new Set<string>()
    for (const flight of slot.inFlight) for (const key of flight.keys) keysInFlight.add(key)
    const batch: Array<Waiter> = []
    while (batch.length < batch_commands_max) {
      const next = slot.queue[0]
      const key = next?.context.idempotency_key ?? null
      if (next === undefined || (key !== null && keysInFlight.has(key))) break
      if (next.alone && batch.length > 0) break
      batch.push(next)
      slot.queue.shift()
      if (next.alone) break
    }
    if (batch.length === 0) return false
    const { state, events, decided, taken, leftover } = decideBatch(slot, base.state, batch)
    slot.queue.unshift(...leftover)
    const keys = new Set<string>()
    for (const waiter of taken) if (waiter.context.idempotency_key) keys.add(waiter.context.idempotency_key)
    const expected = base.version === 0 ? "no_stream" : base.version
    const done: Promise<FlightOutcome> =
      events.length === 0
        ? headMoved(slot, base.version).then(
            (moved): FlightOutcome =>
              moved ? { kind: "conflict" } : { kind: "appended", events: [], version: base.version },
            (defect: unknown): FlightOutcome => ({ kind: "defect", defect }),
          )
        : appendBatch(slot.stream_id, expected, events, decided, base.version !== slot.version).then(
            (appended): FlightOutcome =>
              Result.isSuccess(appended)
                ? {
                    kind: "appended",
                    events: appended.success.events,
                    version: appended.success.next_expected_version,
                  }
                : { kind: "conflict" },
            (defect: unknown): FlightOutcome => ({ kind: "defect", defect }),
          )
    slot.inFlight.push({
      batch: taken,
      decided,
      state,
      version_after: base.version + events.length,
      keys,
      done,
    })
    return true
  }

  /**
   * Whether the stream has events after `version`. A batch that writes nothing (every command
   * refused, replayed or a no-op) has no append to fail on a stale view, so it asks: another process
   * may have written since this one last read (a credit that makes a refused payment affordable, the
   * reservation a settlement or an expiry looks for). If so, the batch is decided again on the
   * reloaded ledger, as after a version conflict.
   */
  const headMoved = async (slot: LedgerSlot, version: number): Promise<boolean> => {
    const after = await Effect.runPromise(
      store.readStream(slot.stream_id, { from_version: version + 1, max_count: 1 }),
    )
    return after.length > 0
  }

  /** Puts a failed batch's commands back at the front of the queue, or gives up on them. */
  const requeue = (slot: LedgerSlot, batches: ReadonlyArray<InFlightBatch>) => {
    const again: Array<Waiter> = []
    for (const { batch } of batches) {
      for (const waiter of batch) {
        waiter.conflicts += 1
        if (waiter.conflicts > conflict_retry_max) {
          waiter.resolve(
            Result.fail(
              new ConcurrencyRetriesExhausted({ stream_id: slot.stream_id, attempts: waiter.conflicts }),
            ),
          )
        } else {
          again.push(waiter)
        }
      }
    }
    slot.queue.unshift(...again)
  }

  /**
   * A batch whose append failed. If it wrote nothing and held several commands, each is tried again
   * alone (`again`), so the one that fails fails by itself; otherwise its commands fail with the cause.
   */
  const failed = (flight: InFlightBatch, defect: unknown, again: Array<InFlightBatch>) => {
    if (defect instanceof NotCommitted && flight.batch.length > 1) {
      for (const waiter of flight.batch) waiter.alone = true
      again.push(flight)
      return
    }
    const cause = defect instanceof NotCommitted ? defect.cause : defect
    for (const waiter of flight.batch) waiter.reject(cause)
  }

  /**
   * Compacts the final transfer records of the committed state when enough have gathered, and
   * rebases the batches in flight (all made from it) on the result. Only committed records are
   * compacted, so a rolled-back batch never leaves an entry behind that the slot's state must not see.
   */
  const compactCommitted = (slot: LedgerSlot) => {
    const before = slot.state
    const after = compactTransfersWhenDue(before)
    if (after === before) return
    const rebased = slot.inFlight.map((flight) => rebaseOnCompacted(flight.state, before, after))
    // Every batch in flight was made from the committed state, so each rebases; were one not to,
    // the state stays as it is (in full, as correct) rather than leave that batch on another base.
    if (rebased.some((state) => state === undefined)) return
    slot.state = after
    slot.inFlight.forEach((flight, index) => {
      flight.state = rebased[index] as LedgerState
    })
  }

  /**
   * A batch of the writer's own expiries only has no caller to fail, and would be tried again for
   * ever while it cannot commit (a hook failing on the lapsed payments, say): after
   * `conflict_retry_max` such failures in a row, the commands waiting behind it fail instead, with
   * the batch's cause (a later command tries again).
   */
  const giveUpOnBacklog = (slot: LedgerSlot, outcome: FlightOutcome) => {
    slot.backlog_failures += 1
    if (slot.backlog_failures <= conflict_retry_max) return
    const attempts = slot.backlog_failures
    slot.backlog_failures = 0
    const cause =
      outcome.kind !== "defect"
        ? undefined
        : outcome.defect instanceof NotCommitted
          ? outcome.defect.cause
          : outcome.defect
    for (const waiter of slot.queue.splice(0)) {
      if (cause === undefined)
        waiter.resolve(Result.fail(new ConcurrencyRetriesExhausted({ stream_id: slot.stream_id, attempts })))
      else waiter.reject(cause)
    }
  }

  /** Answers the oldest in-flight batch; on a failure, unwinds every batch chained on it. */
  const answerOldest = async (slot: LedgerSlot, oldest: InFlightBatch): Promise<void> => {
    const outcome = await oldest.done
    slot.inFlight.shift()
    if (outcome.kind === "appended") {
      slot.backlog_failures = 0
      slot.state = oldest.state
      slot.version = outcome.version
      compactCommitted(slot)
      settle(slot, oldest.decided, outcome.events)
      return
    }
    // Every later batch was chained on this one: it fails too, unless this one's commit went through
    // after all (a defect such as a connection lost during COMMIT), in which case it may succeed.
    const later = slot.inFlight.splice(0)
    const laterOutcomes = await Promise.all(later.map((flight) => flight.done))
    const again: Array<InFlightBatch> = []
    if (outcome.kind === "defect") failed(oldest, outcome.defect, again)
    else again.push(oldest)
    later.forEach((flight, index) => {
      const laterOutcome = laterOutcomes[index]
      if (laterOutcome?.kind === "appended" && laterOutcome.events.length > 0) {
        // Committed, so everything it was chained on was committed too: its callers are answered.
        // The slot stays where it was, below the batches that failed to answer: the reload below
        // reads their events back, and with them the idempotency keys their commands consumed
        // (a retry of such a command is then a replay, not a second payment).
        settle(slot, flight.decided, laterOutcome.events)
      } else if (laterOutcome?.kind === "defect") {
        failed(flight, laterOutcome.defect, again)
      } else {
        // A conflict, or a batch without events whose rejections were decided on a state that may
        // never have been committed: decide it again.
        again.push(flight)
      }
    })
    requeue(slot, again)
    if (oldest.batch.length === 0) giveUpOnBacklog(slot, outcome)
    // Our view is behind (a conflict) or unknown (a defect): reload what was committed.
    slot.loaded = false
  }

  const flush = async (slot: LedgerSlot): Promise<void> => {
    slot.flushing = true
    try {
      for (;;) {
        if (slot.inFlight.length === 0) {
          if (slot.queue.length === 0) break
          try {
            await ensureLoaded(slot)
          } catch (defect) {
            for (const waiter of slot.queue.splice(0)) waiter.reject(defect)
            break
          }
        }
        while (slot.inFlight.length < pipeline_depth && launchBatch(slot)) {}
        const oldest = slot.inFlight[0]
        if (oldest !== undefined) await answerOldest(slot, oldest)
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
          resume(
            Effect.succeed(
              Result.fail(new LedgerOverloaded({ stream_id: slot.stream_id, queued: slot.queue.length })),
            ),
          )
          return
        }
        slot.queue.push({
          ledger,
          command,
          context,
          fingerprint: context.fingerprint ?? (context.idempotency_key ? commandFingerprint(command) : ""),
          resolve: (result) => resume(Effect.succeed(result)),
          reject: (defect) => resume(Effect.die(defect)),
          conflicts: 0,
          alone: false,
        })
        if (!slot.flushing) void flush(slot)
      }),
      (result) => (Result.isSuccess(result) ? Effect.succeed(result.success) : Effect.fail(result.failure)),
    )

  const snapshot = (ledger: LedgerId) =>
    Effect.suspend(() => {
      const slot = slotOf(ledger)
      // A loaded ledger answers at once, without a promise.
      if (slot.loaded) return Effect.succeed({ state: slot.state, version: slot.version })
      return Effect.promise(async () => {
        await ensureLoaded(slot)
        return { state: slot.state, version: slot.version }
      })
    })

  /** Nothing is due at time 0 (a timeout of 0 never lapses): a command that decides to write nothing. */
  const catchUpCommand: LedgerCommand = { type: "ExpirePendingTransfers", now_ms: 0 }

  const sync = (ledger: LedgerId) =>
    Effect.asVoid(execute(ledger, catchUpCommand, { actor: "system:sync", correlation_id: "sync" }))

  return { execute, snapshot, sync }
}

export class LedgerWriter extends Context.Service<LedgerWriter, LedgerWriterService>()(
  "platform/ledger/LedgerWriter",
) {
  static readonly layer = (options: WriterOptions = {}) =>
    Layer.effect(
      LedgerWriter,
      EventStore.useSync((store) => makeLedgerWriter(store, options)),
    )
}
