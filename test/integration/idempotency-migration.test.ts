// Proves migration 301 on a database that has lived under 300: stored responses that held a new API
// key in plain text are gone, every other stored response stays, and from then on a stored response
// is kept as sent (json, its keys in their order).
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { runMigrations } from "../../src/db/migrate.ts"
import { platformMigrations } from "../../src/db/migrations.ts"
import { findStoredResponse, inTransaction, storeResponses } from "../../src/platform/idempotency.ts"
import { legacy_transfer_fingerprint } from "../../src/transfers/schema.ts"
import { databaseBefore, type TestDatabase } from "../support/db.ts"

let db: TestDatabase
beforeAll(async () => {
  db = await databaseBefore(301)
})
afterAll(async () => {
  await db?.drop()
})

const row = (idempotency_key: string, response_body: unknown) => ({
  tenant_id: "ten_1",
  environment: "sandbox",
  idempotency_key,
  fingerprint: "f",
  response_status: 200,
  response_body,
})

describe("migration 301", () => {
  it("deletes the plaintext API keys stored before, keeps every other response, and stores responses as sent", async () => {
    await inTransaction(db.pool, (client) =>
      storeResponses(client, [
        row("register", { tenant_id: "ten_1", api_key: "sk_sandbox_secret1", environment: "sandbox" }),
        row("create-key", { key_id: "key_1", api_key: "sk_live_secret2", scopes: [] }),
        row("rotate", {
          new_key: { key_id: "key_2", api_key: "sk_sandbox_secret3" },
          old_key: { key_id: "key_1" },
        }),
        row("payment", { transaction_id: "txn_1", metadata: { note: "sk_sandbox_lookalike" } }),
        row("wallet", { wallet_id: "wal_1", label: "sk_live_in_a_label" }),
      ]),
    )
    await runMigrations(db.pool, platformMigrations)
    const left = await db.pool.query<{ idempotency_key: string }>(
      "select idempotency_key from platform.idempotency_keys order by idempotency_key",
    )
    expect(left.rows.map((r) => r.idempotency_key)).toEqual(["payment", "wallet"])
    const all = await db.pool.query<{ text: string }>(
      "select response_body::text as text from platform.idempotency_keys",
    )
    for (const { text } of all.rows) expect(text).not.toMatch(/"sk_[a-z]+_secret/)

    const body = { zeta: 1, alpha: { b: "2", a: "1" }, mid: [3, 1] }
    await inTransaction(db.pool, (client) => storeResponses(client, [row("ordered", body)]))
    const stored = await findStoredResponse(db.pool, "ten_1", "sandbox", "ordered")
    expect(JSON.stringify(stored?.response_body)).toBe(JSON.stringify(body))
  })
})

describe("migration 502", () => {
  it("copies the keys of earlier on-chain transfers into the shared store, so no other endpoint can take them", async () => {
    const fresh = await databaseBefore(502)
    try {
      await fresh.pool.query(
        `insert into platform.chain_transfers (transfer_id, tenant_id, environment, wallet_id, chain, token,
           token_decimals, token_contract, from_address, key_tenant_index, key_wallet_index, to_address,
           amount, fee, status, idempotency_key, created_at)
         values ('txn_1', 'ten_1', 'sandbox', 'wal_1', 'ethereum', 'USDC', 6, '0xc', '0xa', 0, 0, '0xb',
                 1000000, 3000, 'pending', 'order-7', now()),
                ('txn_2', 'ten_1', 'sandbox', 'wal_1', 'ethereum', 'USDC', 6, '0xc', '0xa', 0, 0, '0xb',
                 1000000, 3000, 'pending', null, now())`,
      )
      await runMigrations(fresh.pool, platformMigrations)
      const stored = await findStoredResponse(fresh.pool, "ten_1", "sandbox", "order-7")
      expect(stored).toMatchObject({
        fingerprint: legacy_transfer_fingerprint,
        response_status: 202,
        response_body: { transaction_id: "txn_1" },
      })
      const all = await fresh.pool.query("select count(*)::int as n from platform.idempotency_keys")
      expect(all.rows[0]?.n).toBe(1)
    } finally {
      await fresh.drop()
    }
  })
})
