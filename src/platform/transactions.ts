/**
 * Payment records (`platform.payments`) and their public view, the Transaction. Rows are written
 * only inside the ledger append that moves the money (see payments.ts), so a record and its
 * transfers always commit together.
 */
import type pg from "pg"
import { formatAmount } from "../../domain/money/amount.ts"
import type { Environment } from "../../domain/platform/scopes.ts"
import { toPage } from "../db/page.ts"

export type PaymentStatus = "pending" | "completed" | "failed"

export interface PaymentRow {
  readonly transaction_id: string
  readonly tenant_id: string
  readonly environment: Environment
  readonly type: "social_payment"
  readonly status: PaymentStatus
  readonly from_wallet_id: string
  readonly to_wallet_id: string | null
  readonly recipient: string
  readonly recipient_kind: string
  readonly token: string
  readonly chain: string
  readonly decimals: number
  /** Minor units, as decimal text (numeric in the database). */
  readonly amount: string
  readonly fee: string
  readonly note: string | null
  readonly metadata: Readonly<Record<string, string>>
  readonly failure_code: string | null
  readonly failure_message: string | null
  readonly created_at: string
  readonly expires_at: string | null
  readonly completed_at: string | null
  readonly failed_at: string | null
}

export interface TransactionView {
  readonly transaction_id: string
  readonly type: "social_payment"
  readonly status: PaymentStatus
  readonly amount: string
  readonly fee: string
  readonly token: string
  readonly chain: string
  readonly recipient: string
  readonly from_wallet: string
  readonly to_wallet: string | null
  readonly note: string | null
  readonly metadata: Readonly<Record<string, string>>
  readonly failure: { readonly code: string; readonly message: string } | null
  readonly created_at: string
  readonly expires_at: string | null
  readonly completed_at: string | null
  readonly failed_at: string | null
}

/** @example toTransaction(row).amount // "100.00" */
export const toTransaction = (row: PaymentRow): TransactionView => ({
  transaction_id: row.transaction_id,
  type: row.type,
  status: row.status,
  amount: formatAmount(BigInt(row.amount), row.decimals),
  fee: formatAmount(BigInt(row.fee), row.decimals),
  token: row.token,
  chain: row.chain,
  recipient: row.recipient,
  from_wallet: row.from_wallet_id,
  to_wallet: row.to_wallet_id,
  note: row.note,
  metadata: row.metadata,
  failure:
    row.failure_code === null
      ? null
      : { code: row.failure_code, message: row.failure_message ?? row.failure_code },
  created_at: row.created_at,
  expires_at: row.expires_at,
  completed_at: row.completed_at,
  failed_at: row.failed_at,
})

const iso = (value: Date | null) => (value === null ? null : value.toISOString())

interface DbRow extends Omit<PaymentRow, "created_at" | "expires_at" | "completed_at" | "failed_at"> {
  readonly created_at: Date
  readonly expires_at: Date | null
  readonly completed_at: Date | null
  readonly failed_at: Date | null
}

export const fromDb = (row: DbRow): PaymentRow => ({
  ...row,
  amount: String(row.amount),
  fee: String(row.fee),
  created_at: row.created_at.toISOString(),
  expires_at: iso(row.expires_at),
  completed_at: iso(row.completed_at),
  failed_at: iso(row.failed_at),
})

/** Inserts payment rows (one statement). */
export const insertPayments = async (client: pg.PoolClient, rows: ReadonlyArray<PaymentRow>) => {
  if (rows.length === 0) return
  await client.query({
    name: "payments_insert",
    text: `insert into platform.payments
     select * from jsonb_populate_recordset(null::platform.payments, $1::jsonb)`,
    values: [JSON.stringify(rows)],
  })
}

export const paymentColumns = "p.*"

export const getPayment = async (
  db: pg.Pool | pg.PoolClient,
  tenant_id: string,
  environment: Environment,
  transaction_id: string,
): Promise<PaymentRow | undefined> => {
  const found = await db.query<DbRow>(
    "select * from platform.payments where tenant_id = $1 and environment = $2 and transaction_id = $3",
    [tenant_id, environment, transaction_id],
  )
  const row = found.rows[0]
  return row === undefined ? undefined : fromDb(row)
}

export interface ListPaymentsFilter {
  readonly wallet_id?: string | undefined
  readonly status?: PaymentStatus | undefined
  readonly created_gte?: string | undefined
  readonly created_lt?: string | undefined
  readonly starting_after?: string | undefined
  readonly limit: number
}

/** Newest first; `starting_after` is a transaction id (ids sort by creation time). */
export const listPayments = async (
  pool: pg.Pool,
  tenant_id: string,
  environment: Environment,
  filter: ListPaymentsFilter,
) => {
  const found = await pool.query<DbRow>(
    `select * from platform.payments
      where tenant_id = $1 and environment = $2
        and ($3::text is null or from_wallet_id = $3 or to_wallet_id = $3)
        and ($4::text is null or status = $4)
        and ($5::timestamptz is null or created_at >= $5)
        and ($6::timestamptz is null or created_at < $6)
        and ($7::text is null or transaction_id < $7)
      order by transaction_id desc limit $8`,
    [
      tenant_id,
      environment,
      filter.wallet_id ?? null,
      filter.status ?? null,
      filter.created_gte ?? null,
      filter.created_lt ?? null,
      filter.starting_after ?? null,
      filter.limit + 1,
    ],
  )
  return toPage(
    found.rows,
    filter.limit,
    (row) => toTransaction(fromDb(row)),
    (transaction) => transaction.transaction_id,
  )
}
