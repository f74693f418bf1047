/**
 * Wallet balances from the read model (the ledger projection), after it has caught up with the
 * ledger's head: a balance read right after a payment shows the payment.
 */
import type pg from "pg"
import { ledgerStreamId } from "../../domain/ledger/events.ts"
import { available } from "../../domain/ledger/invariants.ts"
import type { LedgerState } from "../../domain/ledger/state.ts"
import { formatAmount } from "../../domain/money/amount.ts"
import type { Environment } from "../../domain/platform/scopes.ts"
import { waitForStreamHead } from "../ledger/queries.ts"
import { ledgerOf } from "./accounts.ts"

/** How long a balance read waits for the projection before it fails. */
const projection_wait_ms = 5_000

export interface TokenBalance {
  readonly token: string
  /** Available: posted credits - posted debits - reserved. */
  readonly amount: string
  readonly chain: string
  /** Reserved by pending payments. */
  readonly reserved: string
}

interface Row {
  symbol: string
  chain: string
  decimals: number
  available: string
  reserved: string
}

/** @example await walletBalances(pool, "ten_...", "sandbox", "wal_...") // [{ token: "USDC", amount: "10.00", ... }] */
export const walletBalances = async (
  pool: pg.Pool,
  tenant_id: string,
  environment: Environment,
  wallet_id: string,
): Promise<ReadonlyArray<TokenBalance>> => {
  const stream_id = ledgerStreamId(ledgerOf(tenant_id, environment))
  await waitForStreamHead(pool, stream_id, projection_wait_ms)
  // Account ids of a wallet are `<wallet_id>:<asset>`; ';' is the character after ':'.
  const found = await pool.query<Row>(
    `select symbol, chain, decimals,
            (credits_posted - debits_posted - debits_pending)::text as available, debits_pending::text as reserved
       from read_model.ledger_accounts
      where stream_id = $1 and account_id > $2 and account_id < $3 and kind = 'wallet'
      order by chain, symbol`,
    [stream_id, `${wallet_id}:`, `${wallet_id};`],
  )
  return found.rows.map((row) => ({
    token: row.symbol,
    amount: formatAmount(BigInt(row.available), row.decimals),
    chain: row.chain,
    reserved: formatAmount(BigInt(row.reserved), row.decimals),
  }))
}

/**
 * The same balances from a ledger's state (the writer's, current to its last command), so a command
 * can answer the balance it left without waiting for the read model.
 * @example walletBalancesIn((await writer.snapshot(ledger)).state, "wal_...")
 */
export const walletBalancesIn = (state: LedgerState, wallet_id: string): ReadonlyArray<TokenBalance> => {
  const prefix = `${wallet_id}:`
  const found = [...state.accounts]
    .map(([, account]) => account)
    .filter((account) => account.kind === "wallet" && account.account_id.startsWith(prefix))
    .sort((a, b) =>
      a.asset.chain === b.asset.chain
        ? compare(a.asset.symbol, b.asset.symbol)
        : compare(a.asset.chain, b.asset.chain),
    )
  return found.map((account) => ({
    token: account.asset.symbol,
    amount: formatAmount(available(account), account.asset.decimals),
    chain: account.asset.chain,
    reserved: formatAmount(account.debits_pending, account.asset.decimals),
  }))
}

const compare = (a: string, b: string) => (a < b ? -1 : a > b ? 1 : 0)
