/**
 * The ledger's read API over the projection in `read_model`: accounts with their four balances and
 * transfers with their status, with cursor pagination. The projection lags the event store by a
 * batch; the `...Consistent` variants first wait until it has applied the stream up to the head the
 * event store has now, so that a read after an acknowledged write reflects the write.
 */
import { Data } from "effect"
import type pg from "pg"
import { ledger_projection_name } from "../../projections/ledger.ts"
import type { TransferKind, TransferStatus } from "../../projections/ledger-fold.ts"
import { idHashMatch, live_schema } from "../../projections/schema.ts"
import { type Page, toPage } from "../db/page.ts"
import { sleep } from "../projections/runner.ts"

const s = live_schema

/** A list or wait parameter is out of range or names nothing; `param` is its name. */
export class InvalidQueryParameter extends Data.TaggedError("InvalidQueryParameter")<{
  readonly param: string
  readonly message: string
}> {}

/** The projection did not reach `min_version` of the stream within `timeout_ms`. */
export class ProjectionTimeout extends Data.TaggedError("ProjectionTimeout")<{
  readonly stream_id: string
  readonly min_version: number
  /** The version the projection had reached when the wait gave up (0: none of the stream). */
  readonly reached_version: number
  readonly timeout_ms: number
}> {}

export interface LedgerAccount {
  readonly stream_id: string
  readonly account_id: string
  readonly tenant: string
  readonly environment: string
  readonly asset: {
    readonly code: string
    readonly symbol: string
    readonly chain: string
    readonly decimals: number
  }
  readonly kind: string
  readonly flags: {
    readonly debits_must_not_exceed_credits: boolean
    readonly credits_must_not_exceed_debits: boolean
  }
  readonly code: number
  readonly user_data: string | null
  readonly debits_pending: bigint
  readonly debits_posted: bigint
  readonly credits_pending: bigint
  readonly credits_posted: bigint
  readonly opened_at: string
  /** The stream version of the last event that changed this account. */
  readonly last_stream_version: number
}

export type { TransferKind, TransferStatus }

export interface LedgerTransfer {
  readonly stream_id: string
  readonly transfer_id: string
  readonly kind: TransferKind
  /** The pending transfer that a post_pending or void_pending transfer resolves. */
  readonly pending_id: string | null
  readonly debit_account_id: string
  readonly credit_account_id: string
  readonly asset_code: string
  readonly amount: bigint
  /** What reached posted balances: the amount (single), the posted part (resolved pending), null while pending. */
  readonly posted_amount: bigint | null
  readonly code: number
  readonly user_data: string | null
  readonly linked_group_id: string | null
  readonly status: TransferStatus
  readonly created_at: string
  readonly expires_at: string | null
  /** When a pending transfer was posted, voided or expired. */
  readonly resolved_at: string | null
  readonly stream_version: number
  readonly global_position: bigint
}

/** One page of a list: `next_cursor` is the `starting_after` of the next page, null on the last. */
export type { Page } from "../db/page.ts"

// pg returns numeric and bigint columns as strings, which BigInt() reads exactly.
const accountColumns = `stream_id, account_id, tenant, environment, asset_code, symbol, chain, decimals, kind,
  debits_must_not_exceed_credits, credits_must_not_exceed_debits, code, user_data, debits_pending,
  debits_posted, credits_pending, credits_posted, opened_at, last_stream_version`

const transferColumns = `stream_id, transfer_id, kind, pending_id, debit_account_id, credit_account_id, asset_code,
  amount, posted_amount, code, user_data, linked_group_id, status, created_at, expires_at, resolved_at,
  stream_version, global_position`

interface AccountRecord {
  stream_id: string
  account_id: string
  tenant: string
  environment: string
  asset_code: string
  symbol: string
  chain: string
  decimals: number
  kind: string
  debits_must_not_exceed_credits: boolean
  credits_must_not_exceed_debits: boolean
  code: number
  user_data: string | null
  debits_pending: string
  debits_posted: string
  credits_pending: string
  credits_posted: string
  opened_at: Date
  last_stream_version: number
}

interface TransferRecord {
  stream_id: string
  transfer_id: string
  kind: TransferKind
  pending_id: string | null
  debit_account_id: string
  credit_account_id: string
  asset_code: string
  amount: string
  posted_amount: string | null
  code: number
  user_data: string | null
  linked_group_id: string | null
  status: TransferStatus
  created_at: Date
  expires_at: Date | null
  resolved_at: Date | null
  stream_version: number
  global_position: string
}

const toAccount = (r: AccountRecord): LedgerAccount => ({
  stream_id: r.stream_id,
  account_id: r.account_id,
  tenant: r.tenant,
  environment: r.environment,
  asset: { code: r.asset_code, symbol: r.symbol, chain: r.chain, decimals: r.decimals },
  kind: r.kind,
  flags: {
    debits_must_not_exceed_credits: r.debits_must_not_exceed_credits,
    credits_must_not_exceed_debits: r.credits_must_not_exceed_debits,
  },
  code: r.code,
  user_data: r.user_data,
  debits_pending: BigInt(r.debits_pending),
  debits_posted: BigInt(r.debits_posted),
  credits_pending: BigInt(r.credits_pending),
  credits_posted: BigInt(r.credits_posted),
  opened_at: r.opened_at.toISOString(),
  last_stream_version: r.last_stream_version,
})

const isoOrNull = (d: Date | null): string | null => (d === null ? null : d.toISOString())

const toTransfer = (r: TransferRecord): LedgerTransfer => ({
  stream_id: r.stream_id,
  transfer_id: r.transfer_id,
  kind: r.kind,
  pending_id: r.pending_id,
  debit_account_id: r.debit_account_id,
  credit_account_id: r.credit_account_id,
  asset_code: r.asset_code,
  amount: BigInt(r.amount),
  posted_amount: r.posted_amount === null ? null : BigInt(r.posted_amount),
  code: r.code,
  user_data: r.user_data,
  linked_group_id: r.linked_group_id,
  status: r.status,
  created_at: r.created_at.toISOString(),
  expires_at: isoOrNull(r.expires_at),
  resolved_at: isoOrNull(r.resolved_at),
  stream_version: r.stream_version,
  global_position: BigInt(r.global_position),
})

/**
 * One account of a ledger stream, or undefined.
 * @example const wallet = await getAccount(pool, "ledger-acme-sandbox", walletId)
 */
export const getAccount = async (
  pool: pg.Pool,
  stream_id: string,
  account_id: string,
): Promise<LedgerAccount | undefined> => {
  const found = await pool.query<AccountRecord>(
    `select ${accountColumns} from ${s}.ledger_accounts where stream_id = $1 and account_id = $2`,
    [stream_id, account_id],
  )
  const row = found.rows[0]
  return row === undefined ? undefined : toAccount(row)
}

/**
 * One transfer of a ledger stream, or undefined.
 * @example const transfer = await getTransfer(pool, "ledger-acme-sandbox", transferId)
 */
export const getTransfer = async (
  pool: pg.Pool,
  stream_id: string,
  transfer_id: string,
): Promise<LedgerTransfer | undefined> => {
  const found = await pool.query<TransferRecord>(
    `select ${transferColumns} from ${s}.ledger_transfers where stream_id = $1 and transfer_id = $2`,
    [stream_id, transfer_id],
  )
  const row = found.rows[0]
  return row === undefined ? undefined : toTransfer(row)
}

export const list_limit_max = 100
const list_limit_default = 20

const checkLimit = (limit: number | undefined): number => {
  const value = limit ?? list_limit_default
  if (!Number.isInteger(value) || value < 1 || value > list_limit_max) {
    throw new InvalidQueryParameter({
      param: "limit",
      message: `limit must be an integer from 1 to ${list_limit_max}`,
    })
  }
  return value
}

export interface ListAccountsOptions {
  /** 1..100, default 10. */
  readonly limit?: number
  /** An account id: the page starts after it (accounts are listed by id, ascending). */
  readonly starting_after?: string
  readonly kind?: string
  readonly asset_code?: string
}

/**
 * The accounts of a ledger stream, by account id (UUID v7 ids: oldest first).
 * @example const { data, has_more, next_cursor } = await listAccounts(pool, stream, { limit: 50 })
 */
export const listAccounts = async (
  pool: pg.Pool,
  stream_id: string,
  options: ListAccountsOptions = {},
): Promise<Page<LedgerAccount>> => {
  const limit = checkLimit(options.limit)
  const found = await pool.query<AccountRecord>(
    `select ${accountColumns} from ${s}.ledger_accounts
      where stream_id = $1 and ($2::text is null or account_id > $2)
        and ($3::text is null or kind = $3) and ($4::text is null or asset_code = $4)
      order by account_id limit $5`,
    [stream_id, options.starting_after ?? null, options.kind ?? null, options.asset_code ?? null, limit + 1],
  )
  return toPage(found.rows, limit, toAccount, (a) => a.account_id)
}

export interface ListTransfersOptions {
  /** 1..100, default 10. */
  readonly limit?: number
  /** A transfer id of this stream: the page starts after it (transfers are listed newest first). */
  readonly starting_after?: string
  /** Transfers that debit or credit this account. */
  readonly account_id?: string
  readonly status?: TransferStatus
  /** Inclusive lower bound on `created_at`, ISO 8601. */
  readonly created_at_gte?: string
  /** Exclusive upper bound on `created_at`, ISO 8601. */
  readonly created_at_lt?: string
}

const statuses: ReadonlyArray<TransferStatus> = ["posted", "pending", "voided", "expired"]

const checkTime = (param: string, value: string | undefined): string | null => {
  if (value === undefined) return null
  if (Number.isNaN(Date.parse(value)))
    throw new InvalidQueryParameter({ param, message: `${param} must be an ISO 8601 time` })
  return value
}

/** Where the `starting_after` transfer sorts: its creation time and position. It must exist. */
const cursorOf = async (pool: pg.Pool, stream_id: string, transfer_id: string | undefined) => {
  if (transfer_id === undefined) return { created_at: null, global_position: null }
  const found = await pool.query<{ created_at: string; global_position: string }>(
    `select created_at::text, global_position from ${s}.ledger_transfers where stream_id = $1 and transfer_id = $2`,
    [stream_id, transfer_id],
  )
  const row = found.rows[0]
  if (row === undefined) {
    throw new InvalidQueryParameter({
      param: "starting_after",
      message: `no transfer ${transfer_id} in ${stream_id}`,
    })
  }
  return row
}

/**
 * The transfers of a ledger stream, newest first (by creation time, then position), filtered by
 * account, status and creation time.
 * @example const page = await listTransfers(pool, stream, { account_id: wallet, status: "pending", limit: 20 })
 */
export const listTransfers = async (
  pool: pg.Pool,
  stream_id: string,
  options: ListTransfersOptions = {},
): Promise<Page<LedgerTransfer>> => {
  const limit = checkLimit(options.limit)
  if (options.status !== undefined && !statuses.includes(options.status)) {
    throw new InvalidQueryParameter({
      param: "status",
      message: `status must be one of ${statuses.join(", ")}`,
    })
  }
  const cursor = await cursorOf(pool, stream_id, options.starting_after)
  const params: unknown[] = [
    stream_id,
    options.status ?? null,
    checkTime("created_at_gte", options.created_at_gte),
    checkTime("created_at_lt", options.created_at_lt),
    cursor.created_at,
    cursor.global_position,
    limit + 1,
  ]
  const filters = `($2::text is null or status = $2)
    and ($3::timestamptz is null or created_at >= $3) and ($4::timestamptz is null or created_at < $4)
    and ($5::timestamptz is null or (created_at, global_position) < ($5::timestamptz, $6::bigint))`
  const order = "order by created_at desc, global_position desc limit $7"
  const branch = (key: string) =>
    `(select ${transferColumns} from ${s}.ledger_transfers where ${key} and ${filters} ${order})`
  // An account appears on either side of a transfer: two index scans merged, each already in order.
  const sql =
    options.account_id === undefined
      ? branch(idHashMatch("stream_id", "$1"))
      : `select * from (${branch(`${idHashMatch("debit_account_id", "$8")} and stream_id = $1`)} union all ${branch(
          `${idHashMatch("credit_account_id", "$8")} and stream_id = $1`,
        )}) t ${order}`
  if (options.account_id !== undefined) params.push(options.account_id)
  const found = await pool.query<TransferRecord>(sql, params)
  return toPage(found.rows, limit, toTransfer, (t) => t.transfer_id)
}

/** The version of a stream's last event in the event store (its head), 0 if it has none. */
export const streamHead = async (pool: pg.Pool, stream_id: string): Promise<number> => {
  const found = await pool.query<{ version: string }>(
    "select version::text from streams where stream_id = $1",
    [stream_id],
  )
  return Number(found.rows[0]?.version ?? 0)
}

/** The last version of `stream_id` that the projection has applied, 0 if none. */
export const projectedVersion = async (
  pool: pg.Pool,
  stream_id: string,
  projection: string = ledger_projection_name,
): Promise<number> => {
  const found = await pool.query<{ version: number }>(
    `select version from ${s}.projection_streams where projection = $1 and stream_id = $2`,
    [projection, stream_id],
  )
  return found.rows[0]?.version ?? 0
}

const poll_interval_ms_min = 1
const poll_interval_ms_max = 25
const wait_timeout_ms_max = 60_000

/**
 * Resolves once the projection has applied `stream_id` up to `min_version`; throws
 * `ProjectionTimeout` after `timeout_ms`. It polls one primary-key row with a backoff from 1 to
 * 25 ms: no connection is held while waiting, so any number of readers can wait at once.
 * @example await waitForProjection(pool, stream, appended.next_expected_version, 3_000)
 */
export const waitForProjection = async (
  pool: pg.Pool,
  stream_id: string,
  min_version: number,
  timeout_ms: number,
  projection: string = ledger_projection_name,
): Promise<void> => {
  if (!Number.isInteger(timeout_ms) || timeout_ms < 0 || timeout_ms > wait_timeout_ms_max) {
    throw new InvalidQueryParameter({
      param: "timeout_ms",
      message: `timeout_ms must be 0..${wait_timeout_ms_max}`,
    })
  }
  const deadline = Date.now() + timeout_ms
  let interval_ms = poll_interval_ms_min
  for (;;) {
    const reached = await projectedVersion(pool, stream_id, projection)
    if (reached >= min_version) return
    const left_ms = deadline - Date.now()
    if (left_ms <= 0)
      throw new ProjectionTimeout({ stream_id, min_version, reached_version: reached, timeout_ms })
    await sleep(Math.min(interval_ms, left_ms))
    interval_ms = Math.min(interval_ms * 2, poll_interval_ms_max)
  }
}

/** Waits until the projection has applied everything the stream holds now (see `waitForProjection`). */
export const waitForStreamHead = async (
  pool: pg.Pool,
  stream_id: string,
  timeout_ms: number,
): Promise<void> => waitForProjection(pool, stream_id, await streamHead(pool, stream_id), timeout_ms)

/** `getAccount` after the projection has caught up with the stream's current head. */
export const getAccountConsistent = async (
  pool: pg.Pool,
  stream_id: string,
  account_id: string,
  timeout_ms: number,
): Promise<LedgerAccount | undefined> => {
  await waitForStreamHead(pool, stream_id, timeout_ms)
  return getAccount(pool, stream_id, account_id)
}

/** `getTransfer` after the projection has caught up with the stream's current head. */
export const getTransferConsistent = async (
  pool: pg.Pool,
  stream_id: string,
  transfer_id: string,
  timeout_ms: number,
): Promise<LedgerTransfer | undefined> => {
  await waitForStreamHead(pool, stream_id, timeout_ms)
  return getTransfer(pool, stream_id, transfer_id)
}

/** `listTransfers` after the projection has caught up with the stream's current head. */
export const listTransfersConsistent = async (
  pool: pg.Pool,
  stream_id: string,
  options: ListTransfersOptions,
  timeout_ms: number,
): Promise<Page<LedgerTransfer>> => {
  await waitForStreamHead(pool, stream_id, timeout_ms)
  return listTransfers(pool, stream_id, options)
}
