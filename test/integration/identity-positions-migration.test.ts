// Proves migration 306 on a database that has lived under 305: the identities already linked get
// list positions in their old (id) order, per tenant and environment, and each tenant's counter
// starts after them, so the next link through the API is listed last.
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { runMigrations } from "../../src/db/migrate.ts"
import { platformMigrations } from "../../src/db/migrations.ts"
import { databaseBefore, type TestDatabase } from "../support/db.ts"

let db: TestDatabase
beforeAll(async () => {
  db = await databaseBefore(306)
})
afterAll(async () => {
  await db?.drop()
})

describe("migration 306", () => {
  it("numbers the identities of each tenant and environment in id order, and sets the counters after them", async () => {
    for (const [tenant_id, custody_index] of [
      ["ten_a", 1],
      ["ten_b", 2],
    ] as const) {
      await db.pool.query(
        `insert into platform.tenants (tenant_id, email, password_hash, company_name, plan, custody_index, created_at)
         values ($1, $1 || '@example.com', 'h', 'Acme', 'basic', $2, now())`,
        [tenant_id, custody_index],
      )
      for (const environment of ["sandbox", "production"]) {
        await db.pool.query(
          "insert into platform.tenant_environments (tenant_id, environment) values ($1, $2)",
          [tenant_id, environment],
        )
        await db.pool.query(
          `insert into platform.wallets (wallet_id, tenant_id, environment, chain, address, derivation_index, external_id, label, created_at)
           values ($1, $2, $3, 'ethereum', $1, 0, 'e', 'l', now())`,
          [`wal_${tenant_id}_${environment}`, tenant_id, environment],
        )
      }
    }
    const link = (identity_id: string, tenant_id: string, environment: string) =>
      db.pool.query(
        `insert into platform.identities (identity_id, tenant_id, environment, kind, value, wallet_id, linked_at)
         values ($1, $2, $3, 'handle', '@x:' || $1, $4, now())`,
        [identity_id, tenant_id, environment, `wal_${tenant_id}_${environment}`],
      )
    // Inserted out of id order.
    await link("idn_3", "ten_a", "sandbox")
    await link("idn_1", "ten_a", "sandbox")
    await link("idn_2", "ten_a", "sandbox")
    await link("idn_5", "ten_a", "production")
    await link("idn_4", "ten_b", "sandbox")

    await runMigrations(db.pool, platformMigrations)

    const positions = await db.pool.query<{ identity_id: string; list_position: string }>(
      "select identity_id, list_position::text from platform.identities order by identity_id",
    )
    expect(positions.rows).toEqual([
      { identity_id: "idn_1", list_position: "0" },
      { identity_id: "idn_2", list_position: "1" },
      { identity_id: "idn_3", list_position: "2" },
      { identity_id: "idn_4", list_position: "0" },
      { identity_id: "idn_5", list_position: "0" },
    ])
    const counters = await db.pool.query<{ tenant_id: string; environment: string; next: string }>(
      `select tenant_id, environment, next_identity_position::text as next from platform.tenant_environments
        order by tenant_id, environment`,
    )
    expect(counters.rows).toEqual([
      { tenant_id: "ten_a", environment: "production", next: "1" },
      { tenant_id: "ten_a", environment: "sandbox", next: "3" },
      { tenant_id: "ten_b", environment: "production", next: "0" },
      { tenant_id: "ten_b", environment: "sandbox", next: "1" },
    ])
  })
})
