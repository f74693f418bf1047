/**
 * Reading deposits for the API: the tenant's rows, newest first (ids are time-ordered), one cursor
 * page at a time.
 */
import type pg from "pg"
import type { Environment } from "../../domain/platform/scopes.ts"
import { toPage } from "../db/page.ts"
import { fromDb, toPublicDeposit } from "./model.ts"

export interface ListDepositsFilter {
  readonly wallet_id?: string | undefined
  readonly starting_after?: string | undefined
  readonly limit: number
}

/**
 * One page of the tenant's deposits in `environment`, optionally of one wallet.
 * @example await listDeposits(pool, "ten_1", "sandbox", { wallet_id: "wal_1", limit: 20 })
 */
export const listDeposits = async (
  pool: pg.Pool,
  tenant_id: string,
  environment: Environment,
  filter: ListDepositsFilter,
) => {
  const found = await pool.query(
    `select * from platform.chain_deposits
      where tenant_id = $1 and environment = $2
        and ($3::text is null or wallet_id = $3)
        and ($4::text is null or deposit_id < $4)
      order by deposit_id desc limit $5`,
    [tenant_id, environment, filter.wallet_id ?? null, filter.starting_after ?? null, filter.limit + 1],
  )
  return toPage(
    found.rows,
    filter.limit,
    (row) => toPublicDeposit(fromDb(row)),
    (deposit) => deposit.deposit_id,
  )
}
