// Proves migration 523 on a database that has lived under 522: an `unavailable` report of a group
// never read completely, stored with 0 on chain (as before 522), gets null on-chain figures; a
// report kept from a complete read (its accounts hold on-chain balances) keeps its figures.
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { runMigrations } from "../../src/db/migrate.ts"
import { platformMigrations } from "../../src/db/migrations.ts"
import { databaseBefore, type TestDatabase } from "../support/db.ts"

let db: TestDatabase
beforeAll(async () => {
  db = await databaseBefore(523)
})
afterAll(async () => {
  await db?.drop()
})

const report = (chain: string, accounts: ReadonlyArray<Record<string, unknown>>) =>
  db.pool.query(
    `insert into platform.reconciliation_reports
       (tenant_id, environment, chain, token, token_decimals, status, ledger_balance, on_chain_balance,
        pending_outgoing, pending_incoming, difference, drift, accounts, checked_at, error)
     values ('ten_1', 'sandbox', $1, 'USDC', 6, 'unavailable', 5000000, 0, 0, 0, 0, 0, $2, now(), 'down')`,
    [chain, JSON.stringify(accounts)],
  )

describe("migration 523", () => {
  it("nulls the on-chain figures of unavailable reports never read completely, and only those", async () => {
    const wallet = {
      account_id: "w1",
      kind: "wallet",
      wallet_id: "wal_1",
      address: "0x1",
      ledger_balance: "5000000",
    }
    await report("polygon", [{ ...wallet, on_chain_balance: null }])
    await report("ethereum", [
      { ...wallet, on_chain_balance: "0" },
      {
        account_id: null,
        kind: "custody_address",
        wallet_id: "wal_1",
        address: "0x1",
        ledger_balance: null,
        on_chain_balance: "0",
      },
    ])

    await runMigrations(db.pool, platformMigrations)

    const found = await db.pool.query<{
      chain: string
      on_chain_balance: string | null
      difference: string | null
      drift: string | null
    }>(
      "select chain, on_chain_balance::text, difference::text, drift::text from platform.reconciliation_reports order by chain",
    )
    expect(found.rows).toEqual([
      { chain: "ethereum", on_chain_balance: "0", difference: "0", drift: "0" },
      { chain: "polygon", on_chain_balance: null, difference: null, drift: null },
    ])
  })
})
