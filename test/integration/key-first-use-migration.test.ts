// Proves migration 307 on a database that has lived under 306: the API keys made before count as
// used (each keeps the sandbox keys out of production as before), and a production key made after
// counts as used once it is first looked up.
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { runMigrations } from "../../src/db/migrate.ts"
import { platformMigrations } from "../../src/db/migrations.ts"
import { insertKey, makeKeyAuthenticator } from "../../src/platform/credentials.ts"
import { databaseBefore, type TestDatabase } from "../support/db.ts"

let db: TestDatabase
beforeAll(async () => {
  db = await databaseBefore(307)
})
afterAll(async () => {
  await db?.drop()
})

const firstUse = async (key_id: string) =>
  (
    await db.pool.query<{ first_used_at: Date | null; created_at: Date }>(
      "select first_used_at, created_at from platform.api_keys where key_id = $1",
      [key_id],
    )
  ).rows[0]

describe("migration 307", () => {
  it("counts the keys made before as used, and a key made after once it is looked up", async () => {
    await db.pool.query(
      `insert into platform.tenants (tenant_id, email, password_hash, company_name, plan, custody_index, created_at)
       values ('ten_a', 'a@example.com', 'h', 'Acme', 'basic', 1, now())`,
    )
    await db.pool.query(
      `insert into platform.api_keys (key_id, tenant_id, environment, secret_sha256, prefix, scopes, name, created_at)
       values ('key_old', 'ten_a', 'production', '\\x01', 'sk_live_', '{keys:manage}', null, now() - interval '3 days')`,
    )
    await runMigrations(db.pool, platformMigrations)
    const old = await firstUse("key_old")
    expect(old?.first_used_at).toEqual(old?.created_at)

    await db.pool.query("update platform.tenants set kyc_status = 'verified' where tenant_id = 'ten_a'")
    const made = await insertKey(db.pool, {
      tenant_id: "ten_a",
      environment: "production",
      scopes: ["wallets:read"],
      name: "new",
    })
    const sandbox = await insertKey(db.pool, {
      tenant_id: "ten_a",
      environment: "sandbox",
      scopes: ["wallets:read"],
      name: "sandbox",
    })
    expect((await firstUse(made.key_id))?.first_used_at).toBeNull()
    const keys = makeKeyAuthenticator(db.pool)
    expect((await keys.authenticate(made.api_key, "ten_a", Date.now())).kind).toBe("ok")
    const used = (await firstUse(made.key_id))?.first_used_at
    expect(used).toBeInstanceOf(Date)
    // Recorded once: a later lookup leaves it.
    keys.forgetAll()
    await keys.authenticate(made.api_key, "ten_a", Date.now())
    expect((await firstUse(made.key_id))?.first_used_at).toEqual(used)
    // A sandbox key's lookup writes nothing (only production keys' first use counts).
    expect((await keys.authenticate(sandbox.api_key, "ten_a", Date.now())).kind).toBe("ok")
    expect((await firstUse(sandbox.key_id))?.first_used_at).toBeNull()
  })
})
