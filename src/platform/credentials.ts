/**
 * Tenants and their API keys. A key is shown once, at creation; the platform keeps only its
 * SHA-256 (a key is 256 random bits, so a fast hash is as safe as a slow one and costs microseconds
 * per request). Keys are prefixed by environment (`sk_sandbox_`, `sk_live_`) and carry scopes.
 * Rotating an active key issues a new one and lets the old one work for a grace period, once: a key
 * already rotating, expired or revoked is not rotated again. Revoking is immediate in this process;
 * other processes hear of it by a PostgreSQL notification (`announceKeyChange`), and a process
 * that cannot hear (its listening connection lost) trusts a lookup for `key_cache_ttl_ms` at most.
 */
import { hash, randomBytes } from "node:crypto"
import pg from "pg"
import type { ApiScope, Environment, Plan } from "../../domain/platform/scopes.ts"
import { type Page, toPage } from "../db/page.ts"
import { idPrefixes, newId } from "./ids.ts"

/** How long a looked-up key is trusted without asking the database again. */
export const key_cache_ttl_ms = 1_000
/** Default and longest grace period of a rotated key. */
export const rotation_grace_ms_default = 24 * 3_600_000
export const rotation_grace_ms_max = 7 * 24 * 3_600_000

export interface Caller {
  readonly tenant_id: string
  readonly environment: Environment
  readonly key_id: string
  readonly scopes: ReadonlyArray<ApiScope>
  readonly plan: Plan
  readonly custody_index: number
  /** Set once the key was rotated: it then works until this moment, for requests in flight. */
  readonly expires_at: Date | null
}

export interface ApiKeyView {
  readonly key_id: string
  readonly environment: Environment
  readonly prefix: string
  readonly scopes: ReadonlyArray<ApiScope>
  readonly name: string | null
  readonly created_at: string
  readonly expires_at: string | null
  readonly revoked_at: string | null
  readonly status: "active" | "expiring" | "expired" | "revoked"
}

interface KeyRow {
  key_id: string
  environment: Environment
  prefix: string
  scopes: Array<ApiScope>
  name: string | null
  created_at: Date
  expires_at: Date | null
  revoked_at: Date | null
  /** The database's time when the row was read: a key's status follows the clock its expiry was set by. */
  now: Date
}

export const keyPrefix = (environment: Environment) =>
  environment === "production" ? "sk_live_" : "sk_sandbox_"

/** SHA-256, one-shot (a Hash object per call costs several times more; every request hashes its key). */
const sha256 = (text: string): Buffer => hash("sha256", text, "buffer")

/** An API key's SHA-256 in base64: what the key cache is keyed by. */
const keyDigest = (api_key: string): string => hash("sha256", api_key, "base64")

const keyColumns =
  "key_id, environment, prefix, scopes, name, created_at, expires_at, revoked_at, now() as now"

export const toKeyView = (row: KeyRow): ApiKeyView => ({
  key_id: row.key_id,
  environment: row.environment,
  prefix: row.prefix,
  scopes: row.scopes,
  name: row.name,
  created_at: row.created_at.toISOString(),
  expires_at: row.expires_at?.toISOString() ?? null,
  revoked_at: row.revoked_at?.toISOString() ?? null,
  status:
    row.revoked_at !== null
      ? "revoked"
      : row.expires_at === null
        ? "active"
        : row.expires_at.getTime() > row.now.getTime()
          ? "expiring"
          : "expired",
})

/**
 * Creates a key in the caller's transaction; returns its one-time secret with its view.
 * @example const { api_key } = await insertKey(client, { tenant_id, environment: "sandbox", scopes, name: null })
 */
export const insertKey = async (
  db: pg.Pool | pg.PoolClient,
  spec: {
    readonly tenant_id: string
    readonly environment: Environment
    readonly scopes: ReadonlyArray<ApiScope>
    readonly name: string | null
  },
): Promise<ApiKeyView & { readonly api_key: string }> => {
  const api_key = `${keyPrefix(spec.environment)}${randomBytes(32).toString("base64url")}`
  const found = await db.query<KeyRow>(
    `insert into platform.api_keys (key_id, tenant_id, environment, secret_sha256, prefix, scopes, name, created_at)
     values ($1, $2, $3, $4, $5, $6, $7, now())
     returning ${keyColumns}`,
    [
      newId(idPrefixes.key),
      spec.tenant_id,
      spec.environment,
      sha256(api_key),
      `${api_key.slice(0, keyPrefix(spec.environment).length + 4)}...${api_key.slice(-4)}`,
      spec.scopes,
      spec.name,
    ],
  )
  const row = found.rows[0]
  if (row === undefined) throw new Error("insert returned no key")
  return { ...toKeyView(row), api_key }
}

/**
 * The tenant's keys of both environments, newest first, paged by key id (`starting_after` = the
 * last id of the previous page, as in every list); undefined when `starting_after` names none of
 * the tenant's keys. The cursor is checked against both environments, since a page may end on a
 * key of either.
 * @example const first = await listKeys(pool, tenant_id, { limit: 20 })
 */
export const listKeys = async (
  pool: pg.Pool,
  tenant_id: string,
  filter: { readonly starting_after?: string | undefined; readonly limit: number },
): Promise<Page<ApiKeyView> | undefined> => {
  if (filter.starting_after !== undefined) {
    const cursor = await pool.query("select 1 from platform.api_keys where tenant_id = $1 and key_id = $2", [
      tenant_id,
      filter.starting_after,
    ])
    if (cursor.rows.length === 0) return undefined
  }
  const found = await pool.query<KeyRow>(
    `select ${keyColumns} from platform.api_keys
      where tenant_id = $1 and ($2::text is null or key_id < $2)
      order by key_id desc limit $3`,
    [tenant_id, filter.starting_after ?? null, filter.limit + 1],
  )
  return toPage(found.rows, filter.limit, toKeyView, (key) => key.key_id)
}

export const getKey = async (
  db: pg.Pool | pg.PoolClient,
  tenant_id: string,
  environment: Environment,
  key_id: string,
) =>
  (
    await db.query<KeyRow>(
      `select ${keyColumns} from platform.api_keys where tenant_id = $1 and environment = $2 and key_id = $3`,
      [tenant_id, environment, key_id],
    )
  ).rows[0]

export type RotationOutcome =
  | {
      readonly kind: "rotated"
      readonly new_key: ApiKeyView & { readonly api_key: string }
      readonly old_key: ApiKeyView
    }
  /** The key is no longer active (`key.status` says why); `successor_key_id` is its rotation's key. */
  | { readonly kind: "not_active"; readonly key: ApiKeyView; readonly successor_key_id: string | null }
  | { readonly kind: "not_found" }

/**
 * Rotates an active key of the tenant in the caller's transaction: a new key with its environment,
 * scopes and name, and the old one expiring after `grace_ms`. A key that already has an expiry (it is
 * rotating, or expired) or is revoked is left as it is: an expiry is set once and never moved.
 * @example const outcome = await inTransaction(pool, (client) => rotateKey(client, tenant_id, key_id, 86_400_000))
 */
export const rotateKey = async (
  client: pg.PoolClient,
  tenant_id: string,
  key_id: string,
  grace_ms: number,
): Promise<RotationOutcome> => {
  // The row lock serialises rotations of one key: the second sees the first's expiry.
  const found = await client.query<KeyRow & { rotated_to: string | null }>(
    `select ${keyColumns}, rotated_to from platform.api_keys
      where tenant_id = $1 and key_id = $2 for update`,
    [tenant_id, key_id],
  )
  const row = found.rows[0]
  if (row === undefined) return { kind: "not_found" }
  const key = toKeyView(row)
  if (key.status !== "active") return { kind: "not_active", key, successor_key_id: row.rotated_to }
  const new_key = await insertKey(client, {
    tenant_id,
    environment: row.environment,
    scopes: row.scopes,
    name: row.name,
  })
  const updated = await client.query<KeyRow>(
    `update platform.api_keys set expires_at = now() + make_interval(secs => $3), rotated_to = $4
      where tenant_id = $1 and key_id = $2 and expires_at is null and revoked_at is null
      returning ${keyColumns}`,
    [tenant_id, key_id, grace_ms / 1000, new_key.key_id],
  )
  const old = updated.rows[0]
  if (old === undefined) throw new Error(`key ${key_id} changed under its row lock`)
  return { kind: "rotated", new_key, old_key: toKeyView(old) }
}

interface AuthRow {
  key_id: string
  tenant_id: string
  environment: Environment
  scopes: Array<ApiScope>
  plan: Plan
  custody_index: number
  kyc_status: string
  expires_at: Date | null
  revoked_at: Date | null
  /**
   * The expiry on this process's clock: the database's `now()` set `expires_at`, so what is left of
   * it is measured by the database at the lookup and counted on from the lookup's own time here.
   */
  expires_local_ms: number | null
}

export type AuthOutcome =
  | { readonly kind: "ok"; readonly caller: Caller }
  /** A production key of a tenant whose verification was rejected: open only to what recovers it. */
  | { readonly kind: "tenant_not_verified"; readonly caller: Caller }
  | { readonly kind: "unknown_key" | "revoked" | "expired" | "tenant_mismatch" }

/**
 * Sets `key` as the newest entry of `map`; a full map first lets go of its oldest (insertion order:
 * an entry set again moves to the end), so a burst of new entries never drops every entry at once.
 */
const remember = <V>(map: Map<string, V>, key: string, value: V, entries_max: number) => {
  map.delete(key)
  if (map.size >= entries_max) {
    const oldest = map.keys().next()
    if (oldest.done !== true) map.delete(oldest.value)
  }
  map.set(key, value)
}

/**
 * Looks up API keys by their hash, with a short cache; `forget` drops a key at once. Each of the two
 * caches holds `entries_max` entries (10,000), the least recently looked up let go first.
 */
export const makeKeyAuthenticator = (pool: pg.Pool, options: { readonly entries_max?: number } = {}) => {
  const entries_max = options.entries_max ?? 10_000
  // Keys found, and digests that named no key, apart: guesses filling the second (and clearing it)
  // never evict the first, which tells a key in use from a guess (`knownKey`).
  const cache = new Map<string, { readonly row: AuthRow; readonly cached_ms: number }>()
  const unknown = new Map<string, number>()
  /** `digest`: the key's SHA-256 in base64 (the cache never holds a key itself). */
  const cached = (digest: string, now_ms: number): { readonly row: AuthRow | undefined } | undefined => {
    const hit = cache.get(digest)
    if (hit !== undefined) return now_ms - hit.cached_ms < key_cache_ttl_ms ? hit : undefined
    const missed_ms = unknown.get(digest)
    return missed_ms !== undefined && now_ms - missed_ms < key_cache_ttl_ms ? { row: undefined } : undefined
  }
  // Concurrent requests with one key share its lookup (a burst of a key not cached yet is one read).
  const lookups = new Map<string, Promise<AuthRow | undefined>>()
  /**
   * Counts `forget` calls: a read that started before the latest one may have seen the key before
   * its revocation, so its answer is neither cached nor shared with requests that come after.
   */
  let forgotten = 0
  const lookup = (digest: string, now_ms: number): Promise<AuthRow | undefined> => {
    const hit = cached(digest, now_ms)
    if (hit !== undefined) return Promise.resolve(hit.row)
    const running = lookups.get(digest)
    if (running !== undefined) return running
    const started = read(digest, now_ms).finally(() => {
      if (lookups.get(digest) === started) lookups.delete(digest)
    })
    lookups.set(digest, started)
    return started
  }
  const read = async (digest: string, now_ms: number) => {
    const epoch = forgotten
    // A live production key's first lookup records its first use: whoever sent it holds its secret
    // (see `productionFromProduction` in src/http/handlers/tenants.ts). Nothing else is written.
    const found = await pool.query<Omit<AuthRow, "expires_local_ms"> & { expires_in_ms: number | null }>(
      `with first_use as (
         update platform.api_keys set first_used_at = now()
          where secret_sha256 = $1 and first_used_at is null and environment = 'production'
            and revoked_at is null and (expires_at is null or expires_at > now())
       )
       select k.key_id, k.tenant_id, k.environment, k.scopes, t.plan, t.custody_index, t.kyc_status,
              k.expires_at, k.revoked_at,
              (extract(epoch from k.expires_at - now()) * 1000)::float8 as expires_in_ms
         from platform.api_keys k join platform.tenants t using (tenant_id)
        where k.secret_sha256 = $1`,
      [Buffer.from(digest, "base64")],
    )
    const answer = found.rows[0]
    const row: AuthRow | undefined =
      answer === undefined
        ? undefined
        : {
            ...answer,
            expires_local_ms: answer.expires_in_ms === null ? null : now_ms + answer.expires_in_ms,
          }
    if (epoch !== forgotten) return row
    if (row === undefined) {
      remember(unknown, digest, now_ms, entries_max)
    } else {
      unknown.delete(digest)
      remember(cache, digest, { row, cached_ms: now_ms }, entries_max)
    }
    return row
  }
  const decide = (row: AuthRow | undefined, tenant_id: string, now_ms: number): AuthOutcome => {
    if (row === undefined) return { kind: "unknown_key" }
    if (row.tenant_id !== tenant_id) return { kind: "tenant_mismatch" }
    if (row.revoked_at !== null) return { kind: "revoked" }
    if (row.expires_local_ms !== null && row.expires_local_ms <= now_ms) return { kind: "expired" }
    const { key_id, environment, scopes, plan, custody_index, expires_at } = row
    const caller = { tenant_id, environment, key_id, scopes, plan, custody_index, expires_at }
    // A production key works only while its tenant is verified: a later rejection suspends it.
    if (row.environment === "production" && row.kyc_status !== "verified")
      return { kind: "tenant_not_verified", caller }
    return { kind: "ok", caller }
  }
  return {
    authenticate: async (api_key: string, tenant_id: string, now_ms: number): Promise<AuthOutcome> =>
      decide(await lookup(keyDigest(api_key), now_ms), tenant_id, now_ms),
    /**
     * Whether a lookup of `api_key` is no guess at a key: another request's lookup of it is running
     * (its answer is shared), or it was a valid key of `tenant_id` when last looked up, though that is
     * too long ago to trust (a stale cache entry).
     */
    knownKey: (api_key: string, tenant_id: string, now_ms: number): boolean => {
      const digest = keyDigest(api_key)
      if (lookups.has(digest)) return true
      const row = cache.get(digest)?.row
      if (row === undefined) return false
      // A suspended production key (its tenant's verification rejected) is a real key too.
      const { kind } = decide(row, tenant_id, now_ms)
      return kind === "ok" || kind === "tenant_not_verified"
    },
    /** `authenticate` without a database read: undefined when the key is not in the cache. */
    authenticateCached: (api_key: string, tenant_id: string, now_ms: number): AuthOutcome | undefined => {
      const hit = cached(keyDigest(api_key), now_ms)
      return hit === undefined ? undefined : decide(hit.row, tenant_id, now_ms)
    },
    /**
     * Drops every cached entry of `key_id` (after a revoke or rotation), and lets no request after
     * this share a read that was running before it.
     */
    forget: (key_id: string) => {
      forgotten += 1
      lookups.clear()
      for (const [hash, entry] of cache) if (entry.row?.key_id === key_id) cache.delete(hash)
    },
    /** As `forget`, for every key of `tenant_id` (after its verification changed). */
    forgetTenant: (tenant_id: string) => {
      forgotten += 1
      lookups.clear()
      for (const [hash, entry] of cache) if (entry.row?.tenant_id === tenant_id) cache.delete(hash)
    },
    /** As `forget`, for every key (changes may have been missed). */
    forgetAll: () => {
      forgotten += 1
      lookups.clear()
      cache.clear()
    },
  }
}

export type KeyAuthenticator = ReturnType<typeof makeKeyAuthenticator>

/** The channel on which key changes are announced to every process. */
export const key_changes_channel = "platform_api_key_changes"

export type KeyChange = { readonly key_id: string } | { readonly tenant_id: string }

/**
 * Tells every process to drop what it cached of a key, or of a tenant's keys. Sent in the change's
 * own transaction, PostgreSQL delivers it when that commits (and never for a rollback).
 */
export const announceKeyChange = async (db: pg.Pool | pg.PoolClient, change: KeyChange): Promise<void> => {
  await db.query("select pg_notify($1, $2)", [key_changes_channel, JSON.stringify(change)])
}

const relisten_ms = 1_000

/**
 * Keeps a LISTEN connection on `key_changes_channel` and forgets each announced key in `keys`.
 * A lost connection forgets every key (announcements may have been missed meanwhile) and is opened
 * again after a second; until then lookups are trusted for `key_cache_ttl_ms` at most, as always.
 */
export const listenForKeyChanges = (
  options: pg.ClientConfig,
  keys: Pick<KeyAuthenticator, "forget" | "forgetTenant" | "forgetAll">,
  onError: (error: unknown) => void = () => {},
) => {
  let client: pg.Client | undefined
  let stopped = false
  let retry: ReturnType<typeof setTimeout> | undefined
  const heard = (message: pg.Notification) => {
    try {
      const change = JSON.parse(message.payload ?? "") as Partial<Record<"key_id" | "tenant_id", unknown>>
      if (typeof change.key_id === "string") keys.forget(change.key_id)
      else if (typeof change.tenant_id === "string") keys.forgetTenant(change.tenant_id)
      else keys.forgetAll()
    } catch {
      keys.forgetAll()
    }
  }
  const lost = (which: pg.Client, error?: unknown) => {
    if (client !== which) return
    client = undefined
    keys.forgetAll()
    which.end().catch(() => {})
    if (stopped) return
    if (error !== undefined) onError(error)
    retry = setTimeout(() => void open(), relisten_ms)
  }
  const open = async () => {
    if (stopped) return
    const next = new pg.Client(options)
    client = next
    next.on("notification", heard)
    next.on("error", (error) => lost(next, error))
    next.on("end", () => lost(next))
    try {
      await next.connect()
      await next.query(`listen ${next.escapeIdentifier(key_changes_channel)}`)
      // Whatever was announced before this connection listened is unheard: start afresh.
      keys.forgetAll()
    } catch (error) {
      lost(next, error)
    }
  }
  return {
    /** Resolves once the first connection listens (or failed; it is then retried). */
    started: open(),
    stop: async () => {
      stopped = true
      if (retry !== undefined) clearTimeout(retry)
      const current = client
      client = undefined
      await current?.end().catch(() => {})
    },
  }
}
