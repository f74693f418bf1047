/**
 * The reconciliation job: per tenant, environment, chain and token, compares what the ledger owes
 * with what the tenant's custody addresses hold on chain (domain/chains/reconciliation.ts), stores the
 * latest report per group and hands every report to `onReport` (the composition root logs drift).
 *
 * Reading order matters because nothing freezes the chain while the ledger is read. The money in
 * flight is read first: the outgoing transfers signed and not settled, the deposits seen but not
 * credited, and the platform's own transfers into the tenant's custody addresses that no deposit row
 * holds yet (between two custody wallets the money is on the recipient's address before the watcher
 * sees it). Then the ledger side (after the projection caught up with the ledger's head), then the
 * chain. A transfer settled or a deposit credited between the first two reads is counted in both
 * (it only widens the tolerance), never in neither. What can slip through is money that moved on chain after the
 * ledger read without the platform knowing yet (a deposit mined in that instant): a group found
 * drifting is therefore read again after `recheck_delay_ms`, and only drift found twice is reported.
 *
 * Each group is reconciled on its own: a chain whose node cannot be read (down, unreachable, failing)
 * gets an `unavailable` report carrying the error and the figures of its last complete read (both
 * sides, so they agree), and the run goes on with the other groups, so one dead node
 * never hides drift on the healthy chains. A failure of the database is no chain's fault and still
 * fails the run.
 *
 * Ledger liabilities are the posted balances of every account of the asset except the two that stand
 * for the outside world: the sandbox faucet (`world`) and the chain custody account (`chain_custody`,
 * the clearing account between chain and ledger). By double entry that equals the money that came in
 * (faucet, deposits) minus the money that left (settled transfers).
 */
import { Effect } from "effect"
import type pg from "pg"
import { type ReconciliationOutcome, reconcile } from "../../domain/chains/reconciliation.ts"
import type { TokenSymbol } from "../../domain/chains/registry.ts"
import { ledgerStreamId } from "../../domain/ledger/events.ts"
import { formatAmount } from "../../domain/money/amount.ts"
import type { Asset } from "../../domain/money/asset.ts"
import type { Environment } from "../../domain/platform/scopes.ts"
import { tokenAsset, type WalletChain } from "../../domain/platform/tokens.ts"
import { mintTallyKey } from "../chains/mint-tally.ts"
import { makeLockHolder } from "../db/lost-sessions.ts"
import { waitForStreamHead } from "../ledger/queries.ts"
import { ledgerOf } from "../platform/accounts.ts"
import type { ChainsService, RunningChain } from "../ports/chains.ts"

/** How long a run waits for the ledger projection to reach the ledger's head. */
const projection_wait_ms = 5_000
/** Balance reads one group sends to its chain at once. */
const balance_read_concurrency = 8
/** Longest chain error kept in an `unavailable` report (a node's errors can carry whole requests). */
const chain_error_length_max = 500

/** One account or custody address of a group, as the report lists it. */
export interface ReconciliationAccount {
  /** The ledger account, or null for a custody address without one. */
  readonly account_id: string | null
  /** The ledger account's kind (`wallet`, `fee_revenue`, `clearing`), or `custody_address`. */
  readonly kind: string
  readonly wallet_id: string | null
  /** The wallet's custody address on this chain, or null for an account with no address here. */
  readonly address: string | null
  readonly ledger_balance: bigint | null
  readonly on_chain_balance: bigint | null
}

/**
 * A report's status: the rule's outcome (domain/chains/reconciliation.ts), or `unavailable` when the
 * chain could not be read, in which case no outcome was decided.
 */
export type ReportStatus = ReconciliationOutcome["status"] | "unavailable"

export interface ReconciliationReport extends Omit<ReconciliationOutcome, "status" | "difference" | "drift"> {
  readonly status: ReportStatus
  readonly tenant_id: string
  readonly environment: Environment
  readonly chain: string
  readonly token: TokenSymbol
  readonly decimals: number
  readonly ledger_balance: bigint
  /**
   * What the custody addresses hold, and the outcome's figures: null only in an `unavailable`
   * report of a group never read completely (there is no on-chain side to show).
   */
  readonly on_chain_balance: bigint | null
  readonly difference: bigint | null
  readonly drift: bigint | null
  readonly pending_outgoing: bigint
  readonly pending_incoming: bigint
  readonly accounts: ReadonlyArray<ReconciliationAccount>
  /** Why the chain could not be read; null unless `unavailable`. */
  readonly error: string | null
  readonly checked_at: Date
}

/**
 * A stored report: also since when its drift lasts (null unless `drift`, kept while `unavailable`)
 * and when the group was last `matched` (null if never).
 */
export interface StoredReport extends ReconciliationReport {
  readonly drift_since: Date | null
  readonly last_matched_at: Date | null
}

export interface ReconcilerDeps {
  readonly pool: pg.Pool
  readonly chains: Pick<ChainsService, "get">
}

export interface ReconcileOptions {
  /** Before a drifting group is read again; default 1,000. */
  readonly recheck_delay_ms?: number
  /** The longest one group's on-chain read may take before the chain counts as unavailable; default 10,000. */
  readonly chain_read_deadline_ms?: number
}

/**
 * A node that stops answering is given this long per group, not its client's retries (viem: 10 s
 * per request, four tries: 40 s per read), so a reconciliation run answers within seconds.
 */
const chain_read_deadline_ms_default = 10_000

/**
 * How long the report of a chain no process reconciles any more is kept after its last run: three
 * times the longest interval (RECONCILIATION_INTERVAL_SECONDS at most a day), so a process that runs
 * the chain always stores it again first.
 */
export const report_stale_ms = 3 * 86_400_000

interface LedgerRow {
  account_id: string
  kind: string
  user_data: string | null
  posted: string
}

const outside_kinds = new Set(["world", "chain_custody"])

/** The ledger side of one group, read before the chain (see the module comment). */
const readLedgerSide = async (pool: pg.Pool, tenant_id: string, environment: Environment, asset: Asset) => {
  // The money in flight first, the ledger after: a deposit credited or a transfer settled between
  // the two reads is then counted twice (a wider tolerance), never in neither (a false drift).
  // Deposits seen, not yet final; and the platform's own transfers into this tenant's custody
  // addresses (from any tenant's wallet) that the watcher has not even seen yet: on chain the money
  // may already be here while no ledger entry of this tenant holds it.
  const incoming = await pool.query<{ amount: string }>(
    `select (
       (select coalesce(sum(amount), 0) from platform.chain_deposits
         where tenant_id = $1 and environment = $2 and chain = $3 and token = $4 and status = 'seen')
       +
       (select coalesce(sum(t.amount), 0) from platform.chain_transfers t
         where t.environment = $2 and t.chain = $3 and t.token = $4 and t.tx_hash is not null
           and t.status in ('pending', 'completed')
           and exists (select 1 from platform.wallets w
                        where w.tenant_id = $1 and w.environment = $2 and w.chain = $3
                          and (w.address = t.to_address
                               or (w.address like '0x%' and lower(w.address) = lower(t.to_address))))
           and not exists (select 1 from platform.chain_deposits d
                            where d.environment = $2 and d.chain = $3 and lower(d.tx_hash) = lower(t.tx_hash)
                              and d.status in ('seen', 'credited')))
     )::text as amount`,
    [tenant_id, environment, asset.chain, asset.code],
  )
  // Outgoing transfers signed and not settled: only those can have left the chain's balance. A
  // reservation not signed yet (waiting its turn, or for a node) moved nothing on chain, so it
  // explains no shortfall.
  const outgoing = await pool.query<{ amount: string }>(
    `select coalesce(sum(amount), 0)::text as amount from platform.chain_transfers
      where tenant_id = $1 and environment = $2 and chain = $3 and token = $4
        and status = 'pending' and tx_hash is not null`,
    [tenant_id, environment, asset.chain, asset.code],
  )
  const stream_id = ledgerStreamId(ledgerOf(tenant_id, environment))
  await waitForStreamHead(pool, stream_id, projection_wait_ms)
  const accounts = await pool.query<LedgerRow>(
    `select account_id, kind, user_data, (credits_posted - debits_posted)::text as posted
       from read_model.ledger_accounts
      where stream_id = $1 and asset_code = $2
      order by account_id`,
    [stream_id, asset.code],
  )
  const pending_outgoing = BigInt(outgoing.rows[0]?.amount ?? "0")
  let ledger_balance = 0n
  const liabilities: Array<LedgerRow> = []
  for (const row of accounts.rows) {
    if (outside_kinds.has(row.kind)) continue
    ledger_balance += BigInt(row.posted)
    liabilities.push(row)
  }
  return {
    ledger_balance,
    pending_outgoing,
    pending_incoming: BigInt(incoming.rows[0]?.amount ?? "0"),
    liabilities,
  }
}

/** The first line of a chain error, bounded: enough for an operator to tell a dead node from a bad answer. */
const chainErrorMessage = (error: unknown): string => {
  const text = error instanceof Error ? error.message : String(error)
  return (text.split("\n")[0] ?? text).slice(0, chain_error_length_max)
}

/** Every custody address's token balance, in the order of `addresses`; rejects when the node cannot be read. */
const readChainSide = (
  running: RunningChain,
  contract: string,
  addresses: ReadonlyArray<string>,
  deadline_ms: number,
) =>
  Effect.runPromise(
    Effect.forEach(
      addresses,
      (address) => running.adapter.balance(address, { kind: "token", contract }).pipe(Effect.orDie),
      { concurrency: balance_read_concurrency },
    ).pipe(
      Effect.timeoutOrElse({
        duration: deadline_ms,
        orElse: () => Effect.die(new Error(`the node did not answer within ${deadline_ms / 1000} s`)),
      }),
    ),
  )

/**
 * Reads one group once: ledger side first, then every custody address's balance on chain. A chain
 * that cannot be read gives an `unavailable` report (on-chain figures 0 here; storeReport keeps the
 * last ones read) instead of an error: the other groups are still reconciled.
 */
const readGroup = async (
  deps: ReconcilerDeps,
  group: { tenant_id: string; environment: Environment; chain: WalletChain; token: TokenSymbol },
  running: RunningChain,
  contract: string,
  /** How long the chain may take; or the error of a read of this run that found the chain unavailable. */
  chain: { readonly deadline_ms: number } | { readonly unavailable: string },
): Promise<ReconciliationReport> => {
  const asset = tokenAsset(group.chain, group.token)
  // Faucet mints: what finished before the ledger is read is in it; what started before the chain
  // is read may be on chain without it (src/chains/mint-tally.ts).
  const mint_key = mintTallyKey(group.tenant_id, group.token)
  const mints_finished = running.faucet_mints?.finished(mint_key) ?? 0n
  const ledger = await readLedgerSide(deps.pool, group.tenant_id, group.environment, asset)
  const wallets = await deps.pool.query<{ wallet_id: string; address: string }>(
    `select wallet_id, address from platform.wallets
      where tenant_id = $1 and environment = $2 and chain = $3 order by wallet_id`,
    [group.tenant_id, group.environment, group.chain],
  )
  const chain_side =
    "unavailable" in chain
      ? { balances: null, error: chain.unavailable }
      : await readChainSide(
          running,
          contract,
          wallets.rows.map((wallet) => wallet.address),
          chain.deadline_ms,
        ).then(
          (balances) => ({ balances, error: null }),
          (error: unknown) => ({ balances: null, error: chainErrorMessage(error) }),
        )
  const addresses = new Map(
    wallets.rows.map((wallet, i) => [
      wallet.wallet_id,
      { ...wallet, balance: chain_side.balances?.[i] ?? null },
    ]),
  )
  const accounts: Array<ReconciliationAccount> = []
  for (const row of ledger.liabilities) {
    const wallet = row.kind === "wallet" && row.user_data !== null ? addresses.get(row.user_data) : undefined
    if (wallet !== undefined) addresses.delete(wallet.wallet_id)
    accounts.push({
      account_id: row.account_id,
      kind: row.kind,
      wallet_id: row.kind === "wallet" ? row.user_data : null,
      address: wallet?.address ?? null,
      ledger_balance: BigInt(row.posted),
      on_chain_balance: wallet?.balance ?? null,
    })
  }
  for (const wallet of addresses.values()) {
    accounts.push({
      account_id: null,
      kind: "custody_address",
      wallet_id: wallet.wallet_id,
      address: wallet.address,
      ledger_balance: null,
      on_chain_balance: wallet.balance,
    })
  }
  const mints_in_flight = (running.faucet_mints?.started(mint_key) ?? 0n) - mints_finished
  const ledger_figures = {
    ledger_balance: ledger.ledger_balance,
    pending_outgoing: ledger.pending_outgoing,
    pending_incoming: ledger.pending_incoming + mints_in_flight,
  }
  const common = { ...group, decimals: asset.decimals, ...ledger_figures, accounts, checked_at: new Date() }
  if (chain_side.balances === null) {
    return {
      ...common,
      status: "unavailable",
      // Stored as null, unless an earlier complete read's figures are kept (see storeReport).
      on_chain_balance: null,
      difference: null,
      drift: null,
      error: chain_side.error,
    }
  }
  const on_chain_balance = chain_side.balances.reduce((sum, balance) => sum + balance, 0n)
  return {
    ...common,
    on_chain_balance,
    ...reconcile({ ...ledger_figures, on_chain_balance }),
    error: null,
  }
}

/** The columns an `unavailable` report keeps from the last complete read (see storeReport). */
const kept_while_unavailable = [
  "ledger_balance",
  "pending_outgoing",
  "pending_incoming",
  "on_chain_balance",
  "difference",
  "drift",
  "accounts",
] as const

/** Their SET clauses: the stored value for an `unavailable` report, the new one otherwise. */
const kept_while_unavailable_sql = kept_while_unavailable
  .map(
    (column) => `${column} = case when excluded.status = 'unavailable'
              and platform.reconciliation_reports.on_chain_balance is not null
         then platform.reconciliation_reports.${column} else excluded.${column} end`,
  )
  .join(",\n       ")

/**
 * Replaces the group's stored report. An `unavailable` report keeps every figure and the accounts
 * of the last complete read (with none, it is stored as it is: the ledger's figures now, no
 * on-chain side), ledger side included, so that they agree with each other (the chain
 * side is unknown, not zero; a fresh ledger figure beside an old on-chain one and its old difference
 * would add up to nothing), and a drift's `drift_since`; `last_matched_at` moves only when the
 * group is matched.
 */
const storeReport = async (pool: pg.Pool, report: ReconciliationReport): Promise<StoredReport> => {
  const stored = await pool.query(
    `insert into platform.reconciliation_reports
       (tenant_id, environment, chain, token, token_decimals, status, ledger_balance, on_chain_balance,
        pending_outgoing, pending_incoming, difference, drift, accounts, checked_at, drift_since, error,
        last_matched_at)
     values ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14,
             case when $6 = 'drift' then $14::timestamptz end, $15,
             case when $6 = 'matched' then $14::timestamptz end)
     on conflict (tenant_id, environment, chain, token) do update set
       token_decimals = excluded.token_decimals, status = excluded.status,
       ${kept_while_unavailable_sql},
       checked_at = excluded.checked_at, error = excluded.error,
       drift_since = case when excluded.status = 'drift'
                          then coalesce(platform.reconciliation_reports.drift_since, excluded.checked_at)
                          when excluded.status = 'unavailable'
                          then platform.reconciliation_reports.drift_since end,
       last_matched_at = coalesce(excluded.last_matched_at, platform.reconciliation_reports.last_matched_at)
     -- Two runs at once (the scheduler's and one asked for): an older check never replaces a newer.
     where excluded.checked_at >= platform.reconciliation_reports.checked_at
     returning *`,
    [
      report.tenant_id,
      report.environment,
      report.chain,
      report.token,
      report.decimals,
      report.status,
      report.ledger_balance.toString(),
      report.on_chain_balance?.toString() ?? null,
      report.pending_outgoing.toString(),
      report.pending_incoming.toString(),
      report.difference?.toString() ?? null,
      report.drift?.toString() ?? null,
      JSON.stringify(
        report.accounts.map((account) => ({
          ...account,
          ledger_balance: account.ledger_balance?.toString() ?? null,
          on_chain_balance: account.on_chain_balance?.toString() ?? null,
        })),
      ),
      report.checked_at,
      report.error,
    ],
  )
  if (stored.rows[0] !== undefined) return fromStoredRow(stored.rows[0])
  const newer = await pool.query(
    `select * from platform.reconciliation_reports
      where tenant_id = $1 and environment = $2 and chain = $3 and token = $4`,
    [report.tenant_id, report.environment, report.chain, report.token],
  )
  // Deleted meanwhile by a run that no longer reconciles the group: stored afresh.
  if (newer.rows[0] === undefined) return storeReport(pool, report)
  return fromStoredRow(newer.rows[0])
}

/**
 * Reconciles every token of every chain the tenant has wallets on in `environment` (chains with no
 * adapter running in this process are skipped, and their reports deleted once no run has stored
 * them for `report_stale_ms`), stores the reports and
 * returns them with what the store keeps
 * (`drift_since`, `last_matched_at`, and for an `unavailable` one the figures of the last complete
 * read); a chain that cannot be
 * read is reported `unavailable` without stopping the others.
 * @example const reports = await reconcileTenant(deps, "ten_...", "sandbox") // [{ chain: "ethereum", token: "USDC", status: "matched", ... }]
 */
export const reconcileTenant = async (
  deps: ReconcilerDeps,
  tenant_id: string,
  environment: Environment,
  options: ReconcileOptions = {},
): Promise<ReadonlyArray<StoredReport>> => {
  const started = new Date()
  const recheck_delay_ms = options.recheck_delay_ms ?? 1_000
  const deadline_ms = options.chain_read_deadline_ms ?? chain_read_deadline_ms_default
  const chains = await deps.pool.query<{ chain: WalletChain }>(
    "select distinct chain from platform.wallets where tenant_id = $1 and environment = $2 order by chain",
    [tenant_id, environment],
  )
  const reports: Array<StoredReport> = []
  for (const { chain } of chains.rows) {
    const running = deps.chains.get(environment, chain)
    if (running === undefined) continue
    // Once a chain is found unavailable, its other groups in this run say so without waiting again.
    let reading: { readonly deadline_ms: number } | { readonly unavailable: string } = { deadline_ms }
    for (const [token, contract] of running.contracts) {
      const group = { tenant_id, environment, chain, token }
      let report = await readGroup(deps, group, running, contract, reading)
      if (report.status === "drift") {
        await new Promise((resolve) => setTimeout(resolve, recheck_delay_ms))
        report = await readGroup(deps, group, running, contract, reading)
      }
      if (report.status === "unavailable" && report.error !== null) reading = { unavailable: report.error }
      reports.push(await storeReport(deps.pool, report))
    }
  }
  // A token no longer reconciled on a chain this process runs has no report, not its last one kept
  // for ever. A chain this process does not run may run in another (the sandbox's chains run in one
  // process; each process has its own CHAIN_RPC_URL_*): its report goes only once no run has stored
  // it for `report_stale_ms`. A report another run stored since this one started stays.
  await deps.pool.query(
    `delete from platform.reconciliation_reports r
      where r.tenant_id = $1 and r.environment = $2 and r.checked_at < $5
        and (r.chain, r.token) not in (select * from unnest($3::text[], $4::text[]))
        and (r.chain = any($6::text[]) or r.checked_at < $5::timestamptz - make_interval(secs => $7))`,
    [
      tenant_id,
      environment,
      reports.map((report) => report.chain),
      reports.map((report) => report.token),
      started,
      chains.rows
        .map(({ chain }) => chain)
        .filter((chain) => deps.chains.get(environment, chain) !== undefined),
      report_stale_ms / 1000,
    ],
  )
  return reports
}

/** Every tenant and environment with wallets, reconciled one after the other. */
export const reconcileAll = async (
  deps: ReconcilerDeps,
  options: ReconcileOptions = {},
): Promise<ReadonlyArray<StoredReport>> => {
  const tenants = await deps.pool.query<{ tenant_id: string; environment: Environment }>(
    "select distinct tenant_id, environment from platform.wallets order by tenant_id, environment",
  )
  const reports: Array<StoredReport> = []
  for (const { tenant_id, environment } of tenants.rows)
    reports.push(...(await reconcileTenant(deps, tenant_id, environment, options)))
  return reports
}

export interface ReconcilerOptions extends ReconcileOptions {
  /** Between the end of one run and the start of the next; default 60,000. */
  readonly interval_ms?: number
  /** Every report of every run (the composition root logs drift). */
  readonly onReport?: (report: StoredReport) => void
  readonly onError?: (error: unknown) => void
}

/** The session lock that lets one process at a time run the scheduled reconciliation. */
const reconciler_lock = "platform-reconciliation"

/**
 * Runs `reconcileAll` every `interval_ms` in whichever process holds the reconciliation lock; the
 * others skip their turn. `stop` waits for a run in progress.
 */
export const startReconciler = (deps: ReconcilerDeps, options: ReconcilerOptions = {}) => {
  const interval_ms = options.interval_ms ?? 60_000
  let stopped = false
  let timer: NodeJS.Timeout | undefined
  let running: Promise<void> = Promise.resolve()
  const holder = makeLockHolder()
  const runOnce = async () => {
    const client = await deps.pool.connect()
    let unlocked = false
    try {
      await holder.reap(client)
      const locked = await client.query<{ locked: boolean }>(
        "select pg_try_advisory_lock(hashtextextended($1, 0)) as locked",
        [reconciler_lock],
      )
      if (locked.rows[0]?.locked !== true) {
        unlocked = true
        return
      }
      await holder.taken(client)
      try {
        for (const report of await reconcileAll(deps, options)) options.onReport?.(report)
      } finally {
        await client.query("select pg_advisory_unlock(hashtextextended($1, 0))", [reconciler_lock])
        unlocked = true
      }
    } finally {
      // A connection whose unlock did not go through is closed, not pooled: it would keep the lock.
      client.release(!unlocked)
      holder.letGo(!unlocked)
    }
  }
  const schedule = () => {
    if (stopped) return
    timer = setTimeout(() => {
      running = runOnce()
        .catch((error) => options.onError?.(error))
        .finally(schedule)
    }, interval_ms)
  }
  schedule()
  return {
    stop: async () => {
      stopped = true
      if (timer !== undefined) clearTimeout(timer)
      await running
    },
  }
}

const optionalBigint = (value: unknown) => (value === null ? null : BigInt(String(value)))

/** A row of platform.reconciliation_reports as a report. */
const fromStoredRow = (row: pg.QueryResultRow): StoredReport => ({
  tenant_id: row.tenant_id,
  environment: row.environment,
  chain: row.chain,
  token: row.token,
  decimals: row.token_decimals,
  status: row.status,
  ledger_balance: BigInt(row.ledger_balance),
  on_chain_balance: optionalBigint(row.on_chain_balance),
  pending_outgoing: BigInt(row.pending_outgoing),
  pending_incoming: BigInt(row.pending_incoming),
  difference: optionalBigint(row.difference),
  drift: optionalBigint(row.drift),
  accounts: (row.accounts as ReadonlyArray<Record<string, unknown>>).map((account) => ({
    account_id: account.account_id as string | null,
    kind: account.kind as string,
    wallet_id: account.wallet_id as string | null,
    address: account.address as string | null,
    ledger_balance: optionalBigint(account.ledger_balance),
    on_chain_balance: optionalBigint(account.on_chain_balance),
  })),
  error: row.error,
  checked_at: row.checked_at,
  drift_since: row.drift_since,
  last_matched_at: row.last_matched_at,
})

/** The latest stored report of each of the tenant's groups in `environment`, by chain and token. */
export const storedReports = async (
  pool: pg.Pool,
  tenant_id: string,
  environment: Environment,
): Promise<ReadonlyArray<StoredReport>> => {
  const found = await pool.query(
    `select * from platform.reconciliation_reports
      where tenant_id = $1 and environment = $2 order by chain, token`,
    [tenant_id, environment],
  )
  return found.rows.map(fromStoredRow)
}

/** The report as the API and the log show it: exact decimal strings in the token's precision. */
export const toReportView = (report: StoredReport) => {
  const amount = (value: bigint) => formatAmount(value, report.decimals)
  return {
    chain: report.chain,
    token: report.token,
    status: report.status,
    ledger_balance: amount(report.ledger_balance),
    on_chain_balance: report.on_chain_balance === null ? null : amount(report.on_chain_balance),
    pending_outgoing: amount(report.pending_outgoing),
    pending_incoming: amount(report.pending_incoming),
    difference: report.difference === null ? null : amount(report.difference),
    drift: report.drift === null ? null : amount(report.drift),
    accounts: report.accounts.map((account) => ({
      account_id: account.account_id,
      kind: account.kind,
      wallet_id: account.wallet_id,
      address: account.address,
      ledger_balance: account.ledger_balance === null ? null : amount(account.ledger_balance),
      on_chain_balance: account.on_chain_balance === null ? null : amount(account.on_chain_balance),
    })),
    error: report.error,
    checked_at: report.checked_at.toISOString(),
    drift_since: report.drift_since?.toISOString() ?? null,
    last_matched_at: report.last_matched_at?.toISOString() ?? null,
  }
}

/**
 * The log line of a fresh report, whichever run made it (the job, or one asked for through the
 * API): drift as an error, an unreadable chain as a warning, the rest at debug.
 */
export const logReport = (report: StoredReport): Effect.Effect<void> => {
  const view = { tenant_id: report.tenant_id, environment: report.environment, ...toReportView(report) }
  const line =
    report.status === "drift"
      ? Effect.logError("reconciliation drift")
      : report.status === "unavailable"
        ? Effect.logWarning("reconciliation: chain unavailable")
        : Effect.logDebug("reconciliation")
  return line.pipe(Effect.annotateLogs(view))
}
