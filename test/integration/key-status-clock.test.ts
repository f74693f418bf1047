// Proves that an API key's listed status (and a rotation's old key's) follows the database's clock,
// which its expiry was set by and which decides whether it still works, not this process's clock.
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from "vitest"
import { insertKey, listKeys, makeKeyAuthenticator, rotateKey } from "../../src/platform/credentials.ts"
import { inTransaction } from "../../src/platform/idempotency.ts"
import { freshDatabase, type TestDatabase } from "../support/db.ts"

let db: TestDatabase
const tenant_id = "ten_key_clock"
beforeAll(async () => {
  db = await freshDatabase()
  await db.pool.query(
    `insert into platform.tenants (tenant_id, email, password_hash, company_name, plan, custody_index, created_at)
     values ($1, 'clock@example.com', 'x', 'Clock', 'basic', 9, now())`,
    [tenant_id],
  )
})
afterEach(() => {
  vi.restoreAllMocks()
})
afterAll(async () => {
  await db?.drop()
})

const key = (name: string) =>
  insertKey(db.pool, { tenant_id, environment: "sandbox", scopes: ["wallets:read"], name })

/** Runs `body` with this process's clock `skew_ms` off the database's. */
const skewed = async <A>(skew_ms: number, body: () => Promise<A>): Promise<A> => {
  const real = Date.now
  vi.spyOn(Date, "now").mockImplementation(() => real() + skew_ms)
  try {
    return await body()
  } finally {
    vi.restoreAllMocks()
  }
}

describe("an API key's status", () => {
  it("is listed as the database's clock has it, which decides whether the key works", async () => {
    const keys = makeKeyAuthenticator(db.pool)
    const lasting = await key("lasting")
    const lapsed = await key("lapsed")
    await db.pool.query(
      "update platform.api_keys set expires_at = now() + interval '30 seconds' where key_id = $1",
      [lasting.key_id],
    )
    await db.pool.query(
      "update platform.api_keys set expires_at = now() - interval '1 second' where key_id = $1",
      [lapsed.key_id],
    )
    const listed = async () =>
      Object.fromEntries(
        ((await listKeys(db.pool, tenant_id, { limit: 10 }))?.data ?? []).map((k) => [k.name, k.status]),
      )
    expect((await keys.authenticate(lasting.api_key, tenant_id, Date.now())).kind).toBe("ok")
    expect((await keys.authenticate(lapsed.api_key, tenant_id, Date.now())).kind).toBe("expired")
    // This process's clock ten minutes ahead, then behind.
    expect(await skewed(600_000, listed)).toMatchObject({ lasting: "expiring", lapsed: "expired" })
    expect(await skewed(-600_000, listed)).toMatchObject({ lasting: "expiring", lapsed: "expired" })
  })

  it("is answered for a rotation's old key as the database's clock has it", async () => {
    const rotating = await key("rotating")
    const outcome = await skewed(600_000, () =>
      inTransaction(db.pool, (client) => rotateKey(client, tenant_id, rotating.key_id, 60_000)),
    )
    expect(outcome.kind === "rotated" && outcome.old_key.status).toBe("expiring")
  })
})
