/**
 * `ledger verify`: the auditor's check. It reads every event in global order, a page at a time, and
 * checks per stream that versions run 1, 2, 3... without a gap, that each `prev_hash` is the previous
 * event's hash and that each hash is what the event's fields hash to (so an edited event shows). Per
 * ledger stream it folds the domain's `evolve`, which asserts every rule the decider enforced, and at
 * the end checks double entry per asset (pending and posted apart) and that no constrained account
 * is overdrawn. Given the store's stream heads (the version and hash each append moved the head to),
 * it checks that every stream ends where its head says: events deleted from a stream's end leave the
 * remaining chain intact, and only the head shows them missing.
 *
 * Memory: a page of events, plus each stream's head and each ledger's folded state (its accounts and
 * transfer ids), which `evolve` needs.
 */
import { Effect } from "effect"
import { eventHash, GENESIS_HASH } from "../../adapters/eventstore/hash.ts"
import {
  available,
  checkDoubleEntry,
  compactTransfersWhenDue,
  evolve,
  initialState,
  type LedgerEvent,
  type LedgerState,
  ledgerEventSchemaVersion,
  ledgerEventTypes,
  withinLimits,
} from "../../domain/ledger/index.ts"
import type { EventStore, RecordedEvent } from "../ports/event-store.ts"

export interface VerifyProblem {
  readonly global_position: bigint
  readonly stream_id: string
  readonly stream_version: number
  readonly event_id: string
  readonly reason: string
}

export interface VerifyReport {
  readonly event_count: number
  readonly stream_count: number
  readonly ledger_count: number
  readonly account_count: number
  /** The first problems found, in global order (at most `problem_count_max`). */
  readonly problems: ReadonlyArray<VerifyProblem>
  readonly problem_count: number
}

const problem_count_max = 100
const page_size = 2_000

interface StreamCheck {
  version: number
  last_hash: string
  last_event: RecordedEvent
  /** Present for a ledger stream whose events have all applied so far. */
  ledger: LedgerState | undefined
  is_ledger: boolean
}

const ledgerTypes: ReadonlySet<string> = new Set(ledgerEventTypes)

const errorText = (error: unknown): string =>
  error instanceof Error ? `${error.name}: ${error.message}` : String(error)

class Verifier {
  readonly streams = new Map<string, StreamCheck>()
  /** The heads read before the events; and the hash each stream's event at its head's version had. */
  readonly heads: ReadonlyMap<string, StreamHead>
  readonly hash_at_head = new Map<string, string>()

  constructor(heads: ReadonlyArray<StreamHead> = []) {
    this.heads = new Map(heads.map((head) => [head.stream_id, head]))
  }

  readonly problems: VerifyProblem[] = []
  problem_count = 0
  event_count = 0

  report(event: RecordedEvent, reason: string): void {
    this.problem_count += 1
    if (this.problems.length >= problem_count_max) return
    const { global_position, stream_id, stream_version, event_id } = event
    this.problems.push({ global_position, stream_id, stream_version, event_id, reason })
  }

  check(event: RecordedEvent): void {
    this.event_count += 1
    const stream = this.streams.get(event.stream_id)
    const version = stream?.version ?? 0
    const last_hash = stream?.last_hash ?? GENESIS_HASH
    if (event.stream_version !== version + 1) {
      this.report(
        event,
        `version ${event.stream_version} follows version ${version}: versions must run 1, 2, 3...`,
      )
    }
    if (event.prev_hash !== last_hash) {
      this.report(event, `prev_hash ${event.prev_hash} is not the previous event's hash ${last_hash}`)
    }
    this.checkHash(event)
    if (this.heads.get(event.stream_id)?.version === event.stream_version) {
      this.hash_at_head.set(event.stream_id, event.hash)
    }
    const is_ledger = ledgerTypes.has(event.event_type)
    // A ledger's stream holds ledger events only; one that began otherwise is never folded, so a
    // ledger event in it would pass unchecked.
    if (!is_ledger && event.stream_id.startsWith("ledger-")) {
      this.report(event, `event type ${event.event_type} is not a ledger event, in a ledger's stream`)
    } else if (is_ledger && stream !== undefined && !stream.is_ledger) {
      this.report(event, `ledger event ${event.event_type} in a stream that did not begin as a ledger`)
    }
    const ledger = stream === undefined ? (is_ledger ? initialState : undefined) : stream.ledger
    const next: StreamCheck = stream ?? { version, last_hash, last_event: event, ledger, is_ledger }
    next.version = event.stream_version
    next.last_hash = event.hash
    next.last_event = event
    next.is_ledger ||= is_ledger
    next.ledger = is_ledger && ledger !== undefined ? this.evolveLedger(ledger, event) : ledger
    if (stream === undefined) this.streams.set(event.stream_id, next)
  }

  checkHash(event: RecordedEvent): void {
    try {
      const recomputed = eventHash(event.prev_hash, event)
      if (recomputed !== event.hash) {
        this.report(
          event,
          `hash ${event.hash} does not match the event's content (recomputed ${recomputed}): it was altered`,
        )
      }
    } catch (error) {
      this.report(event, `hash cannot be recomputed: ${errorText(error)}`)
    }
  }

  /** The ledger after `event`, or undefined (no further folding of that stream) if it breaks a rule. */
  evolveLedger(state: LedgerState, event: RecordedEvent): LedgerState | undefined {
    if (event.schema_version !== ledgerEventSchemaVersion) {
      this.report(event, `schema version ${event.schema_version} of ${event.event_type} is not known`)
      return undefined
    }
    try {
      // Compacted as it goes, so that checking a ledger of any length needs bounded memory.
      return compactTransfersWhenDue(
        evolve(state, { type: event.event_type, data: event.data } as LedgerEvent),
      )
    } catch (error) {
      this.report(event, `ledger rule broken: ${errorText(error)}`)
      return undefined
    }
  }

  /**
   * Every stream reaches its head (read before the events, so later appends may go past it) with
   * the head's hash at the head's version; every stream with events has a head.
   */
  /**
   * `created_meanwhile`: the heads, read after the events, of streams that had none when the run
   * began (created while it ran); such a stream must have a head at or past its last event read.
   */
  checkHeads(created_meanwhile: ReadonlyMap<string, StreamHead> = new Map()): void {
    for (const head of this.heads.values()) {
      const stream = this.streams.get(head.stream_id)
      if (stream === undefined) {
        this.problem_count += 1
        if (this.problems.length < problem_count_max) {
          this.problems.push({
            global_position: 0n,
            stream_id: head.stream_id,
            stream_version: 0,
            event_id: "",
            reason: `the stream's head is version ${head.version}, but the stream has no events: they were deleted`,
          })
        }
      } else if (stream.version < head.version) {
        this.report(
          stream.last_event,
          `the stream's head is version ${head.version}, but its last event is version ${stream.version}: the events after it were deleted`,
        )
      } else if (this.hash_at_head.get(head.stream_id) !== head.last_hash) {
        this.report(
          stream.last_event,
          `the stream's head is version ${head.version} with hash ${head.last_hash}, but that event's hash is ${this.hash_at_head.get(head.stream_id)}: the events were replaced`,
        )
      }
    }
    for (const [stream_id, stream] of this.streams) {
      if (this.heads.has(stream_id)) continue
      const late = created_meanwhile.get(stream_id)
      if (late === undefined) this.report(stream.last_event, "the stream has events but no head")
      else if (late.version < stream.version) {
        this.report(
          stream.last_event,
          `the stream's head is version ${late.version}, but it has event version ${stream.version}: a head behind its events`,
        )
      }
    }
  }

  /** Double entry per asset and overdrafts, over each ledger's final state; blamed on its last event. */
  finish(): number {
    let account_count = 0
    for (const stream of this.streams.values()) {
      if (stream.ledger === undefined) continue
      const accounts = [...stream.ledger.accounts.values()]
      account_count += accounts.length
      for (const totals of checkDoubleEntry(accounts).assets) {
        if (totals.balanced) continue
        this.report(
          stream.last_event,
          `double entry broken for ${totals.asset_code}: debits posted ${totals.debits_posted} vs credits posted ` +
            `${totals.credits_posted}, debits pending ${totals.debits_pending} vs credits pending ${totals.credits_pending}`,
        )
      }
      for (const account of accounts) {
        const overdrawn = account.flags.debits_must_not_exceed_credits && available(account) < 0n
        if (overdrawn || !withinLimits(account)) {
          this.report(stream.last_event, `account ${account.account_id} is overdrawn or outside its limits`)
        }
      }
    }
    return account_count
  }
}

/** Where the store says a stream ends: the version and hash of its last append. */
export interface StreamHead {
  readonly stream_id: string
  readonly version: number
  readonly last_hash: string
}

/**
 * Verifies every event of the store (up to `up_to_position`, the log's settled end: see
 * settled.ts), and with `heads` that each stream ends at its head; `onProgress` gets the number of
 * events checked after each page.
 * @example
 * const report = await verifyEvents(store, { heads })
 * if (report.problem_count > 0) console.error(report.problems[0])
 */
export const verifyEvents = async (
  store: EventStore["Service"],
  options: {
    readonly heads?: ReadonlyArray<StreamHead>
    /** The heads now of the given streams (those created after `heads` was read). */
    readonly headsNow?: (stream_ids: ReadonlyArray<string>) => Promise<ReadonlyArray<StreamHead>>
    readonly up_to_position?: bigint
    readonly onProgress?: (event_count: number) => void
  } = {},
): Promise<VerifyReport> => {
  const { heads, headsNow, up_to_position, onProgress } = options
  const verifier = new Verifier(heads)
  let after_position = 0n
  for (;;) {
    const page = await Effect.runPromise(
      store.readAll({
        after_position,
        max_count: page_size,
        ...(up_to_position === undefined ? {} : { up_to_position }),
      }),
    )
    for (const event of page) verifier.check(event)
    onProgress?.(verifier.event_count)
    const last = page.at(-1)
    if (last === undefined || page.length < page_size) break
    after_position = last.global_position
  }
  const account_count = verifier.finish()
  if (heads !== undefined) {
    const headless = [...verifier.streams.keys()].filter((stream_id) => !verifier.heads.has(stream_id))
    const late = headless.length === 0 || headsNow === undefined ? [] : await headsNow(headless)
    verifier.checkHeads(new Map(late.map((head) => [head.stream_id, head])))
  }
  return {
    event_count: verifier.event_count,
    stream_count: verifier.streams.size,
    ledger_count: [...verifier.streams.values()].filter((s) => s.is_ledger).length,
    account_count,
    problems: verifier.problems,
    problem_count: verifier.problem_count,
  }
}
