/**
 * Small steps end-to-end tests take over HTTP again and again.
 */
import type pg from "pg"
import type { Wallet } from "../../src/http/api.ts"
import { expectOk } from "./api-expect.ts"
import type { ApiClient } from "./platform-process.ts"

/** Creates a wallet on `chain` whose external id is also its label; 201 expected. */
export const createWallet = async (api: ApiClient, chain: string, external_id: string) =>
  expectOk(
    await api.post<typeof Wallet.Type>("/api/v1/wallets", { external_id, label: external_id, chain }),
    201,
  )

/**
 * Runs `send` (a request with the Idempotency-Key `key`) while another request's transaction holds
 * that key, not yet committed, stored as "another request"'s; commits it after `hold_ms` and
 * answers what `send` answered. The request finds no stored response, takes effect, and its
 * transaction waits on the key's row, then meets the key taken.
 */
export const withKeyHeldElsewhere = async <A>(
  pool: pg.Pool,
  tenant_id: string,
  key: string,
  send: (headers: Record<string, string>) => Promise<A>,
  hold_ms = 500,
): Promise<A> => {
  const other = await pool.connect()
  try {
    await other.query("begin")
    await other.query(
      `insert into platform.idempotency_keys
         (tenant_id, environment, idempotency_key, fingerprint, response_status, response_body)
       values ($1, 'sandbox', $2, 'another request', 201, '{"webhook_id":"whk_other"}')`,
      [tenant_id, key],
    )
    const answer = send({ "idempotency-key": key })
    await new Promise((resolve) => setTimeout(resolve, hold_ms))
    await other.query("commit")
    return await answer
  } finally {
    other.release()
  }
}
