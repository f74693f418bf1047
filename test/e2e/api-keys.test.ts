// Proves the API-key endpoints over HTTP against the real platform process: a response carrying a
// key secret (registration, key creation, rotation) is replayed for its Idempotency-Key but stored
// only sealed, never in plaintext, and an unreadable sealed record answers 500 rather than garbage;
// a key is rotated once (a rotating, expired or revoked key is a 409 and its expiry never moves);
// the optional bodies may be left out; the key list pages like every list.
import { createHash, randomBytes } from "node:crypto"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { apiScopes } from "../../domain/platform/scopes.ts"
import { resolveKek } from "../../src/custody/vault.ts"
import type { ApiKey, NewApiKey } from "../../src/http/api.ts"
import { makeResponseSealer } from "../../src/platform/idempotency.ts"
import { expectError, expectOk } from "../support/api-expect.ts"
import {
  type ApiClient,
  type ApiResponse,
  apiClient,
  type Credentials,
  type RunningPlatform,
  registerTenant,
  startPlatform,
} from "../support/platform-process.ts"

type KeyView = typeof ApiKey.Type
type NewKeyView = typeof NewApiKey.Type
interface Rotation {
  readonly new_key: NewKeyView
  readonly old_key: KeyView
}
interface Page<T> {
  readonly data: ReadonlyArray<T>
  readonly has_more: boolean
  readonly next_cursor: string | null
}
interface Registered extends Credentials {
  readonly environment: string
}

let platform: RunningPlatform
beforeAll(async () => {
  platform = await startPlatform()
})
afterAll(async () => {
  await platform?.stop()
})

const newIdempotencyKey = () => `test-${randomBytes(8).toString("hex")}`

/** The stored idempotency record of `idempotency_key`, as PostgreSQL prints the whole row. */
const storedRecordText = async (idempotency_key: string): Promise<string> => {
  const found = await platform.database.pool.query<{ row: string }>(
    "select t::text as row from platform.idempotency_keys t where idempotency_key = $1",
    [idempotency_key],
  )
  expect(found.rows, `one stored record for ${idempotency_key}`).toHaveLength(1)
  return found.rows[0]?.row ?? ""
}

/** The record holds neither the secret, nor its random part, nor any key prefix. */
const expectSealed = (record: string, api_key: string) => {
  expect(record).not.toContain(api_key)
  expect(record).not.toContain(api_key.replace(/^sk_(sandbox|live)_/, ""))
  expect(record).not.toContain("sk_")
  expect(record).toContain("aes-256-gcm/v1")
}

/** The second answer is the first one again, marked as a replay. */
const expectReplay = <T>(first: ApiResponse<T>, second: ApiResponse<T>) => {
  expect(first.headers.get("idempotent-replayed")).toBeNull()
  expect(second.headers.get("idempotent-replayed")).toBe("true")
  expect({ status: second.status, body: second.body }).toEqual({ status: first.status, body: first.body })
  expect(second.text).toBe(first.text)
}

/** The key authenticates its tenant. */
const expectWorks = async (credentials: Credentials) => {
  expectOk(await apiClient(platform.url, credentials).get("/api/v1/api-keys"))
}

const createKey = async (api: ApiClient, body: Record<string, unknown> = { scopes: ["keys:manage"] }) =>
  expectOk(await api.post<NewKeyView>("/api/v1/api-keys", body), 201)

/** A raw POST: `body` undefined sends no body and no content type. */
const post = async <T = unknown>(
  credentials: Credentials,
  route: string,
  body?: string,
  contentType?: string,
): Promise<ApiResponse<T>> => {
  const response = await fetch(`${platform.url}${route}`, {
    method: "POST",
    headers: {
      authorization: `Bearer ${credentials.api_key}`,
      "x-tenant-id": credentials.tenant_id,
      ...(contentType === undefined ? {} : { "content-type": contentType }),
    },
    ...(body === undefined ? {} : { body }),
  })
  const text = await response.text()
  return {
    status: response.status,
    headers: response.headers,
    body: (text === "" ? null : JSON.parse(text)) as T,
    text,
  }
}

describe("idempotent replay of responses that carry a key secret", () => {
  let owner: { client: ApiClient; credentials: Credentials }
  beforeAll(async () => {
    owner = await registerTenant(platform.url)
  })

  it("stores a created key's response sealed and replays the same working key", async () => {
    const key = newIdempotencyKey()
    const body = { name: "idem", scopes: ["wallets:read", "keys:manage"] }
    const first = await owner.client.post<NewKeyView>("/api/v1/api-keys", body, { "idempotency-key": key })
    const created = expectOk(first, 201)
    expect(created.api_key).toMatch(/^sk_sandbox_/)
    expectSealed(await storedRecordText(key), created.api_key)
    const second = await owner.client.post<NewKeyView>("/api/v1/api-keys", body, { "idempotency-key": key })
    expectReplay(first, second)
    await expectWorks({ tenant_id: owner.credentials.tenant_id, api_key: second.body.api_key })
    expectError(
      await owner.client.post("/api/v1/api-keys", { ...body, name: "other" }, { "idempotency-key": key }),
      409,
      "idempotency_key_reused",
    )
  })

  it("replays a response that carries a key for 24 hours only, then answers 409 idempotency_key_expired", async () => {
    const key = newIdempotencyKey()
    const body = { name: "idem-aged", scopes: ["wallets:read"] }
    const first = await owner.client.post<NewKeyView>("/api/v1/api-keys", body, { "idempotency-key": key })
    expectOk(first, 201)
    const age = (hours: number) =>
      platform.database.pool.query(
        "update platform.idempotency_keys set created_at = now() - make_interval(hours => $3) where tenant_id = $1 and idempotency_key = $2",
        [owner.credentials.tenant_id, key, hours],
      )
    await age(23)
    expectReplay(
      first,
      await owner.client.post<NewKeyView>("/api/v1/api-keys", body, { "idempotency-key": key }),
    )
    await age(25)
    const late = await owner.client.post("/api/v1/api-keys", body, { "idempotency-key": key })
    const expired = expectError(late, 409, "idempotency_key_expired")
    expect(expired.message).toContain("GET /api/v1/api-keys")
    expect(expired.type).toBe("idempotency_error")
    expect(late.text).not.toContain("sk_sandbox_")
  })

  it("replays a registration for 24 hours only, and says its key cannot be shown again", async () => {
    const key = newIdempotencyKey()
    const body = {
      email: `aged-${randomBytes(4).toString("hex")}@example.com`,
      password: "correct horse battery staple",
      company_name: "Aged",
      plan: "basic",
    }
    const anonymous = apiClient(platform.url)
    expectOk(await anonymous.post<Registered>("/api/tenant/register", body, { "idempotency-key": key }), 201)
    await platform.database.pool.query(
      "update platform.idempotency_keys set created_at = now() - interval '25 hours' where idempotency_key = $1",
      [key],
    )
    const late = await anonymous.post("/api/tenant/register", body, { "idempotency-key": key })
    const expired = expectError(late, 409, "idempotency_key_expired")
    expect(expired.message).toContain("cannot be shown again")
    expect(expired.message).not.toContain("GET /api/v1/api-keys")
    expect(late.text).not.toContain("sk_sandbox_")
  })

  it("replays a webhook creation after 24 hours: its request holds a secret, its response none", async () => {
    const key = newIdempotencyKey()
    const secret = `whsec_${randomBytes(12).toString("hex")}`
    const body = { url: "http://127.0.0.1:9/aged-hook", events: ["payment.completed"], secret }
    const first = await owner.client.post("/api/v1/webhooks", body, { "idempotency-key": key })
    expectOk(first, 201)
    const record = await storedRecordText(key)
    // Stored as it is (it holds no secret), under a keyed fingerprint (the request holds one).
    expect(record).toContain("aged-hook")
    expect(record).not.toContain(secret)
    expect(record).not.toContain("aes-256-gcm/v1")
    const request = `webhooks.create\n${JSON.stringify({ events: body.events, secret, url: body.url })}`
    expect(record).not.toContain(createHash("sha256").update(request).digest("hex"))
    await platform.database.pool.query(
      "update platform.idempotency_keys set created_at = now() - interval '25 hours' where tenant_id = $1 and idempotency_key = $2",
      [owner.credentials.tenant_id, key],
    )
    expectReplay(first, await owner.client.post("/api/v1/webhooks", body, { "idempotency-key": key }))
  })

  it("answers a key creation's Idempotency-Key from another key of the tenant as another request (409), never with the secret", async () => {
    const key = newIdempotencyKey()
    const body = { name: "mine", scopes: ["wallets:read"] }
    expectOk(await owner.client.post<NewKeyView>("/api/v1/api-keys", body, { "idempotency-key": key }), 201)
    const sibling = await createKey(owner.client, {
      name: "sibling",
      scopes: ["wallets:read", "keys:manage"],
    })
    const other = apiClient(platform.url, {
      tenant_id: owner.credentials.tenant_id,
      api_key: sibling.api_key,
    })
    const answer = await other.post("/api/v1/api-keys", body, { "idempotency-key": key })
    expectError(answer, 409, "idempotency_key_reused")
    expect(answer.text).not.toContain("sk_sandbox_")
  })

  it("answers the same body from a key with other scopes as another request (409), never with the first key's secret", async () => {
    const limited = apiClient(platform.url, {
      tenant_id: owner.credentials.tenant_id,
      api_key: (await createKey(owner.client, { scopes: ["keys:manage"], name: "limited" })).api_key,
    })
    // Without `scopes`, a body asks for the calling key's own: from the owner's key, every scope.
    const key = newIdempotencyKey()
    const full = expectOk(
      await owner.client.post<NewKeyView>("/api/v1/api-keys", { name: "full" }, { "idempotency-key": key }),
      201,
    )
    expect([...full.scopes].sort()).toEqual([...apiScopes].sort())
    const replayed = await limited.post<NewKeyView>(
      "/api/v1/api-keys",
      { name: "full" },
      { "idempotency-key": key },
    )
    expectError(replayed, 409, "idempotency_key_reused")
    expect(replayed.text).not.toContain(full.api_key)
    // Sent at once, one of the two is made and the other refused; the limited key gets only its own.
    const raced = newIdempotencyKey()
    const answers = await Promise.all(
      [owner.client, limited].map((api) =>
        api.post<NewKeyView>("/api/v1/api-keys", {}, { "idempotency-key": raced }),
      ),
    )
    expect(answers.map((answer) => answer.status).sort()).toEqual([201, 409])
    const [, limitedAnswer] = answers
    if (limitedAnswer?.status === 201) expect(limitedAnswer.body.scopes).toEqual(["keys:manage"])
    // Its own retry is a replay all the same.
    const own = newIdempotencyKey()
    const first = await limited.post<NewKeyView>("/api/v1/api-keys", {}, { "idempotency-key": own })
    expect(expectOk(first, 201).scopes).toEqual(["keys:manage"])
    expectReplay(first, await limited.post<NewKeyView>("/api/v1/api-keys", {}, { "idempotency-key": own }))
  })

  it("stores a registration's response sealed and replays the same tenant and working key", async () => {
    const key = newIdempotencyKey()
    const body = {
      email: `sealed-${randomBytes(4).toString("hex")}@example.com`,
      password: "correct horse battery staple",
      company_name: "Sealed",
      plan: "basic",
    }
    const anonymous = apiClient(platform.url)
    const first = await anonymous.post<Registered>("/api/tenant/register", body, { "idempotency-key": key })
    const registered = expectOk(first, 201)
    const record = await storedRecordText(key)
    expectSealed(record, registered.api_key)
    // The request's fingerprint is keyed: a plain SHA-256 of a body holding the password would let
    // anyone who reads the table guess the password at hash speed.
    const sorted = Object.fromEntries(Object.entries(body).sort(([a], [b]) => (a < b ? -1 : 1)))
    const request = `tenant.register\n${JSON.stringify(sorted)}`
    const { kek } = await resolveKek({ env: {}, dataDir: platform.dataDir })
    expect(record).toContain(makeResponseSealer(kek).fingerprint(request))
    expect(record).not.toContain(createHash("sha256").update(request).digest("hex"))
    expect(record).not.toContain(body.password)
    const second = await anonymous.post<Registered>("/api/tenant/register", body, { "idempotency-key": key })
    expectReplay(first, second)
    await expectWorks(second.body)
  })

  it("keeps a registration's Idempotency-Key to its own e-mail address: another sign-up may use the same key", async () => {
    const key = "signup-1"
    const register = (email: string) =>
      apiClient(platform.url).post<Registered>(
        "/api/tenant/register",
        { email, password: "correct horse battery staple", company_name: "Shared key", plan: "basic" },
        { "idempotency-key": key },
      )
    const suffix = randomBytes(4).toString("hex")
    const first = expectOk(await register(`first-${suffix}@example.com`), 201)
    const second = expectOk(await register(`second-${suffix}@example.com`), 201)
    expect(second.tenant_id).not.toBe(first.tenant_id)
    // Each is still its own replay.
    expect(expectOk(await register(`first-${suffix}@example.com`), 201).tenant_id).toBe(first.tenant_id)
  })

  it("stores a rotation's response sealed and replays the same working successor", async () => {
    const old = await createKey(owner.client)
    const key = newIdempotencyKey()
    const route = `/api/v1/api-keys/${old.key_id}/rotate`
    const body = { grace_period_seconds: 60 }
    const first = await owner.client.post<Rotation>(route, body, { "idempotency-key": key })
    const rotated = expectOk(first)
    expectSealed(await storedRecordText(key), rotated.new_key.api_key)
    const second = await owner.client.post<Rotation>(route, body, { "idempotency-key": key })
    expectReplay(first, second)
    await expectWorks({ tenant_id: owner.credentials.tenant_id, api_key: second.body.new_key.api_key })
  })

  it("answers 500 stored_response_unreadable, never garbage, for a sealed record that was altered or moved", async () => {
    const body = { name: "tampered", scopes: ["wallets:read"] }
    const altered = newIdempotencyKey()
    expectOk(await owner.client.post("/api/v1/api-keys", body, { "idempotency-key": altered }), 201)
    // One byte of the ciphertext changed (its authentication tag no longer matches).
    await platform.database.pool.query(
      `update platform.idempotency_keys
          set response_body = jsonb_set(response_body::jsonb, '{data}',
                to_jsonb(translate(response_body->>'data', 'ABCDEFGHab', 'BCDEFGHAba')))::json
        where idempotency_key = $1`,
      [altered],
    )
    const error = expectError(
      await owner.client.post("/api/v1/api-keys", body, { "idempotency-key": altered }),
      500,
      "stored_response_unreadable",
    )
    expect(error.message).not.toMatch(/sk_/)

    // A record copied whole under another Idempotency-Key: bound to its own, it does not open.
    const original = newIdempotencyKey()
    const moved = newIdempotencyKey()
    expectOk(await owner.client.post("/api/v1/api-keys", body, { "idempotency-key": original }), 201)
    await platform.database.pool.query(
      `insert into platform.idempotency_keys
         (tenant_id, environment, idempotency_key, fingerprint, response_status, response_body)
       select tenant_id, environment, $2, fingerprint, response_status, response_body
         from platform.idempotency_keys where idempotency_key = $1`,
      [original, moved],
    )
    expectError(
      await owner.client.post("/api/v1/api-keys", body, { "idempotency-key": moved }),
      500,
      "stored_response_unreadable",
    )
  })

  it("answers 500 stored_response_unreadable from a process whose CUSTODY_KEK is another key", async () => {
    const key = newIdempotencyKey()
    const body = { name: "other-kek", scopes: ["wallets:read"] }
    expectOk(await owner.client.post("/api/v1/api-keys", body, { "idempotency-key": key }), 201)
    const other = await startPlatform({
      DATABASE_URL: platform.database.url,
      CUSTODY_KEK: randomBytes(32).toString("hex"),
    })
    try {
      const replayed = await apiClient(other.url, owner.credentials).post("/api/v1/api-keys", body, {
        "idempotency-key": key,
      })
      expectError(replayed, 500, "stored_response_unreadable")
    } finally {
      await other.stop()
    }
  }, 180_000)
})

describe("rotation", () => {
  let owner: { client: ApiClient; credentials: Credentials }
  beforeAll(async () => {
    owner = await registerTenant(platform.url)
  })

  const rotate = (key_id: string, body: Record<string, unknown> = {}) =>
    owner.client.post<Rotation>(`/api/v1/api-keys/${key_id}/rotate`, body)
  const keysOf = async () =>
    expectOk(await owner.client.get<Page<KeyView>>("/api/v1/api-keys?limit=100")).data

  it("refuses to rotate a rotating key with 409 api_key_rotating naming the successor, and never moves its expiry", async () => {
    const key = await createKey(owner.client, { name: "twice", scopes: ["wallets:read"] })
    const first = expectOk(await rotate(key.key_id, { grace_period_seconds: 5 }))
    const error = expectError(
      await rotate(key.key_id, { grace_period_seconds: 604_800 }),
      409,
      "api_key_rotating",
    )
    expect(error.param).toBe("key_id")
    expect(error.message).toContain(first.new_key.key_id)
    const listed = await keysOf()
    expect(listed.find((k) => k.key_id === key.key_id)?.expires_at).toBe(first.old_key.expires_at)
    expect(listed.filter((k) => k.name === "twice" && k.key_id !== key.key_id)).toHaveLength(1)
  })

  it("answers a key's retry of its own rotation with the stored successor, though the key is now rotated out", async () => {
    const key = await createKey(owner.client, { name: "self", scopes: ["wallets:read", "keys:manage"] })
    const itself = apiClient(platform.url, { tenant_id: owner.credentials.tenant_id, api_key: key.api_key })
    const headers = { "idempotency-key": newIdempotencyKey() }
    const route = `/api/v1/api-keys/${key.key_id}/rotate`
    const first = await itself.post<Rotation>(route, { grace_period_seconds: 600 }, headers)
    const successor = expectOk(first).new_key
    const again = await itself.post<Rotation>(route, { grace_period_seconds: 600 }, headers)
    expectReplay(first, again)
    expect(again.body.new_key.api_key).toBe(successor.api_key)
    // A new request of the rotated-out key is refused.
    expectError(await itself.post(route, { grace_period_seconds: 600 }), 403, "api_key_rotated_out")
  })

  it("leaves a rotated-out key working for its grace period, but managing no key except ending itself", async () => {
    const full = ["wallets:read", "keys:manage"]
    const old = await createKey(owner.client, { name: "leaked", scopes: full })
    const other = await createKey(owner.client, { name: "bystander", scopes: ["wallets:read"] })
    const successor = expectOk(await rotate(old.key_id, { grace_period_seconds: 600 })).new_key
    const leaked = apiClient(platform.url, { tenant_id: owner.credentials.tenant_id, api_key: old.api_key })
    expectOk(await leaked.get("/api/v1/wallets"))
    const refusals = [
      await leaked.post("/api/v1/api-keys", { name: "minted", scopes: ["wallets:read"] }),
      await leaked.post(`/api/v1/api-keys/${other.key_id}/rotate`, {}),
      await leaked.post(`/api/v1/api-keys/${successor.key_id}/revoke`, {}),
    ]
    for (const refused of refusals)
      expect(expectError(refused, 403, "api_key_rotated_out").message).toContain(old.key_id)
    const listed = await keysOf()
    expect(listed.filter((k) => k.name === "minted")).toHaveLength(0)
    expect(listed.find((k) => k.key_id === other.key_id)?.status).toBe("active")
    expect(listed.find((k) => k.key_id === successor.key_id)?.status).toBe("active")
    // It may still end itself early.
    expect(expectOk(await leaked.post<KeyView>(`/api/v1/api-keys/${old.key_id}/revoke`, {})).status).toBe(
      "revoked",
    )
    expectError(await leaked.get("/api/v1/wallets"), 401, "api_key_revoked")
  })

  it("rotates a key once when two rotations race: one 200, one 409", async () => {
    const key = await createKey(owner.client, { name: "race", scopes: ["wallets:read"] })
    const answers = await Promise.all([
      rotate(key.key_id, { grace_period_seconds: 60 }),
      rotate(key.key_id, { grace_period_seconds: 600 }),
    ])
    expect(answers.map((answer) => answer.status).sort()).toEqual([200, 409])
    expect((await keysOf()).filter((k) => k.name === "race")).toHaveLength(2)
  })

  it("refuses to rotate a revoked key with 409 api_key_already_revoked", async () => {
    const key = await createKey(owner.client)
    expectOk(await owner.client.post(`/api/v1/api-keys/${key.key_id}/revoke`))
    const error = expectError(await rotate(key.key_id), 409, "api_key_already_revoked")
    expect(error.param).toBe("key_id")
    expect((await keysOf()).find((k) => k.key_id === key.key_id)?.status).toBe("revoked")
  })

  it("refuses to rotate an expired key with 409 api_key_already_expired", async () => {
    const key = await createKey(owner.client)
    const rotated = expectOk(await rotate(key.key_id, { grace_period_seconds: 0 }))
    const error = expectError(await rotate(key.key_id), 409, "api_key_already_expired")
    expect(error.message).toContain(rotated.new_key.key_id)
  })

  it("revokes a revoked key again as a no-op, and refuses an expired one 409 api_key_already_expired, leaving it expired", async () => {
    const revoked = await createKey(owner.client)
    const first = expectOk(await owner.client.post<KeyView>(`/api/v1/api-keys/${revoked.key_id}/revoke`))
    const again = expectOk(await owner.client.post<KeyView>(`/api/v1/api-keys/${revoked.key_id}/revoke`))
    expect(again).toEqual(first)
    const expired = await createKey(owner.client)
    expectOk(await rotate(expired.key_id, { grace_period_seconds: 0 }))
    const before = (await keysOf()).find((k) => k.key_id === expired.key_id)
    expect(before?.status).toBe("expired")
    // Revoking it after its end rewrote its history: status "revoked", revoked_at after expires_at.
    expectError(
      await owner.client.post(`/api/v1/api-keys/${expired.key_id}/revoke`),
      409,
      "api_key_already_expired",
    )
    expect((await keysOf()).find((k) => k.key_id === expired.key_id)).toEqual(before)
  })

  it("answers 404 api_key_not_found for another tenant's key and an unknown one", async () => {
    const other = await registerTenant(platform.url)
    const theirs = await createKey(other.client)
    expectError(await rotate(theirs.key_id), 404, "api_key_not_found")
    expectError(await rotate("key_unknown"), 404, "api_key_not_found")
    expect(
      expectOk(await other.client.get<Page<KeyView>>("/api/v1/api-keys")).data.find(
        (k) => k.key_id === theirs.key_id,
      )?.status,
    ).toBe("active")
  })
})

describe("optional request bodies", () => {
  let owner: { client: ApiClient; credentials: Credentials }
  beforeAll(async () => {
    owner = await registerTenant(platform.url)
  })

  it.each([
    ["no body and no content type", undefined, undefined],
    ["an empty JSON body", "", "application/json"],
    ["a JSON null", "null", "application/json"],
    ["an empty object", "{}", "application/json"],
  ])("creates a sandbox key with every scope from %s", async (_, body, contentType) => {
    const created = await post<NewKeyView>(owner.credentials, "/api/v1/api-keys", body, contentType)
    expect(created).toMatchObject({
      status: 201,
      body: { environment: "sandbox", name: null, status: "active" },
    })
    expect([...created.body.scopes].sort()).toEqual([...apiScopes].sort())
    await expectWorks({ tenant_id: owner.credentials.tenant_id, api_key: created.body.api_key })
  })

  it("rotates with the default grace period (1 day) when the body is left out", async () => {
    const key = await createKey(owner.client)
    const before_ms = Date.now()
    const rotated = await post<Rotation>(owner.credentials, `/api/v1/api-keys/${key.key_id}/rotate`)
    expect(rotated).toMatchObject({ status: 200, body: { old_key: { key_id: key.key_id } } })
    const expires_ms = Date.parse(rotated.body.old_key.expires_at ?? "")
    expect(Math.abs(expires_ms - (before_ms + 86_400_000))).toBeLessThan(5_000)
  })

  it("treats a left-out body and {} as the same request for its Idempotency-Key", async () => {
    const key = newIdempotencyKey()
    const first = await owner.client.post<NewKeyView>("/api/v1/api-keys", {}, { "idempotency-key": key })
    const second = await fetch(`${platform.url}/api/v1/api-keys`, {
      method: "POST",
      headers: {
        authorization: `Bearer ${owner.credentials.api_key}`,
        "x-tenant-id": owner.credentials.tenant_id,
        "idempotency-key": key,
      },
    })
    expect(second.headers.get("idempotent-replayed")).toBe("true")
    expect(await second.json()).toEqual(expectOk(first, 201))
  })

  it("still refuses a body that is not an object, or has an unknown field", async () => {
    for (const body of ["[]", "42", '"x"']) {
      expectError(
        await post(owner.credentials, "/api/v1/api-keys", body, "application/json"),
        400,
        "invalid_parameter",
      )
    }
    const error = expectError(
      await post(owner.credentials, "/api/v1/api-keys", '{"scope":["wallets:read"]}', "application/json"),
      400,
      "invalid_parameter",
    )
    expect(error.param).toBe("scope")
  })

  it("documents both bodies as optional in the OpenAPI document, and registration's as required", async () => {
    const spec = (await (await fetch(`${platform.url}/openapi.json`)).json()) as {
      paths: Record<string, Record<string, { requestBody?: { required?: boolean } }>>
    }
    expect(spec.paths["/api/v1/api-keys"]?.post?.requestBody?.required).toBe(false)
    expect(spec.paths["/api/v1/api-keys/{key_id}/rotate"]?.post?.requestBody?.required).toBe(false)
    expect(spec.paths["/api/tenant/register"]?.post?.requestBody?.required).toBe(true)
  })
})

describe("the key list", () => {
  let owner: { client: ApiClient; credentials: Credentials }
  beforeAll(async () => {
    owner = await registerTenant(platform.url)
    await createKey(owner.client, { name: "k0" })
    await createKey(owner.client, { name: "k1" })
    expectOk(
      await owner.client.post("/api/v1/tenant/verification", {
        legal_name: "Acme Payments GmbH",
        registration_number: "HRB 12345",
        country: "DE",
        representative: { name: "Ada Example", country: "DE" },
      }),
    )
    await createKey(owner.client, { name: "k2", environment: "production" })
    await createKey(owner.client, { name: "k3" })
  })

  // Newest first, the keys are k3, k2 (production), k1, k0 and the registration's: pages of two end
  // on the production key, which a sandbox caller's next page starts after.
  it("pages the keys of both environments newest first by limit and starting_after, like every list", async () => {
    const all = expectOk(await owner.client.get<Page<KeyView>>("/api/v1/api-keys"))
    expect(all).toMatchObject({ has_more: false, next_cursor: null })
    expect(all.data).toHaveLength(5)
    const ids = all.data.map((k) => k.key_id)
    expect(ids).toEqual([...ids].sort().reverse())

    const first = expectOk(await owner.client.get<Page<KeyView>>("/api/v1/api-keys?limit=1"))
    expect(first).toEqual({ data: [all.data[0]], has_more: true, next_cursor: ids[0] })

    const walked: Array<string> = []
    let cursor: string | null = null
    for (let page_count = 0; page_count < 10; page_count++) {
      const query: string = cursor === null ? "limit=2" : `limit=2&starting_after=${cursor}`
      const page = expectOk(await owner.client.get<Page<KeyView>>(`/api/v1/api-keys?${query}`))
      walked.push(...page.data.map((k) => k.key_id))
      expect(page.next_cursor).toBe(page.has_more ? (page.data.at(-1)?.key_id ?? null) : null)
      cursor = page.next_cursor
      if (cursor === null) break
    }
    expect(walked).toEqual(ids)
    expect(all.data.map((k) => `${k.name}:${k.environment}`)).toEqual([
      "k3:sandbox",
      "k2:production",
      "k1:sandbox",
      "k0:sandbox",
      "default:sandbox",
    ])
    expectOk(await owner.client.get<Page<KeyView>>("/api/v1/api-keys?starting_after="))
  })

  it.each(["0", "101", "abc", "-1", "1.5", ""])("refuses limit=%j with 400 invalid_limit", async (limit) => {
    const error = expectError(await owner.client.get(`/api/v1/api-keys?limit=${limit}`), 400, "invalid_limit")
    expect(error.param).toBe("limit")
  })

  it("refuses a starting_after that is none of the tenant's keys with 400 invalid_cursor", async () => {
    const other = await registerTenant(platform.url)
    const theirs = await createKey(other.client)
    for (const cursor of ["garbage", "key_zzzz", theirs.key_id]) {
      const error = expectError(
        await owner.client.get(`/api/v1/api-keys?starting_after=${cursor}`),
        400,
        "invalid_cursor",
      )
      expect(error.param).toBe("starting_after")
    }
  })
})
