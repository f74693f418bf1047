// Proves the key authenticator's cache on the embedded PostgreSQL: a key found valid stays "known"
// (checked again without the refused-keys budget) however many guesses are cached and dropped
// meanwhile, and a full cache lets go of its least recently looked-up key only; a revoked or expired key, or a guess, is never known; a read that began before a
// revocation is shared with no request after it, and what it saw is not cached; a grace period runs
// on the database's clock.
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { insertKey, key_cache_ttl_ms, makeKeyAuthenticator } from "../../src/platform/credentials.ts"
import { freshDatabase, type TestDatabase } from "../support/db.ts"

let db: TestDatabase
const tenant_id = "ten_keycache"

beforeAll(async () => {
  db = await freshDatabase()
  await db.pool.query(
    `insert into platform.tenants (tenant_id, email, password_hash, company_name, plan, custody_index, created_at)
     values ($1, 'keys@example.com', 'x', 'Keys', 'basic', 7, now())`,
    [tenant_id],
  )
})
afterAll(async () => {
  await db.drop()
})

const newKey = () =>
  insertKey(db.pool, { tenant_id, environment: "sandbox", scopes: ["wallets:read"], name: null })

describe("makeKeyAuthenticator", () => {
  it("keeps a valid key known through more guesses than the cache holds, for its own tenant only", async () => {
    const keys = makeKeyAuthenticator(db.pool, { entries_max: 100 })
    const valid = await newKey()
    const now_ms = Date.now()
    expect(keys.knownKey(valid.api_key, tenant_id, now_ms)).toBe(false)
    expect((await keys.authenticate(valid.api_key, tenant_id, now_ms)).kind).toBe("ok")
    // 201 guesses: their cache fills and lets go of its oldest, twice over.
    for (let i = 0; i <= 200; i++) {
      expect((await keys.authenticate(`sk_sandbox_guess_${i}`, tenant_id, now_ms)).kind).toBe("unknown_key")
    }
    const stale_ms = now_ms + key_cache_ttl_ms
    expect(keys.authenticateCached(valid.api_key, tenant_id, stale_ms)).toBeUndefined()
    expect(keys.knownKey(valid.api_key, tenant_id, stale_ms)).toBe(true)
    expect(keys.knownKey(valid.api_key, "ten_other", stale_ms)).toBe(false)
    expect(keys.knownKey("sk_sandbox_guess_1", tenant_id, stale_ms)).toBe(false)
  })

  it("lets go of the least recently looked-up key when full, not of every key", async () => {
    const keys = makeKeyAuthenticator(db.pool, { entries_max: 3 })
    const [a, b, c, d] = [await newKey(), await newKey(), await newKey(), await newKey()]
    const now_ms = Date.now()
    for (const key of [a, b, c])
      expect((await keys.authenticate(key.api_key, tenant_id, now_ms)).kind).toBe("ok")
    // A looked up again (a new read, once its entry is stale) is the newest; B is now the oldest.
    const later_ms = now_ms + key_cache_ttl_ms
    expect((await keys.authenticate(a.api_key, tenant_id, later_ms)).kind).toBe("ok")
    expect((await keys.authenticate(d.api_key, tenant_id, later_ms)).kind).toBe("ok")
    const cachedKind = (key: { api_key: string }) =>
      keys.authenticateCached(key.api_key, tenant_id, later_ms)?.kind
    expect([a, b, c, d].map(cachedKind)).toEqual(["ok", undefined, undefined, "ok"])
    // C's entry is stale but kept (its known-key standing with it); B's is gone.
    expect(keys.knownKey(c.api_key, tenant_id, later_ms)).toBe(true)
    expect(keys.knownKey(b.api_key, tenant_id, later_ms)).toBe(false)
  })

  it("counts a suspended production key (its tenant's verification rejected) as known: a real key, not a guess", async () => {
    const keys = makeKeyAuthenticator(db.pool)
    const suspended_tenant = "ten_keycache_suspended"
    await db.pool.query(
      `insert into platform.tenants (tenant_id, email, password_hash, company_name, plan, custody_index, created_at, kyc_status)
       values ($1, 'suspended@example.com', 'x', 'Keys', 'basic', 8, now(), 'rejected')`,
      [suspended_tenant],
    )
    const live = await insertKey(db.pool, {
      tenant_id: suspended_tenant,
      environment: "production",
      scopes: ["tenant:manage"],
      name: null,
    })
    const now_ms = Date.now()
    expect((await keys.authenticate(live.api_key, suspended_tenant, now_ms)).kind).toBe("tenant_not_verified")
    expect(keys.knownKey(live.api_key, suspended_tenant, now_ms + key_cache_ttl_ms)).toBe(true)
  })

  it("does not count a revoked or expired key as known", async () => {
    const keys = makeKeyAuthenticator(db.pool)
    const revoked = await newKey()
    const expiring = await newKey()
    const now_ms = Date.now()
    for (const key of [revoked, expiring])
      expect((await keys.authenticate(key.api_key, tenant_id, now_ms)).kind).toBe("ok")
    await db.pool.query("update platform.api_keys set revoked_at = now() where key_id = $1", [revoked.key_id])
    await db.pool.query(
      "update platform.api_keys set expires_at = now() + interval '1 minute' where key_id = $1",
      [expiring.key_id],
    )
    const stale_ms = now_ms + key_cache_ttl_ms
    // Looked up again once stale: the new rows are what `knownKey` judges by.
    expect((await keys.authenticate(revoked.api_key, tenant_id, stale_ms)).kind).toBe("revoked")
    expect(keys.knownKey(revoked.api_key, tenant_id, stale_ms)).toBe(false)
    expect((await keys.authenticate(expiring.api_key, tenant_id, stale_ms)).kind).toBe("ok")
    expect(keys.knownKey(expiring.api_key, tenant_id, stale_ms)).toBe(true)
    expect(keys.knownKey(expiring.api_key, tenant_id, stale_ms + 120_000)).toBe(false)
  })
  it("after forget, shares no read that began before it and caches nothing such a read saw", async () => {
    // A pool whose answers wait for the test: the first read sees the key before its revocation,
    // and answers only after it.
    let release: () => void = () => {}
    const held = new Promise<void>((resolve) => {
      release = resolve
    })
    let holding = true
    const pool = new Proxy(db.pool, {
      get: (target, property, receiver) =>
        property === "query"
          ? async (...args: Parameters<typeof db.pool.query>) => {
              const answer = await (target.query as (...a: typeof args) => Promise<unknown>)(...args)
              if (holding) await held
              return answer
            }
          : Reflect.get(target, property, receiver),
    })
    const keys = makeKeyAuthenticator(pool)
    const key = await newKey()
    const now_ms = Date.now()
    const in_flight = keys.authenticate(key.api_key, tenant_id, now_ms)
    await new Promise((resolve) => setTimeout(resolve, 100))
    await db.pool.query("update platform.api_keys set revoked_at = now() where key_id = $1", [key.key_id])
    keys.forget(key.key_id)
    holding = false
    const after = keys.authenticate(key.api_key, tenant_id, now_ms).then((outcome) => outcome.kind)
    const waited = new Promise((resolve) => setTimeout(() => resolve("joined the read from before"), 5_000))
    expect(await Promise.race([after, waited])).toBe("revoked")
    release()
    // The request that was in flight when the key was revoked may pass; nothing after it does.
    expect((await in_flight).kind).toBe("ok")
    expect(keys.authenticateCached(key.api_key, tenant_id, now_ms)?.kind).toBe("revoked")
    expect((await keys.authenticate(key.api_key, tenant_id, now_ms)).kind).toBe("revoked")
  })
  it("counts a rotated key's grace period on the database's clock, whatever this process's says", async () => {
    const keys = makeKeyAuthenticator(db.pool)
    const lasting = await newKey()
    const lapsed = await newKey()
    await db.pool.query(
      "update platform.api_keys set expires_at = now() + interval '30 seconds' where key_id = $1",
      [lasting.key_id],
    )
    await db.pool.query(
      "update platform.api_keys set expires_at = now() - interval '1 second' where key_id = $1",
      [lapsed.key_id],
    )
    // This process's clock ten minutes ahead of the database's: the key still has its 30 seconds.
    expect((await keys.authenticate(lasting.api_key, tenant_id, Date.now() + 600_000)).kind).toBe("ok")
    // Ten minutes behind: a grace period over on the database's clock is over.
    expect((await keys.authenticate(lapsed.api_key, tenant_id, Date.now() - 600_000)).kind).toBe("expired")
  })
})
