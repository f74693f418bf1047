/**
 * Stored responses of idempotent POSTs. A response is stored in the same transaction as the effect
 * of the request, so "a stored response exists" means "the request took effect"; a request refused
 * before it changed anything (bad input, not found) stores nothing and may be retried with the
 * same key once corrected.
 */
import type pg from "pg"

export interface StoredResponse {
  readonly tenant_id: string
  readonly environment: string
  readonly idempotency_key: string
  readonly fingerprint: string
  readonly response_status: number
  readonly response_body: unknown
}

/** Stores responses in the caller's transaction; a key stored already keeps its first response. */
export const storeResponses = async (client: pg.PoolClient, rows: ReadonlyArray<StoredResponse>) => {
  if (rows.length === 0) return
  await client.query(
    `insert into platform.idempotency_keys
       (tenant_id, environment, idempotency_key, fingerprint, response_status, response_body)
     select tenant_id, environment, idempotency_key, fingerprint, response_status, response_body
       from jsonb_to_recordset($1::jsonb) as r(tenant_id text, environment text, idempotency_key text,
            fingerprint text, response_status integer, response_body jsonb)
     on conflict do nothing`,
    [JSON.stringify(rows)],
  )
}

export const findStoredResponse = async (
  pool: pg.Pool,
  tenant_id: string,
  environment: string,
  idempotency_key: string,
): Promise<StoredResponse | undefined> =>
  (
    await pool.query<StoredResponse>(
      `select tenant_id, environment, idempotency_key, fingerprint, response_status, response_body
         from platform.idempotency_keys where tenant_id = $1 and environment = $2 and idempotency_key = $3`,
      [tenant_id, environment, idempotency_key],
    )
  ).rows[0]

export { inTransaction } from "../db/transaction.ts"
