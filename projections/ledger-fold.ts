/**
 * The pure half of the ledger projection: folding a batch of events, in memory, over the account
 * and pending-transfer rows it touches, into net balance changes per account and the final state of
 * each transfer row. `ledger.ts` loads those rows and writes the result.
 *
 * The fold re-checks what it consumes (the decider checked it when it produced the events): accounts
 * and pending transfers must exist, assets must match, balances never go negative and constrained
 * accounts are never overdrawn. A violation throws `ProjectionViolation`, which names the event; the
 * caller then rolls the batch back and nothing is written.
 */
import {
  type AccountKind,
  type LedgerEventType,
  ledgerEventSchemaVersion,
  ledgerEventTypes,
} from "../domain/ledger/events.ts"
import type { ProjectedEvent } from "./projection.ts"

/** An event the projection cannot apply: the stream or the projection is corrupt. */
export class ProjectionViolation extends Error {
  override readonly name = "ProjectionViolation"
  readonly global_position: bigint
  readonly stream_id: string
  readonly stream_version: number
  readonly event_id: string
  constructor(event: ProjectedEvent, reason: string) {
    super(
      `event ${event.event_id} (${event.event_type}) at global position ${event.global_position}, ` +
        `stream ${event.stream_id} version ${event.stream_version}: ${reason}`,
    )
    this.global_position = event.global_position
    this.stream_id = event.stream_id
    this.stream_version = event.stream_version
    this.event_id = event.event_id
  }
}

const ledgerTypes: ReadonlySet<string> = new Set<string>(ledgerEventTypes)

/** True for the six ledger event types; the projection ignores every other event. */
export const isLedgerEvent = (event: ProjectedEvent): boolean => ledgerTypes.has(event.event_type)

/** An ISO 8601 time with its offset, as events write them (`2025-01-31T12:00:00.000Z`). */
const isoTime = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,6})?(Z|[+-]\d{2}:\d{2})$/

// ---- Reading event data. Events cross a boundary (the database), so every field is checked. ----

class Fields {
  readonly event: ProjectedEvent
  constructor(event: ProjectedEvent) {
    this.event = event
  }
  fail(reason: string): never {
    throw new ProjectionViolation(this.event, reason)
  }
  text(key: string): string {
    const value = this.event.data[key]
    return typeof value === "string" && value !== ""
      ? value
      : this.fail(`data.${key} must be a non-empty string`)
  }
  textOrNull(key: string): string | null {
    const value = this.event.data[key]
    if (value === null || value === undefined) return null
    return typeof value === "string" ? value : this.fail(`data.${key} must be a string or null`)
  }
  integer(key: string, source: Readonly<Record<string, unknown>> = this.event.data): number {
    const value = source[key]
    return Number.isSafeInteger(value) ? (value as number) : this.fail(`${key} must be an integer`)
  }
  amount(key: string): bigint {
    const value = this.event.data[key]
    return typeof value === "string" && /^(0|[1-9][0-9]{0,38})$/.test(value)
      ? BigInt(value)
      : this.fail(`data.${key} must be a decimal string of minor units`)
  }
  time(key: string): string {
    const value = this.text(key)
    return isoTime.test(value) ? value : this.fail(`data.${key} must be an ISO 8601 time`)
  }
  timeOrNull(key: string): string | null {
    return this.event.data[key] === null || this.event.data[key] === undefined ? null : this.time(key)
  }
  metadata(): Readonly<Record<string, unknown>> {
    return this.event.metadata ?? this.fail("metadata was not read")
  }
  record(key: string): Readonly<Record<string, unknown>> {
    const value = this.event.data[key]
    return typeof value === "object" && value !== null && !Array.isArray(value)
      ? (value as Record<string, unknown>)
      : this.fail(`data.${key} must be an object`)
  }
  nestedText(source: Readonly<Record<string, unknown>>, key: string): string {
    const value = source[key]
    return typeof value === "string" && value !== "" ? value : this.fail(`${key} must be a non-empty string`)
  }
  nestedBoolean(source: Readonly<Record<string, unknown>>, key: string): boolean {
    const value = source[key]
    return typeof value === "boolean" ? value : this.fail(`${key} must be a boolean`)
  }
}

// ---- In-memory state of the rows a batch touches. ----

export interface Balances {
  debits_pending: bigint
  debits_posted: bigint
  credits_pending: bigint
  credits_posted: bigint
}

/**
 * An account row: static fields, balances after the events applied so far, and the change not yet
 * written to the table.
 */
export interface AccountRow {
  readonly stream_id: string
  readonly account_id: string
  readonly asset_code: string
  readonly debits_must_not_exceed_credits: boolean
  readonly credits_must_not_exceed_debits: boolean
  /** Present until the row is first written: it is then inserted, not updated. */
  opened: OpenedAccount | undefined
  readonly balances: Balances
  readonly delta: Balances
  last_stream_version: number
}

export interface OpenedAccount {
  readonly tenant: string
  readonly environment: string
  readonly symbol: string
  readonly chain: string
  readonly decimals: number
  readonly kind: AccountKind
  readonly code: number
  readonly user_data: string | null
  readonly opened_at: string
}

export type TransferKind = "single" | "pending" | "post_pending" | "void_pending"
export type TransferStatus = "posted" | "pending" | "voided" | "expired"

export interface TransferRow {
  readonly stream_id: string
  readonly transfer_id: string
  readonly kind: TransferKind
  readonly pending_id: string | null
  readonly debit_account_id: string
  readonly credit_account_id: string
  readonly asset_code: string
  readonly amount: bigint
  posted_amount: bigint | null
  readonly code: number
  readonly user_data: string | null
  readonly linked_group_id: string | null
  status: TransferStatus
  readonly created_at: string
  readonly expires_at: string | null
  resolved_at: string | null
  readonly stream_version: number
  readonly global_position: bigint
}

/** A pending transfer already in the table: what its resolution needs, and its resolution. */
export interface StoredPending {
  readonly stream_id: string
  readonly transfer_id: string
  readonly debit_account_id: string
  readonly credit_account_id: string
  readonly asset_code: string
  readonly amount: bigint
  readonly code: number
  readonly expires_at: string | null
  status: TransferStatus
  posted_amount: bigint | null
  resolved_at: string | null
}

/**
 * Rows by stream and id. Two levels rather than one concatenated key: a lookup then hashes the id
 * string it was given (V8 caches a string's hash) instead of building and hashing a new string.
 */
export class StreamMap<V> {
  readonly #streams = new Map<string, Map<string, V>>()
  #size = 0
  get size(): number {
    return this.#size
  }
  get(stream_id: string, id: string): V | undefined {
    return this.#streams.get(stream_id)?.get(id)
  }
  has(stream_id: string, id: string): boolean {
    return this.#streams.get(stream_id)?.has(id) === true
  }
  set(stream_id: string, id: string, value: V): void {
    let rows = this.#streams.get(stream_id)
    if (rows === undefined) {
      rows = new Map()
      this.#streams.set(stream_id, rows)
    }
    const before = rows.size
    rows.set(id, value)
    this.#size += rows.size - before
  }
  delete(stream_id: string, id: string): void {
    const rows = this.#streams.get(stream_id)
    if (rows?.delete(id) === true) this.#size -= 1
  }
  clear(): void {
    this.#streams.clear()
    this.#size = 0
  }
  *values(): IterableIterator<V> {
    for (const rows of this.#streams.values()) yield* rows.values()
  }
}
export const zeroBalances = (): Balances => ({
  debits_pending: 0n,
  debits_posted: 0n,
  credits_pending: 0n,
  credits_posted: 0n,
})

/**
 * The rows the fold reads and changes in place: every account the batch touches
 * and every stored pending transfer it resolves (more may be present: the caller's caches).
 */
export interface LedgerRows {
  readonly accounts: StreamMap<AccountRow>
  readonly pendings: StreamMap<StoredPending>
}

/** What a folded batch changed. */
export interface BatchWrites {
  /** Accounts whose balances changed or that were opened: their `delta` is unwritten. */
  readonly accounts: ReadonlySet<AccountRow>
  /** New transfer rows, in their final state for this batch. */
  readonly transfers: ReadonlyArray<TransferRow>
  /** Stored pending transfers that the batch resolved. */
  readonly resolved: ReadonlyArray<StoredPending>
  readonly applied_count: number
}

// ---- The fold. ----

class Fold {
  readonly accounts: StreamMap<AccountRow>
  readonly pendings: StreamMap<StoredPending>
  /** Transfer rows created by this batch, in order; pending ones are also resolved here. */
  readonly createdRows: TransferRow[] = []
  /** The pending ones among them, for the batch's own posts, voids and expiries. */
  readonly createdPendings = new StreamMap<TransferRow>()
  readonly resolvedStored: StoredPending[] = []
  readonly touched = new Set<AccountRow>()
  constructor(rows: LedgerRows) {
    this.accounts = rows.accounts
    this.pendings = rows.pendings
  }

  account(f: Fields, account_id: string, asset_code: string): AccountRow {
    const row = this.accounts.get(f.event.stream_id, account_id)
    if (row === undefined) return f.fail(`account ${account_id} does not exist`)
    if (row.asset_code !== asset_code) {
      return f.fail(`account ${account_id} holds ${row.asset_code}, not ${asset_code}`)
    }
    return row
  }

  move(f: Fields, row: AccountRow, field: keyof Balances, amount: bigint): void {
    const next = row.balances[field] + amount
    if (next < 0n) f.fail(`account ${row.account_id} ${field} would become negative`)
    row.balances[field] = next
    row.delta[field] += amount
    row.last_stream_version = f.event.stream_version
    this.touched.add(row)
  }

  checkLimits(f: Fields, row: AccountRow): void {
    const b = row.balances
    if (row.debits_must_not_exceed_credits && b.debits_pending + b.debits_posted > b.credits_posted) {
      f.fail(`account ${row.account_id} would be overdrawn (debits exceed credits)`)
    }
    if (row.credits_must_not_exceed_debits && b.credits_pending + b.credits_posted > b.debits_posted) {
      f.fail(`account ${row.account_id} credits would exceed its debits`)
    }
  }

  apply(event: ProjectedEvent): void {
    const f = new Fields(event)
    switch (event.event_type as LedgerEventType) {
      case "AccountOpened":
        this.open(f)
        break
      case "TransferCreated":
        this.create(f, "single")
        break
      case "PendingTransferCreated":
        this.create(f, "pending")
        break
      case "PendingTransferPosted":
        this.resolve(f, "posted")
        break
      case "PendingTransferVoided":
        this.resolve(f, "voided")
        break
      case "PendingTransferExpired":
        this.resolve(f, "expired")
        break
      default:
        f.fail("not a ledger event")
    }
  }

  open(f: Fields): void {
    const event = f.event
    const account_id = f.text("account_id")
    if (this.accounts.has(event.stream_id, account_id)) f.fail(`account ${account_id} is already open`)
    const asset = f.record("asset")
    const flags = f.record("flags")
    const row: AccountRow = {
      stream_id: event.stream_id,
      account_id,
      asset_code: f.nestedText(asset, "code"),
      debits_must_not_exceed_credits: f.nestedBoolean(flags, "debits_must_not_exceed_credits"),
      credits_must_not_exceed_debits: f.nestedBoolean(flags, "credits_must_not_exceed_debits"),
      opened: {
        tenant: f.nestedText(f.metadata(), "tenant"),
        environment: f.nestedText(f.metadata(), "environment"),
        symbol: f.nestedText(asset, "symbol"),
        chain: f.nestedText(asset, "chain"),
        decimals: f.integer("decimals", asset),
        kind: f.text("kind") as AccountKind,
        code: f.integer("code"),
        user_data: f.textOrNull("user_data"),
        opened_at: f.time("opened_at"),
      },
      balances: zeroBalances(),
      delta: zeroBalances(),
      last_stream_version: event.stream_version,
    }
    this.accounts.set(event.stream_id, account_id, row)
    this.touched.add(row)
  }

  create(f: Fields, kind: "single" | "pending"): void {
    const event = f.event
    const transfer_id = f.text("transfer_id")
    const asset_code = f.text("asset_code")
    const amount = f.amount("amount")
    const debit = this.account(f, f.text("debit_account_id"), asset_code)
    const credit = this.account(f, f.text("credit_account_id"), asset_code)
    if (debit === credit) f.fail("debit and credit accounts are the same")
    const phase = kind === "single" ? "posted" : "pending"
    this.move(f, debit, phase === "posted" ? "debits_posted" : "debits_pending", amount)
    this.move(f, credit, phase === "posted" ? "credits_posted" : "credits_pending", amount)
    this.checkLimits(f, debit)
    this.checkLimits(f, credit)
    this.add({
      stream_id: event.stream_id,
      transfer_id,
      kind,
      pending_id: null,
      debit_account_id: debit.account_id,
      credit_account_id: credit.account_id,
      asset_code,
      amount,
      posted_amount: kind === "single" ? amount : null,
      code: f.integer("code"),
      user_data: f.textOrNull("user_data"),
      linked_group_id: f.textOrNull("linked_group_id"),
      status: phase,
      created_at: f.time("created_at"),
      expires_at: kind === "pending" ? f.timeOrNull("expires_at") : null,
      resolved_at: null,
      stream_version: event.stream_version,
      global_position: event.global_position,
    })
  }

  /**
   * Records a new transfer row. A reused transfer id is left to the table's primary key to reject
   * (in this batch or any earlier one): one check, where the whole history is.
   */
  add(row: TransferRow): void {
    this.createdRows.push(row)
    if (row.kind === "pending") this.createdPendings.set(row.stream_id, row.transfer_id, row)
  }

  /** The pending transfer `pending_id`, created by this batch or loaded; it must still be pending. */
  pending(f: Fields, pending_id: string): TransferRow | StoredPending {
    const inBatch = this.createdPendings.get(f.event.stream_id, pending_id)
    const stored = inBatch === undefined ? this.pendings.get(f.event.stream_id, pending_id) : undefined
    const row = inBatch ?? stored
    if (row === undefined) return f.fail(`pending transfer ${pending_id} does not exist`)
    if (row.status !== "pending") f.fail(`pending transfer ${pending_id} is already ${row.status}`)
    if (stored !== undefined) this.resolvedStored.push(stored)
    return row
  }

  resolve(f: Fields, outcome: "posted" | "voided" | "expired"): void {
    const event = f.event
    const pending_id = f.text("pending_id")
    const row = this.pending(f, pending_id)
    const asset_code = row.asset_code
    const posted = outcome === "posted" ? f.amount("amount") : 0n
    if (posted > row.amount) f.fail(`posts ${posted}, more than the pending ${row.amount}`)
    const debit = this.account(f, row.debit_account_id, asset_code)
    const credit = this.account(f, row.credit_account_id, asset_code)
    this.move(f, debit, "debits_pending", -row.amount)
    this.move(f, credit, "credits_pending", -row.amount)
    this.move(f, debit, "debits_posted", posted)
    this.move(f, credit, "credits_posted", posted)
    this.checkLimits(f, debit)
    this.checkLimits(f, credit)
    const resolved_at = f.time(
      outcome === "posted" ? "posted_at" : outcome === "voided" ? "voided_at" : "expired_at",
    )
    if (
      outcome === "expired" &&
      (row.expires_at === null || Date.parse(resolved_at) < Date.parse(row.expires_at))
    ) {
      f.fail(`pending transfer ${pending_id} expired before its expiry time ${row.expires_at ?? "(never)"}`)
    }
    row.status = outcome
    row.posted_amount = posted
    row.resolved_at = resolved_at
    if (outcome === "expired") return
    // Posting and voiding are transfers of their own, with their own id.
    this.add({
      stream_id: event.stream_id,
      transfer_id: f.text("transfer_id"),
      kind: outcome === "posted" ? "post_pending" : "void_pending",
      pending_id,
      debit_account_id: row.debit_account_id,
      credit_account_id: row.credit_account_id,
      asset_code,
      amount: outcome === "posted" ? posted : row.amount,
      posted_amount: posted,
      code: row.code,
      user_data: null,
      linked_group_id: f.textOrNull("linked_group_id"),
      status: outcome,
      created_at: resolved_at,
      expires_at: null,
      resolved_at: null,
      stream_version: event.stream_version,
      global_position: event.global_position,
    })
  }
}

/**
 * Folds a batch of events over `rows`, changing them in place, and returns what changed. Non-ledger
 * events are skipped. Throws `ProjectionViolation` on the first event it cannot apply; `rows` are
 * then half-changed and must be discarded.
 * @example const writes = foldLedgerBatch({ accounts: new StreamMap(), pendings: new StreamMap() }, events)
 */
export const foldLedgerBatch = (rows: LedgerRows, events: ReadonlyArray<ProjectedEvent>): BatchWrites => {
  const fold = new Fold(rows)
  let applied_count = 0
  for (const event of events) {
    if (!ledgerTypes.has(event.event_type)) continue
    // Version 1 is the only one so far; a later one needs its upcaster here.
    if (event.schema_version !== ledgerEventSchemaVersion) {
      throw new ProjectionViolation(event, `schema version ${event.schema_version} is not known`)
    }
    fold.apply(event)
    applied_count += 1
  }
  return {
    accounts: fold.touched,
    transfers: fold.createdRows,
    resolved: fold.resolvedStored,
    applied_count,
  }
}
