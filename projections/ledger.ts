/**
 * The ledger projection: account balances and transfers, applied a batch at a time. The batch is
 * folded in memory (ledger-fold.ts) over the rows it touches and written with a handful of
 * set-based statements (COPY for new rows, one UPDATE from arrays for changed ones), whatever its
 * size. The applier keeps the accounts and open pending transfers it has seen, so that a batch
 * reads from the tables only what it has never seen; its owner discards them whenever a
 * transaction rolls back or another writer may have changed the tables.
 */
import type pg from "pg"
import {
  type AccountRow,
  foldLedgerBatch,
  isLedgerEvent,
  type OpenedAccount,
  type StoredPending,
  StreamMap,
  type TransferRow,
  type TransferStatus,
  zeroBalances,
} from "./ledger-fold.ts"
import { copyField, copyRows } from "./pg-copy.ts"
import type { ProjectedEvent, ProjectionApplier, ProjectionDefinition } from "./projection.ts"
import { schemaIdentifier } from "./schema.ts"

export { foldLedgerBatch, isLedgerEvent, ProjectionViolation, StreamMap } from "./ledger-fold.ts"

/** The name of this projection in checkpoints, progress notifications and advisory locks. */
export const ledger_projection_name = "ledger"

const dataText = (event: ProjectedEvent, field: string): string | undefined => {
  const value = event.data[field]
  return typeof value === "string" ? value : undefined
}

/**
 * (stream, id) pairs not in `known`, without repeats, as two parallel arrays: the shape that
 * `unnest($1::text[], $2::text[])` takes.
 */
class KeyList {
  readonly streams: string[] = []
  readonly ids: string[] = []
  readonly #seen = new StreamMap<true>()
  readonly #known: StreamMap<unknown>
  constructor(known: StreamMap<unknown>) {
    this.#known = known
  }
  add(stream_id: string, id: string | undefined): void {
    if (id === undefined || this.#known.has(stream_id, id) || this.#seen.has(stream_id, id)) return
    this.#seen.set(stream_id, id, true)
    this.streams.push(stream_id)
    this.ids.push(id)
  }
}

interface PendingRecord {
  readonly stream_id: string
  readonly transfer_id: string
  readonly debit_account_id: string
  readonly credit_account_id: string
  readonly asset_code: string
  readonly amount: string
  readonly code: number
  readonly expires_at: string | null
  readonly status: TransferStatus
  readonly posted_amount: string | null
  readonly resolved_at: string | null
}

interface AccountRecord {
  readonly stream_id: string
  readonly account_id: string
  readonly asset_code: string
  readonly debits_must_not_exceed_credits: boolean
  readonly credits_must_not_exceed_debits: boolean
  readonly debits_pending: string
  readonly debits_posted: string
  readonly credits_pending: string
  readonly credits_posted: string
  readonly last_stream_version: number
}

const loadPendings = async (
  client: pg.ClientBase,
  s: string,
  keys: KeyList,
  into: StreamMap<StoredPending>,
) => {
  if (keys.ids.length === 0) return
  const found = await client.query<PendingRecord>(
    `select t.stream_id, t.transfer_id, t.debit_account_id, t.credit_account_id, t.asset_code, t.amount, t.code,
            to_json(t.expires_at) #>> '{}' as expires_at, t.status, t.posted_amount,
            to_json(t.resolved_at) #>> '{}' as resolved_at
       from unnest($1::text[], $2::text[]) as k(stream_id, transfer_id)
       join ${s}.ledger_transfers t using (stream_id, transfer_id)
      where t.kind = 'pending'`,
    [keys.streams, keys.ids],
  )
  for (const r of found.rows) {
    into.set(r.stream_id, r.transfer_id, {
      ...r,
      amount: BigInt(r.amount),
      posted_amount: r.posted_amount === null ? null : BigInt(r.posted_amount),
    })
  }
}

const loadAccounts = async (client: pg.ClientBase, s: string, keys: KeyList, into: StreamMap<AccountRow>) => {
  if (keys.ids.length === 0) return
  const found = await client.query<AccountRecord>(
    `select a.stream_id, a.account_id, a.asset_code, a.debits_must_not_exceed_credits,
            a.credits_must_not_exceed_debits, a.debits_pending, a.debits_posted, a.credits_pending,
            a.credits_posted, a.last_stream_version
       from unnest($1::text[], $2::text[]) as k(stream_id, account_id)
       join ${s}.ledger_accounts a using (stream_id, account_id)`,
    [keys.streams, keys.ids],
  )
  for (const r of found.rows) {
    into.set(r.stream_id, r.account_id, {
      stream_id: r.stream_id,
      account_id: r.account_id,
      asset_code: r.asset_code,
      debits_must_not_exceed_credits: r.debits_must_not_exceed_credits,
      credits_must_not_exceed_debits: r.credits_must_not_exceed_debits,
      opened: undefined,
      balances: {
        debits_pending: BigInt(r.debits_pending),
        debits_posted: BigInt(r.debits_posted),
        credits_pending: BigInt(r.credits_pending),
        credits_posted: BigInt(r.credits_posted),
      },
      delta: zeroBalances(),
      last_stream_version: r.last_stream_version,
    })
  }
}

/**
 * Loads into the maps the accounts and pending transfers that `events` refer to and the maps lack:
 * two statements at most.
 */
const loadMissing = async (
  client: pg.ClientBase,
  s: string,
  events: ReadonlyArray<ProjectedEvent>,
  accounts: StreamMap<AccountRow>,
  pendings: StreamMap<StoredPending>,
): Promise<void> => {
  const accountKeys = new KeyList(accounts)
  // Pending transfers created by this batch are not in the table yet: no need to look for them.
  const createdHere = new StreamMap<true>()
  const pendingKeys = new KeyList(pendings)
  const pendingRefs: Array<readonly [string, string]> = []
  for (const event of events) {
    const type = event.event_type
    if (type === "AccountOpened") accountKeys.add(event.stream_id, dataText(event, "account_id"))
    else if (type === "TransferCreated" || type === "PendingTransferCreated") {
      accountKeys.add(event.stream_id, dataText(event, "debit_account_id"))
      accountKeys.add(event.stream_id, dataText(event, "credit_account_id"))
      const transfer_id = dataText(event, "transfer_id")
      if (type === "PendingTransferCreated" && transfer_id !== undefined) {
        createdHere.set(event.stream_id, transfer_id, true)
      }
    } else if (isLedgerEvent(event)) {
      const pending_id = dataText(event, "pending_id")
      if (pending_id === undefined) continue
      pendingRefs.push([event.stream_id, pending_id])
      if (!createdHere.has(event.stream_id, pending_id)) pendingKeys.add(event.stream_id, pending_id)
    }
  }
  await loadPendings(client, s, pendingKeys, pendings)
  // A pending transfer names its accounts only in its row, so those are loaded second.
  for (const [stream_id, pending_id] of pendingRefs) {
    const pending = pendings.get(stream_id, pending_id)
    if (pending === undefined) continue
    accountKeys.add(stream_id, pending.debit_account_id)
    accountKeys.add(stream_id, pending.credit_account_id)
  }
  await loadAccounts(client, s, accountKeys, accounts)
}

/** Thrown when a write touches a different number of rows than the fold expects: a concurrent writer. */
const expectCount = (what: string, actual: number | null, expected: number): void => {
  if (actual !== expected)
    throw new Error(`ledger projection: ${what} touched ${actual} rows, expected ${expected}`)
}

const accountColumns = [
  "stream_id",
  "account_id",
  "tenant",
  "environment",
  "asset_code",
  "symbol",
  "chain",
  "decimals",
  "kind",
  "debits_must_not_exceed_credits",
  "credits_must_not_exceed_debits",
  "code",
  "user_data",
  "debits_pending",
  "debits_posted",
  "credits_pending",
  "credits_posted",
  "opened_at",
  "last_stream_version",
]

const accountLine = (r: AccountRow, o: OpenedAccount): string =>
  `${copyField(r.stream_id)}\t${copyField(r.account_id)}\t${copyField(o.tenant)}\t${copyField(o.environment)}\t` +
  `${copyField(r.asset_code)}\t${copyField(o.symbol)}\t${copyField(o.chain)}\t${o.decimals}\t${copyField(o.kind)}\t` +
  `${r.debits_must_not_exceed_credits}\t${r.credits_must_not_exceed_debits}\t${o.code}\t${copyField(o.user_data)}\t` +
  `${r.balances.debits_pending}\t${r.balances.debits_posted}\t${r.balances.credits_pending}\t` +
  `${r.balances.credits_posted}\t${o.opened_at}\t${r.last_stream_version}\n`

/** Inserts opened accounts with their balances and adds net changes to the others. */
const writeAccounts = async (client: pg.ClientBase, s: string, rows: Iterable<AccountRow>): Promise<void> => {
  let opened = ""
  let opened_count = 0
  const changed: AccountRow[] = []
  for (const row of rows) {
    if (row.opened !== undefined) {
      opened += accountLine(row, row.opened)
      opened_count += 1
    } else changed.push(row)
  }
  if (opened_count > 0) {
    expectCount(
      "account insert",
      await copyRows(client, `${s}.ledger_accounts`, accountColumns, opened),
      opened_count,
    )
  }
  if (changed.length === 0) return
  const result = await client.query(
    `update ${s}.ledger_accounts a
        set debits_pending = a.debits_pending + d.debits_pending,
            debits_posted = a.debits_posted + d.debits_posted,
            credits_pending = a.credits_pending + d.credits_pending,
            credits_posted = a.credits_posted + d.credits_posted,
            last_stream_version = greatest(a.last_stream_version, d.last_stream_version)
       from unnest($1::text[], $2::text[], $3::numeric[], $4::numeric[], $5::numeric[], $6::numeric[], $7::int[])
            as d(stream_id, account_id, debits_pending, debits_posted, credits_pending, credits_posted,
                 last_stream_version)
      where a.stream_id = d.stream_id and a.account_id = d.account_id`,
    [
      changed.map((r) => r.stream_id),
      changed.map((r) => r.account_id),
      changed.map((r) => r.delta.debits_pending.toString()),
      changed.map((r) => r.delta.debits_posted.toString()),
      changed.map((r) => r.delta.credits_pending.toString()),
      changed.map((r) => r.delta.credits_posted.toString()),
      changed.map((r) => r.last_stream_version),
    ],
  )
  expectCount("account update", result.rowCount, changed.length)
}

const transferColumns = [
  "stream_id",
  "transfer_id",
  "kind",
  "pending_id",
  "debit_account_id",
  "credit_account_id",
  "asset_code",
  "amount",
  "posted_amount",
  "code",
  "user_data",
  "linked_group_id",
  "status",
  "created_at",
  "expires_at",
  "resolved_at",
  "stream_version",
  "global_position",
]

const transferLine = (r: TransferRow): string =>
  `${copyField(r.stream_id)}\t${copyField(r.transfer_id)}\t${r.kind}\t${copyField(r.pending_id)}\t` +
  `${copyField(r.debit_account_id)}\t${copyField(r.credit_account_id)}\t${copyField(r.asset_code)}\t${r.amount}\t` +
  `${copyField(r.posted_amount)}\t${r.code}\t${copyField(r.user_data)}\t${copyField(r.linked_group_id)}\t` +
  `${r.status}\t${r.created_at}\t${copyField(r.expires_at)}\t${copyField(r.resolved_at)}\t${r.stream_version}\t` +
  `${r.global_position}\n`

/** The serialized writes of one folded batch: fixed at `prepare`, whatever later batches change. */
export interface PreparedBatch {
  readonly event_count: number
  /** New transfer rows, in COPY text format. */
  readonly transfer_rows: string
  readonly transfer_count: number
  /** Stored pending transfers resolved by the batch, as the parameter arrays of `resolveSql`. */
  readonly resolved: ReadonlyArray<ReadonlyArray<string | null>>
  readonly resolved_count: number
}

const prepareWrites = (transfers: ReadonlyArray<TransferRow>, resolved: ReadonlyArray<StoredPending>) => {
  let transfer_rows = ""
  for (const row of transfers) transfer_rows += transferLine(row)
  return {
    transfer_rows,
    transfer_count: transfers.length,
    resolved: [
      resolved.map((r) => r.stream_id),
      resolved.map((r) => r.transfer_id),
      resolved.map((r) => r.status),
      resolved.map((r) => (r.posted_amount === null ? null : r.posted_amount.toString())),
      resolved.map((r) => r.resolved_at),
    ],
    resolved_count: resolved.length,
  }
}

/** Resolves pending transfers stored by earlier batches; each must still be pending in the table. */
const resolveSql = (s: string) => `
  update ${s}.ledger_transfers t
     set status = u.status, posted_amount = u.posted_amount, resolved_at = u.resolved_at
    from unnest($1::text[], $2::text[], $3::text[], $4::numeric[], $5::timestamptz[])
         as u(stream_id, transfer_id, status, posted_amount, resolved_at)
   where t.stream_id = u.stream_id and t.transfer_id = u.transfer_id and t.status = 'pending'`

export interface LedgerApplierOptions {
  /**
   * Hold account balances back until this many events have been written (rebuilds, whose tables
   * nobody reads until they are complete); 0 writes them with every batch. `flush` writes them.
   */
  readonly account_flush_event_count?: number
  /** The caches are emptied (after writing) when they grow past this many rows each. */
  readonly cache_row_count_max?: number
  /**
   * The tables are empty and only this applier writes them (a rebuild's shadow): until its caches
   * are first emptied they hold every row, and a row they lack is not looked for in the tables.
   */
  readonly tables_start_empty?: boolean
}

/** The ledger projection's applier; see `ProjectionApplier`. One per runner or rebuild. */
export class LedgerApplier implements ProjectionApplier<PreparedBatch> {
  readonly #accounts = new StreamMap<AccountRow>()
  /** Pending transfers in the table that are still pending. */
  readonly #pendings = new StreamMap<StoredPending>()
  /** Accounts with unwritten changes. */
  readonly #dirty = new Set<AccountRow>()
  readonly #flush_event_count: number
  readonly #cache_row_count_max: number
  #held_event_count = 0
  /** The caches hold every row of the tables. */
  #complete: boolean

  constructor(options: LedgerApplierOptions = {}) {
    this.#flush_event_count = options.account_flush_event_count ?? 0
    this.#cache_row_count_max = options.cache_row_count_max ?? 500_000
    this.#complete = options.tables_start_empty ?? false
  }

  async apply(client: pg.ClientBase, schema: string, events: ReadonlyArray<ProjectedEvent>): Promise<void> {
    const s = schemaIdentifier(schema)
    if (!this.#complete) await loadMissing(client, s, events, this.#accounts, this.#pendings)
    await this.write(client, s, this.prepare(events))
  }

  needsReads(): boolean {
    return !this.#complete
  }

  prepare(events: ReadonlyArray<ProjectedEvent>): PreparedBatch {
    const writes = foldLedgerBatch({ accounts: this.#accounts, pendings: this.#pendings }, events)
    for (const resolved of writes.resolved) this.#pendings.delete(resolved.stream_id, resolved.transfer_id)
    for (const row of writes.transfers) {
      if (row.status === "pending") this.#pendings.set(row.stream_id, row.transfer_id, row)
    }
    for (const account of writes.accounts) this.#dirty.add(account)
    // Serialized now: a later batch may resolve, in place, a pending transfer this one created.
    return { event_count: events.length, ...prepareWrites(writes.transfers, writes.resolved) }
  }

  async write(
    client: pg.ClientBase,
    schema: string,
    prepared: PreparedBatch,
    meanwhile?: () => void,
  ): Promise<void> {
    const s = schemaIdentifier(schema)
    if (prepared.transfer_count > 0) {
      const copying = copyRows(client, `${s}.ledger_transfers`, transferColumns, prepared.transfer_rows)
      meanwhile?.()
      expectCount("transfer insert", await copying, prepared.transfer_count)
    } else meanwhile?.()
    if (prepared.resolved_count > 0) {
      const result = await client.query(resolveSql(s), [...prepared.resolved])
      expectCount("pending transfer update", result.rowCount, prepared.resolved_count)
    }
    this.#held_event_count += prepared.event_count
    if (this.#held_event_count >= this.#flush_event_count) await this.flush(client, s)
  }

  async flush(client: pg.ClientBase, schema: string): Promise<void> {
    await writeAccounts(client, schemaIdentifier(schema), this.#dirty)
    for (const account of this.#dirty) {
      account.opened = undefined
      Object.assign(account.delta, zeroBalances())
    }
    this.#dirty.clear()
    this.#held_event_count = 0
    // Everything is written, so forgetting rows only costs reads later.
    if (this.#accounts.size > this.#cache_row_count_max || this.#pendings.size > this.#cache_row_count_max) {
      this.#accounts.clear()
      this.#pendings.clear()
      this.#complete = false
    }
  }

  discard(): void {
    this.#accounts.clear()
    this.#pendings.clear()
    this.#dirty.clear()
    this.#held_event_count = 0
    this.#complete = false
  }
}

/** The ledger projection as the runner and rebuild take it. */
export const ledgerProjection: ProjectionDefinition = {
  name: ledger_projection_name,
  /** Only an opened account records something of its event's metadata (tenant, environment). */
  metadata_for: ["AccountOpened"],
  open: (mode) =>
    // A rebuild writes account balances once, when it is done (`flush`): nobody reads its tables.
    new LedgerApplier(
      mode === "rebuild"
        ? { account_flush_event_count: Number.POSITIVE_INFINITY, tables_start_empty: true }
        : {},
    ),
}
