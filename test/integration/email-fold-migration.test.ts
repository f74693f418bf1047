// Proves migration 304 on a database that has lived under 303: e-mail addresses stored lower-cased
// only (a final sigma, the micro sign, a composition undone) are case-folded and composed as
// normaliseEmail now does, in tenants, identities and payments; a row whose new form another row
// already holds keeps its spelling instead of failing the migration; phones and handles are left
// alone.
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { runMigrations } from "../../src/db/migrate.ts"
import { platformMigrations } from "../../src/db/migrations.ts"
import { databaseBefore, type TestDatabase } from "../support/db.ts"

let db: TestDatabase
beforeAll(async () => {
  db = await databaseBefore(304)
})
afterAll(async () => {
  await db?.drop()
})

/** Inserts a tenant row into `into` (the database before migration 304 by default). */
const tenant = (tenant_id: string, email: string, custody_index: number, into: TestDatabase = db) =>
  into.pool.query(
    `insert into platform.tenants (tenant_id, email, password_hash, company_name, plan, custody_index, created_at)
     values ($1, $2, 'h', 'Acme', 'basic', $3, now())`,
    [tenant_id, email, custody_index],
  )

describe("migration 304", () => {
  it("case-folds the stored e-mail addresses, keeping a row whose folded form is taken", async () => {
    await tenant("ten_1", "σας@uni.example", 1)
    await tenant("ten_2", "\u00b5ail@uni.example", 2)
    // Lower-cased after NFC, so not NFC any more: j + caron.
    await tenant("ten_5", "j\u030cana@uni.example", 5)
    // Both spellings registered (the defect): the second keeps its own.
    await tenant("ten_3", "ſam@uni.example", 3)
    await tenant("ten_4", "sam@uni.example", 4)
    await db.pool.query(
      `insert into platform.tenant_environments (tenant_id, environment) values ('ten_1', 'sandbox')`,
    )
    await db.pool.query(
      `insert into platform.wallets (wallet_id, tenant_id, environment, chain, address, derivation_index, external_id, label, created_at)
       values ('wal_1', 'ten_1', 'sandbox', 'ethereum', '0x1', 0, 'e', 'l', now())`,
    )
    await db.pool.query(
      `insert into platform.identities (identity_id, tenant_id, environment, kind, value, wallet_id, linked_at) values
         ('idn_1', 'ten_1', 'sandbox', 'email', 'ϐeta@uni.example', 'wal_1', now()),
         ('idn_2', 'ten_1', 'sandbox', 'handle', '@x:ς', 'wal_1', now())`,
    )
    await db.pool.query(
      `insert into platform.payments (transaction_id, tenant_id, environment, type, status, from_wallet_id, recipient,
         recipient_kind, token, chain, decimals, amount, fee, metadata, created_at) values
         ('txn_1', 'ten_1', 'sandbox', 'social_payment', 'pending', 'wal_1', 'ϐeta@uni.example', 'email', 'USDC', 'ethereum', 6, 1, 0, '{}', now()),
         ('txn_2', 'ten_1', 'sandbox', 'social_payment', 'pending', 'wal_1', '@x:ς', 'handle', 'USDC', 'ethereum', 6, 1, 0, '{}', now())`,
    )

    await runMigrations(db.pool, platformMigrations)

    const emails = await db.pool.query<{ tenant_id: string; email: string }>(
      "select tenant_id, email from platform.tenants order by tenant_id",
    )
    expect(emails.rows).toEqual([
      { tenant_id: "ten_1", email: "σασ@uni.example" },
      { tenant_id: "ten_2", email: "\u03bcail@uni.example" },
      { tenant_id: "ten_3", email: "ſam@uni.example" },
      { tenant_id: "ten_4", email: "sam@uni.example" },
      { tenant_id: "ten_5", email: "\u01f0ana@uni.example" },
    ])
    const values = await db.pool.query<{ value: string }>(
      "select value from platform.identities order by identity_id",
    )
    expect(values.rows.map((r) => r.value)).toEqual(["βeta@uni.example", "@x:ς"])
    const recipients = await db.pool.query<{ recipient: string }>(
      "select recipient from platform.payments order by transaction_id",
    )
    expect(recipients.rows.map((r) => r.recipient)).toEqual(["βeta@uni.example", "@x:ς"])
  })
})

describe("migration 305", () => {
  let before305: TestDatabase
  beforeAll(async () => {
    before305 = await databaseBefore(305)
  })
  afterAll(async () => {
    await before305?.drop()
  })

  it("folds the old Cyrillic letter forms of stored e-mail addresses, keeping a row whose folded form is taken", async () => {
    const insert = (tenant_id: string, email: string, custody_index: number) =>
      tenant(tenant_id, email, custody_index, before305)
    // Rounded ve and tall te: "вт".
    await insert("ten_1", "\u1c80\u1c84@uni.example", 1)
    // Both spellings registered: the second keeps its own.
    await insert("ten_2", "\u1c82@uni.example", 2)
    await insert("ten_3", "\u043e@uni.example", 3)
    await insert("ten_4", "sam@uni.example", 4)
    // The long s t ligature folds to the s t one.
    await insert("ten_5", "\ufb05@uni.example", 5)

    await runMigrations(before305.pool, platformMigrations)

    const emails = await before305.pool.query<{ tenant_id: string; email: string }>(
      "select tenant_id, email from platform.tenants order by tenant_id",
    )
    expect(emails.rows).toEqual([
      { tenant_id: "ten_1", email: "\u0432\u0442@uni.example" },
      { tenant_id: "ten_2", email: "\u1c82@uni.example" },
      { tenant_id: "ten_3", email: "\u043e@uni.example" },
      { tenant_id: "ten_4", email: "sam@uni.example" },
      { tenant_id: "ten_5", email: "\ufb06@uni.example" },
    ])
  })
})
