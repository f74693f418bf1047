// Proves that every endpoint taking input refuses bad input with the right status and one error
// shape ({"error":{type, code, message, param?, request_id}}, request_id = the X-Request-Id header),
// and that a refused request writes nothing: the platform tables, the ledger's event store and its
// balances are snapshotted before and after every case and must be identical. One platform process
// serves the whole file; valid fixtures (two tenants, wallets on three chains, faucet money,
// identities, keys, a webhook) are set up first and the platform is left to go quiet.
import { randomBytes } from "node:crypto"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import {
  type ApiClient,
  apiClient,
  type Credentials,
  type RunningPlatform,
  registerTenant,
  startPlatform,
} from "../support/platform-process.ts"

// --- Fixtures ---------------------------------------------------------------------------------

interface Fixture {
  readonly tenant: Credentials
  readonly email: string
  /** Another tenant, whose resources must look absent to `tenant`. */
  readonly other: Credentials
  readonly other_wallet: string
  readonly other_key_id: string
  /** `eth` is the default wallet and holds USDC; `eth2` is linked to ana@example.com. */
  readonly wallets: {
    readonly eth: string
    readonly eth2: string
    readonly sol: string
    readonly bsc: string
  }
  /** A key with only `wallets:read`. */
  readonly read_only_key: string
  readonly revoked_key: string
  readonly revoked_key_id: string
  /** A live key used only as the target of rotation cases. */
  readonly spare_key_id: string
  readonly webhook_id: string
}

/** The phone linked to `eth` (the default payer), so paying it is paying yourself. */
const ownPhone = "+14155550100"
/** Linked to `bsc`, the payer of the 18-decimal cases. */
const bscHandle = "@telegram:bsc_owner"
/** Linked to `eth2`. */
const anaEmail = "ana@example.com"
const walletKey = "fixture-wallet-eth"
const payKey = "fixture-pay-1"
const validWebhook = {
  url: "http://127.0.0.1:9/hooks",
  events: ["payment.pending"],
  secret: "whsec_0123456789abcdef",
}
const validVerification = {
  legal_name: "Bad Input GmbH",
  registration_number: "HRB 12345",
  country: "DE",
  representative: { name: "Ana Example", country: "DE" },
}

let platform: RunningPlatform
let fixture: Fixture

/** Fails the setup with the response when a fixture request is not answered `status`. */
const expectStatus = <T>(answer: { status: number; body: T }, status: number, what: string): T => {
  if (answer.status !== status) {
    throw new Error(`${what}: expected ${status}, got ${answer.status} ${JSON.stringify(answer.body)}`)
  }
  return answer.body
}

/** Wallets on three chains, USDC on `eth`, three linked identities and one completed payment. */
const setUpMoney = async (client: ApiClient) => {
  const wallet = async (external_id: string, chain: string, headers: Record<string, string> = {}) =>
    expectStatus(
      await client.post<{ wallet_id: string }>(
        "/api/v1/wallets",
        { external_id, label: external_id, chain },
        headers,
      ),
      201,
      `wallet ${external_id}`,
    ).wallet_id
  const wallets = {
    eth: await wallet("eth", "ethereum", { "idempotency-key": walletKey }),
    eth2: await wallet("eth2", "ethereum"),
    sol: await wallet("sol", "solana"),
    bsc: await wallet("bsc", "bsc"),
  }
  expectStatus(
    await client.post("/api/v1/sandbox/faucet", { wallet_id: wallets.eth, token: "USDC", amount: "100" }),
    200,
    "faucet",
  )
  for (const [wallet_id, kind, value] of [
    [wallets.eth, "phone", ownPhone],
    [wallets.eth2, "email", anaEmail],
    [wallets.bsc, "handle", bscHandle],
  ] as const) {
    expectStatus(await client.post("/api/v1/identities", { wallet_id, kind, value }), 201, `link ${value}`)
  }
  // A completed payment opens the fee account, so the insufficient-funds case opens no account.
  expectStatus(
    await client.post(
      "/api/social-payments/pay",
      { recipient: anaEmail, amount: "1", token: "USDC" },
      { "idempotency-key": payKey },
    ),
    200,
    "payment",
  )
  return wallets
}

/** A read-only key, a revoked key, a spare key to rotate, and a webhook no case triggers. */
const setUpCredentials = async (client: ApiClient) => {
  const key = async (body: object) =>
    expectStatus(
      await client.post<{ key_id: string; api_key: string }>("/api/v1/api-keys", body),
      201,
      "api key",
    )
  const read_only = await key({ scopes: ["wallets:read"], name: "read only" })
  const revoked = await key({ name: "revoked" })
  expectStatus(await client.post(`/api/v1/api-keys/${revoked.key_id}/revoke`), 200, "revoke")
  const spare = await key({ name: "spare" })
  const webhook = await client.post<{ webhook_id: string }>("/api/v1/webhooks", validWebhook)
  return {
    read_only_key: read_only.api_key,
    revoked_key: revoked.api_key,
    revoked_key_id: revoked.key_id,
    spare_key_id: spare.key_id,
    webhook_id: expectStatus(webhook, 201, "webhook").webhook_id,
  }
}

const setUpOtherTenant = async (url: string) => {
  const { credentials: other, client } = await registerTenant(url)
  const wallet = await client.post<{ wallet_id: string }>("/api/v1/wallets", {
    external_id: "other",
    label: "other",
    chain: "ethereum",
  })
  const keys = await client.get<{ data: ReadonlyArray<{ key_id: string }> }>("/api/v1/api-keys")
  const other_key_id = expectStatus(keys, 200, "other keys").data[0]?.key_id
  if (other_key_id === undefined) throw new Error("the other tenant has no key")
  return { other, other_wallet: expectStatus(wallet, 201, "other wallet").wallet_id, other_key_id }
}

const setUp = async (url: string): Promise<Fixture> => {
  const email = `bad-input-${process.pid}-${Date.now()}@example.com`
  const registered = await apiClient(url).post<Credentials>("/api/tenant/register", {
    email,
    password: "correct horse battery staple",
    company_name: "Bad Input GmbH",
    plan: "professional",
  })
  const tenant = expectStatus(registered, 201, "register")
  const client = apiClient(url, tenant)
  return {
    tenant,
    email,
    wallets: await setUpMoney(client),
    ...(await setUpCredentials(client)),
    ...(await setUpOtherTenant(url)),
  }
}

// --- The database snapshot ----------------------------------------------------------------------

/** Tables whose rows a refused request must leave exactly as they were. */
const snapshotTables = [
  "platform.tenants",
  "platform.tenant_environments",
  "platform.api_keys",
  "platform.wallets",
  "platform.identities",
  "platform.payments",
  "platform.idempotency_keys",
  "platform.webhooks",
  "platform.webhook_events",
] as const
type SnapshotTable = (typeof snapshotTables)[number]

interface Snapshot {
  readonly tables: Readonly<Record<SnapshotTable, { readonly rows: number; readonly hash: string }>>
  readonly events: { readonly count: number; readonly max_global_position: string | null }
  readonly balances: { readonly accounts: number; readonly hash: string }
}

const snapshot = async (): Promise<Snapshot> => {
  const { pool } = platform.database
  const tables = {} as Record<SnapshotTable, { rows: number; hash: string }>
  for (const table of snapshotTables) {
    const { rows } = await pool.query<{ rows: number; hash: string | null }>(
      `select count(*)::int as rows, md5(string_agg(t::text, E'\\n' order by t::text)) as hash from ${table} t`,
    )
    tables[table] = { rows: rows[0]?.rows ?? -1, hash: rows[0]?.hash ?? "" }
  }
  const events = (
    await pool.query<{ count: number; max_global_position: string | null }>(
      "select count(*)::int as count, max(global_position)::text as max_global_position from events",
    )
  ).rows[0]
  const balances = (
    await pool.query<{ accounts: number; hash: string | null }>(
      `select count(*)::int as accounts,
              md5(string_agg(concat_ws(' ', stream_id, account_id, debits_pending, debits_posted,
                                       credits_pending, credits_posted), E'\\n'
                             order by stream_id, account_id)) as hash
         from read_model.ledger_accounts`,
    )
  ).rows[0]
  if (events === undefined || balances === undefined) throw new Error("snapshot queries returned no row")
  return { tables, events, balances: { accounts: balances.accounts, hash: balances.hash ?? "" } }
}

const quiet_timeout_ms = 20_000

/** Waits until the balances projection has read every event and the webhook outbox is dispatched. */
const waitUntilQuiet = async () => {
  const deadline = Date.now() + quiet_timeout_ms
  for (;;) {
    const { rows } = await platform.database.pool.query<{ behind: boolean; undispatched: number }>(
      `select coalesce((select max(global_position) from events), 0)
                > coalesce((select min(global_position) from read_model.projection_checkpoints), -1) as behind,
              (select count(*)::int from platform.webhook_events where dispatched_at is null) as undispatched`,
    )
    const state = rows[0]
    if (state !== undefined && !state.behind && state.undispatched === 0) return
    if (Date.now() > deadline) throw new Error(`the platform did not go quiet: ${JSON.stringify(state)}`)
    await new Promise((resolve) => setTimeout(resolve, 50))
  }
}

// --- Cases --------------------------------------------------------------------------------------

type Method = "GET" | "POST" | "PATCH" | "DELETE"
/** A JSON value; `undefined` members are left out when sent (a missing field). */
type Json =
  | string
  | number
  | boolean
  | null
  | ReadonlyArray<Json>
  | { readonly [key: string]: Json | undefined }
type Lazy<T> = T | ((f: Fixture) => T)
const resolve = <T>(value: Lazy<T>, f: Fixture): T =>
  typeof value === "function" ? (value as (f: Fixture) => T)(f) : value

/** A body sent byte for byte instead of as JSON (text is sent as UTF-8). */
class Raw {
  readonly text: string | Uint8Array
  constructor(text: string | Uint8Array) {
    this.text = text
  }
}
const raw = (text: string | Uint8Array) => new Raw(text)

interface Outcome {
  readonly status: number
  readonly code: string
  /** The `param` the error must name; absent means the error must carry none. */
  readonly param?: string
  /** Overrides the type the status implies. */
  readonly type?: string
}

interface Options {
  /** Headers added to the request. */
  readonly headers?: Lazy<Readonly<Record<string, string>>>
  /** Replaces the tenant's Authorization and X-Tenant-Id headers. */
  readonly auth?: Lazy<Readonly<Record<string, string>>>
}

interface Case extends Outcome, Options {
  readonly name: string
  readonly method: Method
  readonly path: Lazy<string>
  /** undefined: no body. */
  readonly body?: Lazy<Json | Raw>
}

const refused = (status: number, code: string, param?: string): Outcome =>
  param === undefined ? { status, code } : { status, code, param }

/** Builds the cases of one endpoint: `call(name, body, outcome, options?)`. */
const endpoint =
  (method: Method, path: Lazy<string>) =>
  (name: string, body: Lazy<Json | Raw> | undefined, outcome: Outcome, options: Options = {}): Case => ({
    name,
    method,
    path,
    ...(body === undefined ? {} : { body }),
    ...outcome,
    ...options,
  })
type Endpoint = ReturnType<typeof endpoint>

const typeOfStatus: Readonly<Record<number, string>> = {
  400: "invalid_request_error",
  401: "authentication_error",
  403: "permission_error",
  404: "not_found_error",
  409: "conflict_error",
  413: "invalid_request_error",
  415: "invalid_request_error",
  422: "business_rule_error",
}

const bearer = (credentials: Credentials) => ({
  authorization: `Bearer ${credentials.api_key}`,
  "x-tenant-id": credentials.tenant_id,
})

interface Answer {
  readonly status: number
  readonly request_id: string | null
  /** The parsed JSON, or the text when it is not JSON. */
  readonly body: unknown
}

const send = async (c: Case, f: Fixture): Promise<Answer> => {
  const given = c.body === undefined ? undefined : resolve(c.body, f)
  const body = given instanceof Raw ? given.text : given === undefined ? undefined : JSON.stringify(given)
  const response = await fetch(`${platform.url}${resolve(c.path, f)}`, {
    method: c.method,
    headers: {
      ...(body === undefined ? {} : { "content-type": "application/json" }),
      ...(c.auth === undefined ? bearer(f.tenant) : resolve(c.auth, f)),
      ...(c.headers === undefined ? {} : resolve(c.headers, f)),
    },
    ...(body === undefined ? {} : { body }),
  })
  const text = await response.text()
  let parsed: unknown
  try {
    parsed = JSON.parse(text)
  } catch {
    parsed = text
  }
  return { status: response.status, request_id: response.headers.get("x-request-id"), body: parsed }
}

/** The answer is the error `outcome` in the platform's shape, with the request id of its header. */
const expectRefusal = (answer: Answer, outcome: Outcome) => {
  expect({ status: answer.status, body: answer.body }).toEqual({
    status: outcome.status,
    body: {
      error: {
        type: outcome.type ?? typeOfStatus[outcome.status],
        code: outcome.code,
        message: expect.stringMatching(/\S/),
        param: outcome.param,
        request_id: answer.request_id,
      },
    },
  })
  expect(answer.request_id).toMatch(/^[A-Za-z0-9._:-]{8,128}$/)
}

/** Sends the case and checks its answer and that the database did not change. */
const check = async (c: Case) => {
  const before = await snapshot()
  const answer = await send(c, fixture)
  const after = await snapshot()
  expectRefusal(answer, c)
  expect(after, "a refused request wrote nothing").toEqual(before)
}

// Shared shapes of bad bodies, for every endpoint that takes a JSON body.
const bodyShapeCases = (
  call: Endpoint,
  valid: Lazy<{ readonly [key: string]: Json | undefined }>,
): ReadonlyArray<Case> => [
  call("malformed JSON", raw('{"a": '), refused(400, "invalid_json")),
  // An empty body is a missing object rather than broken JSON.
  call("an empty body", raw(""), refused(400, "invalid_parameter")),
  call("a JSON array instead of an object", [], refused(400, "invalid_parameter")),
  call("a JSON string instead of an object", "hello", refused(400, "invalid_parameter")),
  call("a JSON number instead of an object", 42, refused(400, "invalid_parameter")),
  call("JSON null instead of an object", null, refused(400, "invalid_parameter")),
  call(
    "an unknown extra field",
    (f) => ({ ...resolve(valid, f), unexpected_field: true }),
    refused(400, "invalid_parameter", "unexpected_field"),
  ),
  call(
    "a body over 1 MiB",
    raw(JSON.stringify({ padding: "x".repeat(1_048_576) })),
    refused(413, "body_too_large"),
  ),
  // "Café" in Latin-1: not UTF-8 (it was stored with U+FFFD in place of the é).
  call("a body that is not UTF-8", raw(latin1('{"name":"Caf\u00e9"}')), refused(400, "invalid_json")),
  call(
    "a body in another charset",
    (f) => raw(latin1(JSON.stringify(resolve(valid, f)))),
    refused(415, "unsupported_media_type"),
    { headers: { "content-type": "application/json; charset=iso-8859-1" } },
  ),
  call(
    "a compressed body",
    (f) => raw(JSON.stringify(resolve(valid, f))),
    refused(415, "unsupported_media_type"),
    {
      headers: { "content-encoding": "gzip" },
    },
  ),
]

/** `text` as ISO-8859-1 bytes (every character below U+0100). */
const latin1 = (text: string) => Uint8Array.from(text, (character) => character.charCodeAt(0))

// A valid body with a malformed Idempotency-Key: the key is refused before anything happens.
const idempotencyKeyCases = (call: Endpoint, valid: Lazy<Json>): ReadonlyArray<Case> =>
  [
    ["with spaces", "has spaces"],
    ["of 256 characters", "k".repeat(256)],
    ["empty", ""],
    ["with a tab", "a\tb"],
  ].map(([what, key]) =>
    call(`Idempotency-Key ${what}`, valid, refused(400, "invalid_idempotency_key", "Idempotency-Key"), {
      headers: { "idempotency-key": key ?? "" },
    }),
  )

/** Bodies a POST that takes none refuses. */
const bodylessCases = (path: (f: Fixture) => string): ReadonlyArray<Case> => [
  endpoint("POST", path)(
    "a body that is not JSON to a POST without one",
    raw("garbage"),
    refused(400, "invalid_json"),
  ),
  endpoint("POST", path)(
    "a field to a POST without a body",
    { wallet_id: "wal_x" },
    refused(400, "invalid_parameter", "wallet_id"),
  ),
  endpoint("POST", path)("an array to a POST without a body", [1], refused(400, "invalid_parameter")),
  endpoint("POST", (f) => `${path(f)}/`)(
    "a field, after a trailing slash",
    { wallet_id: "wal_x" },
    refused(400, "invalid_parameter", "wallet_id"),
  ),
  endpoint("POST", path)(
    "a form body to a POST without one",
    raw("garbage=1"),
    refused(415, "unsupported_media_type"),
    {
      headers: { "content-type": "application/x-www-form-urlencoded" },
    },
  ),
  endpoint("POST", path)(
    "a text body to a POST without one",
    raw("hello"),
    refused(415, "unsupported_media_type"),
    {
      headers: { "content-type": "text/plain" },
    },
  ),
  // Too large to read: it was neither read nor refused, and the POST took effect.
  endpoint("POST", path)(
    "a body over 1 MiB to a POST without one",
    raw(JSON.stringify({ padding: "x".repeat(1_048_576) })),
    refused(413, "body_too_large"),
    { headers: { "content-type": "application/octet-stream" } },
  ),
]

const limitCases = (path: (f: Fixture) => string): ReadonlyArray<Case> =>
  ["0", "101", "abc", "-1", "1.5", "", "1e1"].map((limit) =>
    endpoint("GET", (f) => `${path(f)}?limit=${encodeURIComponent(limit)}`)(
      `limit=${JSON.stringify(limit)}`,
      undefined,
      refused(400, "invalid_limit", "limit"),
    ),
  )

/** Cursors that name no item of the list: made up, another list's id, another tenant's wallet. */
const cursorCases = (path: (f: Fixture) => string): ReadonlyArray<Case> =>
  [
    ["made up", () => "garbage"],
    ["an id of another kind", () => "txn_zzzz"],
    ["another tenant's wallet", (f: Fixture) => f.other_wallet],
  ].map(([what, cursor]) =>
    endpoint(
      "GET",
      (f) => `${path(f)}?starting_after=${encodeURIComponent((cursor as (f: Fixture) => string)(f))}`,
    )(`starting_after ${what as string}`, undefined, refused(400, "invalid_cursor", "starting_after")),
  )

// The amounts every money-taking endpoint refuses, on an ethereum wallet (USDC: 6 decimals).
const badAmounts: ReadonlyArray<readonly [string, Json, Outcome]> = [
  ["negative", "-5", refused(400, "amount_negative", "amount")],
  ["negative number", -5, refused(400, "amount_negative", "amount")],
  ["zero", "0", refused(400, "amount_zero", "amount")],
  ["zero with decimals", "0.000000", refused(400, "amount_zero", "amount")],
  ["zero number", 0, refused(400, "amount_zero", "amount")],
  ["exponent 1e3", "1e3", refused(400, "invalid_amount", "amount")],
  ["hexadecimal 0x10", "0x10", refused(400, "invalid_amount", "amount")],
  ["no leading digit .5", ".5", refused(400, "invalid_amount", "amount")],
  ["no trailing digit 1.", "1.", refused(400, "invalid_amount", "amount")],
  ["leading zeros 007", "007", refused(400, "invalid_amount", "amount")],
  ["grouping 1,000.00", "1,000.00", refused(400, "invalid_amount", "amount")],
  ["leading plus +1", "+1", refused(400, "invalid_amount", "amount")],
  ["whitespace ' 1'", " 1", refused(400, "invalid_amount", "amount")],
  ["empty string", "", refused(400, "invalid_amount", "amount")],
  ["NaN", "NaN", refused(400, "invalid_amount", "amount")],
  ["Infinity", "Infinity", refused(400, "invalid_amount", "amount")],
  ["words", "ten dollars", refused(400, "invalid_amount", "amount")],
  ["7 decimals for USDC on ethereum", "1.0000001", refused(400, "too_many_decimals", "amount")],
  ["7 decimals as a JSON number", 0.1234567, refused(400, "too_many_decimals", "amount")],
  ["trailing zero beyond 6 decimals", "1.0000000", refused(400, "too_many_decimals", "amount")],
  ["beyond u128", `1${"0".repeat(40)}`, refused(400, "amount_too_large", "amount")],
  ["a 300-digit string", "9".repeat(300), refused(400, "invalid_amount", "amount")],
  ["JSON number with 16 significant digits", 1234567.123456789, refused(400, "amount_imprecise", "amount")],
  ["JSON number JavaScript writes with an exponent (1e21)", 1e21, refused(400, "amount_too_large", "amount")],
  ["JSON number below 1e-6 (7 decimals)", 1e-7, refused(400, "too_many_decimals", "amount")],
  ["boolean", true, refused(400, "invalid_parameter", "amount")],
  ["null", null, refused(400, "invalid_parameter", "amount")],
  ["object", { value: "1" }, refused(400, "invalid_parameter", "amount")],
]

// --- The table ----------------------------------------------------------------------------------

const register = endpoint("POST", "/api/tenant/register")
const validRegistration = {
  email: "new-tenant@example.com",
  password: "correct horse battery staple",
  company_name: "New GmbH",
  plan: "basic",
}
const registerCases: ReadonlyArray<Case> = [
  ...bodyShapeCases(register, validRegistration),
  register(
    "email of the wrong type",
    { ...validRegistration, email: 42 },
    refused(400, "invalid_parameter", "email"),
  ),
  register(
    "missing password",
    { ...validRegistration, password: undefined },
    refused(400, "invalid_parameter", "password"),
  ),
  register(
    "invalid e-mail",
    { ...validRegistration, email: "not-an-email" },
    refused(400, "invalid_email", "email"),
  ),
  register(
    "e-mail without a domain dot",
    { ...validRegistration, email: "a@b" },
    refused(400, "invalid_email", "email"),
  ),
  register("empty e-mail", { ...validRegistration, email: "" }, refused(400, "invalid_email", "email")),
  register(
    "short password",
    { ...validRegistration, password: "short" },
    refused(400, "invalid_password", "password"),
  ),
  register(
    "password of 257 characters",
    { ...validRegistration, password: "p".repeat(257) },
    refused(400, "invalid_password", "password"),
  ),
  register(
    "password of 10 spaces",
    { ...validRegistration, password: " ".repeat(10) },
    refused(400, "invalid_password", "password"),
  ),
  register(
    "password of 9 emoji (18 UTF-16 units)",
    { ...validRegistration, password: "🔑".repeat(9) },
    refused(400, "invalid_password", "password"),
  ),
  register(
    "empty company name",
    { ...validRegistration, company_name: "" },
    refused(400, "invalid_parameter", "company_name"),
  ),
  register(
    "blank company name",
    { ...validRegistration, company_name: "   " },
    refused(400, "invalid_parameter", "company_name"),
  ),
  ...[
    ["a BEL", "\u0007bell"],
    ["a line break", "A\nB"],
    ["a right-to-left override", "\u202Eevil"],
    ["a bidirectional isolate", "a\u2066b"],
  ].map(([what, company_name]) =>
    register(
      `company name with ${what}`,
      { ...validRegistration, company_name },
      refused(400, "invalid_parameter", "company_name"),
    ),
  ),
  register(
    "company name of 201 characters",
    { ...validRegistration, company_name: "c".repeat(201) },
    refused(400, "invalid_parameter", "company_name"),
  ),
  register("unknown plan", { ...validRegistration, plan: "platinum" }, refused(400, "invalid_plan", "plan")),
  register(
    "duplicate e-mail",
    (f) => ({ ...validRegistration, email: f.email }),
    refused(409, "email_taken", "email"),
  ),
  register(
    "duplicate e-mail in other case",
    (f) => ({ ...validRegistration, email: f.email.toUpperCase() }),
    refused(409, "email_taken", "email"),
  ),
  ...idempotencyKeyCases(register, validRegistration),
]

const tenantCases: ReadonlyArray<Case> = (() => {
  const verify = endpoint("POST", "/api/v1/tenant/verification")
  const v = validVerification
  return [
    ...bodyShapeCases(verify, v),
    verify("country in lower case (de)", { ...v, country: "de" }, refused(400, "invalid_country", "country")),
    verify(
      "three-letter country (DEU)",
      { ...v, country: "DEU" },
      refused(400, "invalid_country", "country"),
    ),
    // Two upper-case letters that name no country were taken.
    ...["XX", "ZZ", "AA", "EU", "UK"].map((country) =>
      verify(`unassigned country ${country}`, { ...v, country }, refused(400, "invalid_country", "country")),
    ),
    verify(
      "representative country QQ",
      { ...v, representative: { ...v.representative, country: "QQ" } },
      refused(400, "invalid_country", "representative.country"),
    ),
    verify(
      "representative country DEU",
      { ...v, representative: { ...v.representative, country: "DEU" } },
      refused(400, "invalid_country", "representative.country"),
    ),
    verify("empty legal_name", { ...v, legal_name: "" }, refused(400, "invalid_parameter", "legal_name")),
    verify(
      "legal_name of one character",
      { ...v, legal_name: " A " },
      refused(400, "invalid_parameter", "legal_name"),
    ),
    verify(
      "missing registration_number",
      { ...v, registration_number: undefined },
      refused(400, "invalid_parameter", "registration_number"),
    ),
    verify(
      "representative not an object",
      { ...v, representative: "Ana" },
      refused(400, "invalid_parameter", "representative"),
    ),
    verify(
      "representative without a name",
      { ...v, representative: { country: "DE" } },
      refused(400, "invalid_parameter", "representative.name"),
    ),
    verify(
      "unknown field inside representative",
      { ...v, representative: { ...v.representative, age: 40 } },
      refused(400, "invalid_parameter", "representative.age"),
    ),
    verify(
      "an empty document reference",
      { ...v, documents: [""] },
      refused(400, "invalid_documents", "documents"),
    ),
    ...(
      [
        ["a blank document reference", "   "],
        ["a document reference of two lines", "doc\nline2"],
        ["a document reference with a bidirectional override", "\u202edoc"],
      ] as const
    ).map(([name, reference]) =>
      verify(
        name ?? "",
        { ...v, documents: ["passport-1", reference] },
        refused(400, "invalid_documents", "documents"),
      ),
    ),
    verify(
      "21 documents",
      { ...v, documents: Array.from({ length: 21 }, (_, i) => `doc-${i}`) },
      refused(400, "invalid_documents", "documents"),
    ),
    ...idempotencyKeyCases(verify, v),
  ]
})()

const keyCases: ReadonlyArray<Case> = (() => {
  const create = endpoint("POST", "/api/v1/api-keys")
  const rotate = endpoint("POST", (f) => `/api/v1/api-keys/${f.spare_key_id}/rotate`)
  const valid = { scopes: ["wallets:read"], name: "ci" }
  // Both bodies may be left out: no body and JSON null mean {} (api-keys.test.ts); every other bad
  // shape is refused as for any body.
  const omittableBodyCases = (call: Endpoint, body: Parameters<typeof bodyShapeCases>[1]) =>
    bodyShapeCases(call, body).filter(
      (c) => c.name !== "an empty body" && c.name !== "JSON null instead of an object",
    )
  return [
    ...omittableBodyCases(create, valid),
    create("unknown scope", { scopes: ["wallets:read", "admin"] }, refused(400, "invalid_scope", "scopes")),
    create("empty scopes", { scopes: [] }, refused(400, "invalid_scope", "scopes")),
    create("scopes as a string", { scopes: "wallets:read" }, refused(400, "invalid_parameter", "scopes")),
    create(
      "unknown environment",
      { environment: "staging" },
      refused(400, "invalid_environment", "environment"),
    ),
    create(
      "production without verification",
      { environment: "production" },
      refused(403, "tenant_not_verified"),
    ),
    create("empty name", { name: "" }, refused(400, "invalid_parameter", "name")),
    create("name of 101 characters", { name: "n".repeat(101) }, refused(400, "invalid_parameter", "name")),
    ...idempotencyKeyCases(create, valid),
    ...omittableBodyCases(rotate, { grace_period_seconds: 60 }),
    rotate(
      "negative grace period",
      { grace_period_seconds: -1 },
      refused(400, "invalid_grace_period", "grace_period_seconds"),
    ),
    rotate(
      "grace period over 7 days",
      { grace_period_seconds: 604_801 },
      refused(400, "invalid_grace_period", "grace_period_seconds"),
    ),
    rotate(
      "fractional grace period",
      { grace_period_seconds: 1.5 },
      refused(400, "invalid_grace_period", "grace_period_seconds"),
    ),
    rotate(
      "grace period as a string",
      { grace_period_seconds: "60" },
      refused(400, "invalid_parameter", "grace_period_seconds"),
    ),
    ...idempotencyKeyCases(rotate, { grace_period_seconds: 60 }),
    endpoint("POST", "/api/v1/api-keys/key_unknown/rotate")(
      "rotate an unknown key",
      {},
      refused(404, "api_key_not_found", "key_id"),
    ),
    endpoint("POST", (f) => `/api/v1/api-keys/${f.revoked_key_id}/rotate`)(
      "rotate a revoked key",
      {},
      refused(409, "api_key_already_revoked", "key_id"),
    ),
    endpoint("POST", (f) => `/api/v1/api-keys/${f.other_key_id}/rotate`)(
      "rotate another tenant's key",
      {},
      refused(404, "api_key_not_found", "key_id"),
    ),
    endpoint("POST", "/api/v1/api-keys/key_unknown/revoke")(
      "revoke an unknown key",
      undefined,
      refused(404, "api_key_not_found", "key_id"),
    ),
    endpoint("POST", (f) => `/api/v1/api-keys/${f.other_key_id}/revoke`)(
      "revoke another tenant's key",
      undefined,
      refused(404, "api_key_not_found", "key_id"),
    ),
    ...limitCases(() => "/api/v1/api-keys"),
    ...cursorCases(() => "/api/v1/api-keys"),
  ]
})()

const unknownWallet = "wal_00000000000000000000000000000000"

const walletCases: ReadonlyArray<Case> = (() => {
  const create = endpoint("POST", "/api/v1/wallets")
  const valid = { external_id: "user-9", label: "User 9", chain: "ethereum" }
  const get = (name: string, path: Lazy<string>) =>
    endpoint("GET", path)(name, undefined, refused(404, "wallet_not_found", "wallet_id"))
  return [
    ...bodyShapeCases(create, valid),
    create(
      "unknown chain solana-devnet (networks are not chains)",
      { ...valid, chain: "solana-devnet" },
      refused(400, "unsupported_chain", "chain"),
    ),
    create(
      "unknown chain bitcoin",
      { ...valid, chain: "bitcoin" },
      refused(400, "unsupported_chain", "chain"),
    ),
    create("empty chain", { ...valid, chain: "" }, refused(400, "unsupported_chain", "chain")),
    create("chain of the wrong type", { ...valid, chain: 1 }, refused(400, "invalid_parameter", "chain")),
    create(
      "empty external_id",
      { ...valid, external_id: "" },
      refused(400, "invalid_parameter", "external_id"),
    ),
    create(
      "blank external_id",
      { ...valid, external_id: "   " },
      refused(400, "invalid_parameter", "external_id"),
    ),
    create(
      "external_id of 129 characters",
      { ...valid, external_id: "e".repeat(129) },
      refused(400, "invalid_parameter", "external_id"),
    ),
    create(
      "label of 129 characters",
      { ...valid, label: "l".repeat(129) },
      refused(400, "invalid_parameter", "label"),
    ),
    create("missing label", { ...valid, label: undefined }, refused(400, "invalid_parameter", "label")),
    create("label with a tab", { ...valid, label: "a\tb" }, refused(400, "invalid_parameter", "label")),
    create(
      "external id with a NUL",
      { ...valid, external_id: "a\u0000b" },
      refused(400, "invalid_parameter", "external_id"),
    ),
    ...idempotencyKeyCases(create, valid),
    create(
      "Idempotency-Key reused with another body",
      { ...valid, external_id: "another" },
      { ...refused(409, "idempotency_key_reused", "Idempotency-Key"), type: "idempotency_error" },
      { headers: { "idempotency-key": walletKey } },
    ),
    ...limitCases(() => "/api/v1/wallets"),
    ...cursorCases(() => "/api/v1/wallets"),
    endpoint("GET", "/api/v2/reconciliation?chain=solana")(
      "a filter to an endpoint that takes none (answered unfiltered before)",
      undefined,
      refused(400, "invalid_parameter", "chain"),
    ),
    endpoint("GET", "/api/v2/chains?limit=1")(
      "a query to the chains",
      undefined,
      refused(400, "invalid_parameter", "limit"),
    ),
    endpoint("POST", "/api/v2/reconciliation/runs?chain=solana")(
      "a query to a POST that takes none",
      undefined,
      refused(400, "invalid_parameter", "chain"),
    ),
    // The router reads no id over 100 characters nor broken percent-encoding: this was a 405
    // whose Allow named the very method used.
    endpoint("GET", `/api/v1/wallets/wal_${"a".repeat(97)}`)(
      "a wallet id over 100 characters",
      undefined,
      refused(404, "route_not_found"),
    ),
    endpoint("GET", "/api/v1/wallets/wal_%zz")(
      "a wallet id with broken percent-encoding",
      undefined,
      refused(404, "route_not_found"),
    ),
    endpoint("GET", "/api/v1/wallets?externalid=a")(
      "a misspelt wallet filter",
      undefined,
      refused(400, "invalid_parameter", "externalid"),
    ),
    // Spellings the router reads as another path (it ignores case and doubled slashes, decodes,
    // cuts at ';'): they skipped the checks above (the misspelt filter answered the unfiltered
    // list, the body of an action was ignored) or reached another endpoint (the wallet, not its
    // balance).
    ...[
      "//api/v1/wallets",
      "/api/v1//wallets",
      "/API/v1/wallets",
      "/api/v1/%77allets",
      "/api/v1/wallets;",
    ].map((path) =>
      endpoint("GET", `${path}?externalid=a`)(
        `a misspelt wallet filter on ${path}`,
        undefined,
        refused(404, "route_not_found"),
      ),
    ),
    endpoint("GET", (f) => `/api/v1/wallets/${f.wallets.eth};x/balance`)(
      "a balance path with ';' in its id",
      undefined,
      refused(404, "route_not_found"),
    ),
    endpoint("GET", (f) => `/api/v1/wallets/${f.wallets.eth}%2Fbalance`)(
      "a balance path with an encoded '/'",
      undefined,
      refused(404, "route_not_found"),
    ),
    endpoint("POST", (f) => `//api/v1/wallets/${f.wallets.eth2}/default`)(
      "a body sent to make default on a doubled slash",
      (f) => ({ wallet_id: f.wallets.eth }),
      refused(404, "route_not_found"),
    ),
    get("get an unknown wallet", `/api/v1/wallets/${unknownWallet}`),
    get("get another tenant's wallet", (f) => `/api/v1/wallets/${f.other_wallet}`),
    get("balance of an unknown wallet", `/api/v1/wallets/${unknownWallet}/balance`),
    get("balance of another tenant's wallet", (f) => `/api/v1/wallets/${f.other_wallet}/balance`),
    endpoint("POST", (f) => `/api/v1/wallets/${f.other_wallet}/default`)(
      "make another tenant's wallet the default",
      undefined,
      refused(404, "wallet_not_found", "wallet_id"),
    ),
    endpoint("POST", `/api/v1/wallets/${unknownWallet}/default`)(
      "make an unknown wallet the default",
      undefined,
      refused(404, "wallet_not_found", "wallet_id"),
    ),
    // Endpoints without a body take none, {} or null; anything else was ignored without a word.
    ...bodylessCases((f) => `/api/v1/wallets/${f.wallets.sol}/default`),
    ...bodylessCases((f) => `/api/v1/api-keys/${f.spare_key_id}/revoke`),
    ...bodylessCases(() => "/api/v2/reconciliation/runs"),
  ]
})()

const depositCases: ReadonlyArray<Case> = [
  ...limitCases(() => "/api/v2/deposits"),
  ...cursorCases(() => "/api/v2/deposits"),
  ...limitCases(() => "/api/v2/transfers"),
  ...cursorCases(() => "/api/v2/transfers"),
  endpoint("GET", `/api/v2/deposits?wallet_id=${unknownWallet}`)(
    "deposits of an unknown wallet",
    undefined,
    refused(404, "wallet_not_found", "wallet_id"),
  ),
  endpoint("GET", (f) => `/api/v2/deposits?wallet_id=${f.other_wallet}`)(
    "deposits of another tenant's wallet",
    undefined,
    refused(404, "wallet_not_found", "wallet_id"),
  ),
]

const faucetCases: ReadonlyArray<Case> = (() => {
  const faucet = endpoint("POST", "/api/v1/sandbox/faucet")
  const on = (wallet: keyof Fixture["wallets"], token: string, amount: Json) => (f: Fixture) => ({
    wallet_id: f.wallets[wallet],
    token,
    amount,
  })
  return [
    ...bodyShapeCases(faucet, on("eth", "USDC", "1")),
    ...badAmounts.map(([name, amount, outcome]) =>
      faucet(`amount: ${name}`, on("eth", "USDC", amount), outcome),
    ),
    faucet(
      "19 decimals for USDC on bsc",
      on("bsc", "USDC", `1.${"0".repeat(18)}1`),
      refused(400, "too_many_decimals", "amount"),
    ),
    faucet(
      "over 1,000,000 units",
      on("eth", "USDC", "1000000.000001"),
      refused(400, "amount_too_large", "amount"),
    ),
    faucet(
      "over 1,000,000 units on bsc",
      on("bsc", "USDT", "1000001"),
      refused(400, "amount_too_large", "amount"),
    ),
    faucet(
      "missing amount",
      (f) => ({ wallet_id: f.wallets.eth, token: "USDC" }),
      refused(400, "invalid_parameter", "amount"),
    ),
    faucet("unknown token DAI", on("eth", "DAI", "1"), refused(400, "unknown_token", "token")),
    // Token symbols are case-sensitive (domain/platform/tokens.ts); the message names USDC.
    faucet("lower-case token usdc", on("eth", "usdc", "1"), refused(400, "unknown_token", "token")),
    faucet(
      "unknown wallet",
      { wallet_id: unknownWallet, token: "USDC", amount: "1" },
      refused(404, "wallet_not_found", "wallet_id"),
    ),
    faucet(
      "another tenant's wallet",
      (f) => ({ wallet_id: f.other_wallet, token: "USDC", amount: "1" }),
      refused(404, "wallet_not_found", "wallet_id"),
    ),
    // USDT has never reached the solana wallet: its faucet account is not open yet either.
    ...idempotencyKeyCases(faucet, on("sol", "USDT", "5")),
  ]
})()

const simulateCases: ReadonlyArray<Case> = (() => {
  const simulate = endpoint("POST", "/api/v1/sandbox/webhooks/simulate")
  return [
    ...bodyShapeCases(simulate, { event_type: "payment.completed" }),
    simulate(
      "unknown event type",
      { event_type: "payment.done" },
      refused(400, "invalid_event_type", "event_type"),
    ),
    simulate("missing event type", {}, refused(400, "invalid_parameter", "event_type")),
    simulate(
      "unknown webhook",
      { event_type: "payment.completed", webhook_id: "whk_00000000000000000000000000000000" },
      refused(404, "webhook_not_found", "webhook_id"),
    ),
  ]
})()

const identityCases: ReadonlyArray<Case> = (() => {
  const link = endpoint("POST", "/api/v1/identities")
  const to = (kind: Json, value: Json) => (f: Fixture) => ({ wallet_id: f.wallets.sol, kind, value })
  const unknownIdentity = "idn_00000000000000000000000000000000"
  return [
    ...bodyShapeCases(link, to("phone", "+442079460018")),
    link("unknown kind", to("fax", "+442079460018"), refused(400, "invalid_kind", "kind")),
    link("kind of the wrong type", to(1, "+442079460018"), refused(400, "invalid_parameter", "kind")),
    link("phone without country code", to("phone", "4155550199"), refused(400, "invalid_phone", "value")),
    link("phone with letters", to("phone", "+1 415 CALL NOW"), refused(400, "invalid_phone", "value")),
    link("phone too short", to("phone", "+1234"), refused(400, "invalid_phone", "value")),
    link("e-mail without domain", to("email", "ana@"), refused(400, "invalid_email", "value")),
    link("e-mail without @", to("email", "ana.example.com"), refused(400, "invalid_email", "value")),
    link(
      "handle on an unknown network",
      to("handle", "@myspace:bob"),
      refused(400, "invalid_handle", "value"),
    ),
    link("handle with bad characters", to("handle", "@x:bob!"), refused(400, "invalid_handle", "value")),
    link("handle without @", to("handle", "x:bob"), refused(400, "invalid_handle", "value")),
    link("value of the wrong type", to("phone", 4155550100), refused(400, "invalid_parameter", "value")),
    link(
      "unknown wallet",
      { wallet_id: unknownWallet, kind: "phone", value: "+442079460018" },
      refused(404, "wallet_not_found", "wallet_id"),
    ),
    link(
      "another tenant's wallet",
      (f) => ({ wallet_id: f.other_wallet, kind: "phone", value: "+442079460018" }),
      refused(404, "wallet_not_found", "wallet_id"),
    ),
    link("phone already linked", to("phone", ownPhone), refused(409, "identity_already_linked", "value")),
    link(
      "phone already linked, written differently",
      to("phone", "+1 (415) 555-0100"),
      refused(409, "identity_already_linked", "value"),
    ),
    link(
      "e-mail already linked, in upper case",
      to("email", "ANA@Example.COM"),
      refused(409, "identity_already_linked", "value"),
    ),
    link(
      "handle already linked, by its alias",
      to("handle", "@Telegram:BSC_Owner"),
      refused(409, "identity_already_linked", "value"),
    ),
    ...idempotencyKeyCases(link, to("phone", "+442079460018")),
    ...limitCases(() => "/api/v1/identities"),
    ...cursorCases(() => "/api/v1/identities"),
    endpoint("GET", `/api/v1/identities?wallet_id=${unknownWallet}`)(
      "list by an unknown wallet",
      undefined,
      refused(404, "wallet_not_found", "wallet_id"),
    ),
    endpoint("GET", `/api/v1/identities/${unknownIdentity}`)(
      "get an unknown identity",
      undefined,
      refused(404, "identity_not_found", "identity_id"),
    ),
    endpoint("DELETE", `/api/v1/identities/${unknownIdentity}`)(
      "unlink an unknown identity",
      undefined,
      refused(404, "identity_not_found", "identity_id"),
    ),
  ]
})()

const payCases: ReadonlyArray<Case> = (() => {
  const pay = endpoint("POST", "/api/social-payments/pay")
  const valid = { recipient: anaEmail, amount: "1", token: "USDC" }
  const withRecipient = (recipient: Json) => ({ ...valid, recipient })
  const metadata = (entries: number, value = "v") =>
    Object.fromEntries(Array.from({ length: entries }, (_, i) => [`key_${i}`, value]))
  return [
    ...bodyShapeCases(pay, valid),
    ...badAmounts.map(([name, amount, outcome]) => pay(`amount: ${name}`, { ...valid, amount }, outcome)),
    pay(
      "over 1,000,000,000 units",
      { ...valid, amount: "1000000001" },
      refused(400, "amount_too_large", "amount"),
    ),
    pay(
      "19 decimals for USDC on bsc",
      (f) => ({ ...valid, from_wallet: f.wallets.bsc, amount: `1.${"0".repeat(18)}1` }),
      refused(400, "too_many_decimals", "amount"),
    ),
    // 7 decimals are fine for USDC on bsc (18): the amount passes and the payment stops at the
    // recipient, who is linked to the paying wallet.
    pay(
      "7 decimals on bsc reach the same-wallet rule",
      (f) => ({ recipient: bscHandle, amount: "1.0000001", token: "USDC", from_wallet: f.wallets.bsc }),
      refused(422, "same_wallet", "recipient"),
    ),
    pay(
      "missing amount",
      { recipient: anaEmail, token: "USDC" },
      refused(400, "invalid_parameter", "amount"),
    ),
    pay("missing recipient", { amount: "1", token: "USDC" }, refused(400, "invalid_parameter", "recipient")),
    pay("an unknown chain", { ...valid, chain: "dogecoin" }, refused(400, "unsupported_chain", "chain")),
    pay("chain a number", { ...valid, chain: 1 }, refused(400, "invalid_parameter", "chain")),
    pay("chain empty", { ...valid, chain: "" }, refused(400, "unsupported_chain", "chain")),
    pay(
      "a token the chain does not carry (USDC on tron)",
      { ...valid, chain: "tron" },
      refused(400, "unknown_token", "token"),
    ),
    pay("unknown token DAI", { ...valid, token: "DAI" }, refused(400, "unknown_token", "token")),
    pay("lower-case token usdc", { ...valid, token: "usdc" }, refused(400, "unknown_token", "token")),
    pay(
      "phone without country code",
      withRecipient("4155550100"),
      refused(400, "invalid_recipient", "recipient"),
    ),
    pay(
      "phone with letters",
      withRecipient("+1 415 CALL NOW"),
      refused(400, "invalid_recipient", "recipient"),
    ),
    pay("e-mail without a domain", withRecipient("ana@"), refused(400, "invalid_recipient", "recipient")),
    pay(
      "e-mail without a top-level domain",
      withRecipient("ana@example"),
      refused(400, "invalid_recipient", "recipient"),
    ),
    pay(
      "handle on an unknown network",
      withRecipient("@myspace:bob"),
      refused(400, "invalid_recipient", "recipient"),
    ),
    pay(
      "handle with bad characters",
      withRecipient("@x:bob!"),
      refused(400, "invalid_recipient", "recipient"),
    ),
    pay("empty recipient", withRecipient(""), refused(400, "invalid_recipient", "recipient")),
    pay(
      "recipient of 255 characters",
      withRecipient(`${"a".repeat(243)}@example.com`),
      refused(400, "invalid_recipient", "recipient"),
    ),
    pay(
      "recipient of the wrong type",
      withRecipient(14155550100),
      refused(400, "invalid_parameter", "recipient"),
    ),
    pay(
      "unknown from_wallet",
      { ...valid, from_wallet: unknownWallet },
      refused(404, "wallet_not_found", "from_wallet"),
    ),
    pay(
      "another tenant's wallet as from_wallet",
      (f) => ({ ...valid, from_wallet: f.other_wallet }),
      refused(404, "wallet_not_found", "from_wallet"),
    ),
    pay(
      "metadata with 51 keys",
      { ...valid, metadata: metadata(51) },
      refused(400, "invalid_metadata", "metadata"),
    ),
    // Refused before any schema reads it: a body of 90,000 keys cost a second of the event loop.
    pay(
      "metadata with 257 keys",
      { ...valid, metadata: metadata(257) },
      refused(400, "too_many_members", "metadata"),
    ),
    pay(
      "50,000 metadata keys (under 1 MiB)",
      { ...valid, metadata: metadata(50_000) },
      refused(400, "too_many_members", "metadata"),
    ),
    pay(
      "metadata value of 501 characters",
      { ...valid, metadata: { order_id: "o".repeat(501) } },
      refused(400, "invalid_metadata", "metadata.order_id"),
    ),
    pay(
      "metadata key of 41 characters",
      { ...valid, metadata: { ["k".repeat(41)]: "v" } },
      refused(400, "invalid_metadata", `metadata.${"k".repeat(41)}`),
    ),
    pay(
      "metadata with a NUL in a key",
      { ...valid, metadata: { "a\u0000b": "v" } },
      refused(400, "invalid_metadata", "metadata.a\\u0000b"),
    ),
    pay(
      "metadata with an empty key",
      { ...valid, metadata: { "": "v" } },
      refused(400, "invalid_metadata", "metadata."),
    ),
    pay(
      "metadata with a number value",
      { ...valid, metadata: { order_id: 42 } },
      refused(400, "invalid_parameter", "metadata.order_id"),
    ),
    pay(
      "metadata with a null value",
      { ...valid, metadata: { order_id: null } },
      refused(400, "invalid_parameter", "metadata.order_id"),
    ),
    pay(
      "metadata as an array",
      { ...valid, metadata: ["order"] },
      refused(400, "invalid_parameter", "metadata"),
    ),
    pay("note of 501 characters", { ...valid, note: "n".repeat(501) }, refused(400, "invalid_note", "note")),
    pay("note of 501 emoji", { ...valid, note: "😀".repeat(501) }, refused(400, "invalid_note", "note")),
    pay("note of the wrong type", { ...valid, note: 5 }, refused(400, "invalid_parameter", "note")),
    pay("paying yourself", withRecipient(ownPhone), refused(422, "same_wallet", "recipient")),
    // What JSON.parse forgives: a field named twice, a number its double changes, lone surrogates.
    pay(
      "amount named twice",
      raw(`{"recipient":"${anaEmail}","amount":"1000000","amount":"0.02","token":"USDC"}`),
      refused(400, "duplicate_key", "amount"),
    ),
    pay(
      "metadata key named twice",
      raw(`{"recipient":"${anaEmail}","amount":"1","token":"USDC","metadata":{"k":"a","k":"b"}}`),
      refused(400, "duplicate_key", "metadata.k"),
    ),
    pay(
      "a JSON number its double rounds up (0.99999999999999999 would be 1)",
      raw(`{"recipient":"${anaEmail}","amount":0.99999999999999999,"token":"USDC"}`),
      refused(400, "amount_imprecise", "amount"),
    ),
    pay(
      "a JSON number its double rounds down (1.0000000000000001 would be 1)",
      raw(`{"recipient":"${anaEmail}","amount":1.0000000000000001,"token":"USDC"}`),
      refused(400, "amount_imprecise", "amount"),
    ),
    pay(
      "19 significant digits on bsc as a JSON number",
      (f) =>
        raw(
          `{"recipient":"${anaEmail}","amount":100.000000000000000009,"token":"USDC","from_wallet":"${f.wallets.bsc}"}`,
        ),
      refused(400, "amount_imprecise", "amount"),
    ),
    pay(
      "a note with an unpaired surrogate",
      raw(`{"recipient":"${anaEmail}","amount":"1","token":"USDC","note":"\\ud800"}`),
      refused(400, "invalid_string", "note"),
    ),
    pay(
      "a metadata value with an unpaired surrogate",
      raw(`{"recipient":"${anaEmail}","amount":"1","token":"USDC","metadata":{"k":"x\\udfff"}}`),
      refused(400, "invalid_string", "metadata.k"),
    ),
    pay(
      "a text/plain body",
      raw(JSON.stringify({ recipient: anaEmail, amount: "1", token: "USDC" })),
      refused(415, "unsupported_media_type"),
      {
        headers: { "content-type": "text/plain" },
      },
    ),
    pay(
      "paying yourself, phone written differently",
      withRecipient("0014155550100"),
      refused(422, "same_wallet", "recipient"),
    ),
    // The bsc wallet has never paid anyone: its escrow account for USDC@bsc is not open yet.
    ...idempotencyKeyCases(pay, (f) => ({
      ...valid,
      recipient: "+442079460018",
      from_wallet: f.wallets.bsc,
    })),
    pay(
      "Idempotency-Key reused with another body",
      { ...valid, recipient: "+442079460018" },
      { ...refused(409, "idempotency_key_reused", "Idempotency-Key"), type: "idempotency_error" },
      { headers: { "idempotency-key": payKey } },
    ),
  ]
})()

const transactionCases: ReadonlyArray<Case> = (() => {
  const list = (query: string) => endpoint("GET", `/api/v1/transactions?${query}`)
  return [
    ...limitCases(() => "/api/v1/transactions"),
    ...cursorCases(() => "/api/v1/transactions"),
    // A misspelt filter answered the unfiltered list, as if filtered.
    list("wallet=wal_x")(
      "a misspelt filter (wallet for wallet_id)",
      undefined,
      refused(400, "invalid_parameter", "wallet"),
    ),
    // The router serves the list with a trailing slash too: the checks did not see that spelling.
    endpoint("GET", "/api/v1/transactions/?wallet=wal_x")(
      "a misspelt filter after a trailing slash",
      undefined,
      refused(400, "invalid_parameter", "wallet"),
    ),
    endpoint("GET", "/api/v1/transactions/?wallet_id=")(
      "an empty filter after a trailing slash",
      undefined,
      refused(400, "invalid_parameter", "wallet_id"),
    ),
    list("limit=5&created_after=2026-01-01")(
      "a filter the list does not take",
      undefined,
      refused(400, "invalid_parameter", "created_after"),
    ),
    list("status=pending&status=failed")(
      "a filter given twice",
      undefined,
      refused(400, "invalid_parameter", "status"),
    ),
    list("limit=5&limit=6")("limit given twice", undefined, refused(400, "invalid_parameter", "limit")),
    // It was a 404 "No wallet \"\"", which blamed a wallet.
    list("wallet_id=")("an empty wallet filter", undefined, refused(400, "invalid_parameter", "wallet_id")),
    list("status=&limit=5")("an empty status filter", undefined, refused(400, "invalid_parameter", "status")),
    list("status=done")("unknown status filter", undefined, refused(400, "invalid_status", "status")),
    list("status=COMPLETED")(
      "status filter in upper case",
      undefined,
      refused(400, "invalid_status", "status"),
    ),
    list("created_gte=yesterday")(
      "created_gte not a time",
      undefined,
      refused(400, "invalid_time", "created_gte"),
    ),
    list("created_gte=2026-13-45")(
      "created_gte an impossible date",
      undefined,
      refused(400, "invalid_time", "created_gte"),
    ),
    list("created_gte=0000-01-01T00:00:00Z")(
      "created_gte in year 0",
      undefined,
      refused(400, "invalid_time", "created_gte"),
    ),
    list("created_lt=-271821-04-20T00:00:00Z")(
      "created_lt before PostgreSQL's range",
      undefined,
      refused(400, "invalid_time", "created_lt"),
    ),
    list("created_lt=nope")("created_lt not a time", undefined, refused(400, "invalid_time", "created_lt")),
    list("created_gte=2026-11-31T00:00:00Z")(
      "created_gte on 31 November (rolled over to 1 December before)",
      undefined,
      refused(400, "invalid_time", "created_gte"),
    ),
    list("created_gte=2026-02-30")(
      "created_gte on 30 February",
      undefined,
      refused(400, "invalid_time", "created_gte"),
    ),
    list("created_lt=2026-11-24T06:07:03.999")(
      "created_lt without an offset (read in the server's time zone before)",
      undefined,
      refused(400, "invalid_time", "created_lt"),
    ),
    list(`wallet_id=${unknownWallet}`)(
      "filter by an unknown wallet",
      undefined,
      refused(404, "wallet_not_found", "wallet_id"),
    ),
    endpoint("GET", "/api/v1/transactions/txn_00000000000000000000000000000000")(
      "get an unknown transaction",
      undefined,
      refused(404, "transaction_not_found", "transaction_id"),
    ),
  ]
})()

const webhookCases: ReadonlyArray<Case> = (() => {
  const create = endpoint("POST", "/api/v1/webhooks")
  const update = endpoint("PATCH", (f) => `/api/v1/webhooks/${f.webhook_id}`)
  const unknownWebhook = "whk_00000000000000000000000000000000"
  const v = validWebhook
  const urls: ReadonlyArray<readonly [string, string]> = [
    ["ftp URL", "ftp://example.com/hooks"],
    ["not a URL", "not a url"],
    ["URL with credentials", "https://user:secret@example.com/hooks"],
    ["empty URL", ""],
    ["URL of 2,049 characters", `https://example.com/${"p".repeat(2_029)}`],
  ]
  const notFound = (method: Method, suffix: string, body?: Json) =>
    endpoint(method, `/api/v1/webhooks/${unknownWebhook}${suffix}`)(
      `${method} an unknown webhook${suffix}`,
      body,
      refused(404, "webhook_not_found", "webhook_id"),
    )
  return [
    ...bodyShapeCases(create, v),
    ...urls.map(([name, url]) => create(name, { ...v, url }, refused(400, "invalid_url", "url"))),
    create(
      "unknown event type",
      { ...v, events: ["payment.done"] },
      refused(400, "invalid_events", "events"),
    ),
    create("empty events", { ...v, events: [] }, refused(400, "invalid_events", "events")),
    create(
      "events as a string",
      { ...v, events: "payment.completed" },
      refused(400, "invalid_parameter", "events"),
    ),
    create(
      "secret of 15 characters",
      { ...v, secret: "s".repeat(15) },
      refused(400, "invalid_secret", "secret"),
    ),
    create(
      "secret with spaces",
      { ...v, secret: "with spaces 0123456789" },
      refused(400, "invalid_secret", "secret"),
    ),
    create(
      "secret of 257 characters",
      { ...v, secret: "s".repeat(257) },
      refused(400, "invalid_secret", "secret"),
    ),
    create("missing secret", { ...v, secret: undefined }, refused(400, "invalid_parameter", "secret")),
    create(
      "description of 501 characters",
      { ...v, description: "d".repeat(501) },
      refused(400, "invalid_description", "description"),
    ),
    ...idempotencyKeyCases(create, v),
    ...bodyShapeCases(update, { enabled: false }),
    ...urls.map(([name, url]) => update(name, { url }, refused(400, "invalid_url", "url"))),
    update("unknown event type", { events: ["payment.done"] }, refused(400, "invalid_events", "events")),
    update("empty events", { events: [] }, refused(400, "invalid_events", "events")),
    update("short secret", { secret: "short" }, refused(400, "invalid_secret", "secret")),
    update("enabled as a string", { enabled: "yes" }, refused(400, "invalid_parameter", "enabled")),
    update(
      "description of 501 characters",
      { description: "d".repeat(501) },
      refused(400, "invalid_description", "description"),
    ),
    ...limitCases(() => "/api/v1/webhooks"),
    ...cursorCases(() => "/api/v1/webhooks"),
    ...limitCases((f) => `/api/v1/webhooks/${f.webhook_id}/deliveries`),
    ...cursorCases((f) => `/api/v1/webhooks/${f.webhook_id}/deliveries`),
    notFound("GET", ""),
    notFound("PATCH", "", { enabled: false }),
    notFound("DELETE", ""),
    notFound("GET", "/deliveries"),
    endpoint("PATCH", (f) => `/api/v1/webhooks/${f.webhook_id}`)(
      "PATCH the webhook of another tenant",
      { description: "x" },
      refused(404, "webhook_not_found", "webhook_id"),
      { auth: (f) => bearer(f.other) },
    ),
    endpoint(
      "POST",
      (f) => `/api/v1/webhooks/${f.webhook_id}/deliveries/dlv_00000000000000000000000000000000/redeliver`,
    )("redeliver an unknown delivery", undefined, refused(404, "delivery_not_found", "delivery_id")),
  ]
})()

// PostgreSQL cannot store U+0000 in text or jsonb, so a NUL anywhere in the input must be refused
// before it reaches the database; today each of these is answered 500 (nothing is written: the
// failing statement rolls back).
const nulCases: ReadonlyArray<Case> = [
  endpoint("GET", "/api/v1/wallets/a%00b")(
    "a wallet id (path) holding NUL",
    undefined,
    refused(400, "invalid_parameter", "wallet_id"),
  ),
  endpoint("GET", "/api/v1/wallets?starting_after=a%00b")(
    "a list cursor (query) holding NUL",
    undefined,
    refused(400, "invalid_parameter", "starting_after"),
  ),
  endpoint("POST", "/api/v1/wallets")(
    "a wallet external_id (text column) holding NUL",
    { external_id: "user\u00009", label: "User 9", chain: "ethereum" },
    refused(400, "invalid_parameter", "external_id"),
  ),
  endpoint("POST", "/api/social-payments/pay")(
    "a payment note holding NUL",
    { recipient: anaEmail, amount: "1", token: "USDC", note: "lunch\u0000" },
    refused(400, "invalid_parameter", "note"),
  ),
  endpoint("POST", "/api/social-payments/pay")(
    "a payment metadata value (jsonb) holding NUL",
    { recipient: anaEmail, amount: "1", token: "USDC", metadata: { order_id: "o\u00001" } },
    refused(400, "invalid_parameter", "metadata.order_id"),
  ),
  endpoint("POST", "/api/v1/webhooks")(
    "a webhook description holding NUL",
    { ...validWebhook, description: "a\u0000b" },
    refused(400, "invalid_parameter", "description"),
  ),
]

const authCases: ReadonlyArray<Case> = (() => {
  const listWallets = endpoint("GET", "/api/v1/wallets")
  const pay = endpoint("POST", "/api/social-payments/pay")
  const payBody = { recipient: anaEmail, amount: "1", token: "USDC" }
  const tenantOnly = (f: Fixture) => ({ "x-tenant-id": f.tenant.tenant_id })
  const unknownKey = `sk_sandbox_${randomBytes(32).toString("base64url")}`
  return [
    listWallets("missing Authorization", undefined, refused(401, "missing_api_key"), { auth: tenantOnly }),
    listWallets("Authorization without a key", undefined, refused(401, "missing_api_key"), {
      auth: (f) => ({ ...tenantOnly(f), authorization: "Bearer " }),
    }),
    listWallets("Authorization with another scheme", undefined, refused(401, "missing_api_key"), {
      auth: (f) => ({ ...tenantOnly(f), authorization: `Basic ${Buffer.from("a:b").toString("base64")}` }),
    }),
    listWallets("missing X-Tenant-Id", undefined, refused(401, "missing_tenant_id"), {
      auth: (f) => ({ authorization: `Bearer ${f.tenant.api_key}` }),
    }),
    listWallets("wrong key", undefined, refused(401, "invalid_api_key"), {
      auth: (f) => ({ ...tenantOnly(f), authorization: `Bearer ${unknownKey}` }),
    }),
    listWallets("another tenant's key with this tenant's id", undefined, refused(401, "invalid_api_key"), {
      auth: (f) => ({ ...tenantOnly(f), authorization: `Bearer ${f.other.api_key}` }),
    }),
    listWallets("this tenant's key with another tenant's id", undefined, refused(401, "invalid_api_key"), {
      auth: (f) => ({ authorization: `Bearer ${f.tenant.api_key}`, "x-tenant-id": f.other.tenant_id }),
    }),
    listWallets("a revoked key", undefined, refused(401, "api_key_revoked"), {
      auth: (f) => ({ ...tenantOnly(f), authorization: `Bearer ${f.revoked_key}` }),
    }),
    pay("missing Authorization", payBody, refused(401, "missing_api_key"), { auth: tenantOnly }),
    pay("wrong key", payBody, refused(401, "invalid_api_key"), {
      auth: (f) => ({ ...tenantOnly(f), authorization: `Bearer ${unknownKey}` }),
    }),
    pay("another tenant's key with this tenant's id", payBody, refused(401, "invalid_api_key"), {
      auth: (f) => ({ ...tenantOnly(f), authorization: `Bearer ${f.other.api_key}` }),
    }),
    pay(
      "malformed JSON without a key: authentication comes first",
      raw('{"a": '),
      refused(401, "missing_api_key"),
      {
        auth: tenantOnly,
      },
    ),
    pay("a key without payments:write", payBody, refused(403, "insufficient_scope"), {
      auth: (f) => ({ ...tenantOnly(f), authorization: `Bearer ${f.read_only_key}` }),
    }),
    endpoint("POST", "/api/v1/wallets")(
      "a key without wallets:write",
      { external_id: "x", label: "x", chain: "ethereum" },
      refused(403, "insufficient_scope"),
      { auth: (f) => ({ ...tenantOnly(f), authorization: `Bearer ${f.read_only_key}` }) },
    ),
  ]
})()

// --- The tests ----------------------------------------------------------------------------------

beforeAll(async () => {
  platform = await startPlatform()
  fixture = await setUp(platform.url)
  await waitUntilQuiet()
}, 120_000)

afterAll(async () => {
  await platform?.stop()
})

describe.each([
  ["POST /api/tenant/register", registerCases],
  ["tenant verification", tenantCases],
  ["API keys", keyCases],
  ["wallets", walletCases],
  ["sandbox faucet", faucetCases],
  ["sandbox webhook simulation", simulateCases],
  ["identities", identityCases],
  ["POST /api/social-payments/pay", payCases],
  ["transactions", transactionCases],
  ["deposits", depositCases],
  ["webhooks", webhookCases],
  ["authentication", authCases],
  ["NUL characters", nulCases],
] as const)("%s refuses bad input and writes nothing", (_, cases) => {
  it.each(cases)("$method $name -> $status $code", check)
})

describe("a payment refused for insufficient funds", () => {
  it("is 422 and records exactly one failed payment; no outbox row, since no endpoint subscribes to payment.failed; the ledger is untouched", async () => {
    await waitUntilQuiet()
    const before = await snapshot()
    const c = endpoint("POST", "/api/social-payments/pay")(
      "insufficient funds",
      { recipient: anaEmail, amount: "500", token: "USDC", note: "too much" },
      refused(422, "insufficient_funds", "amount"),
    )
    const answer = await send(c, fixture)
    expectRefusal(answer, c)
    await waitUntilQuiet()
    const after = await snapshot()

    expect(after.events, "no ledger event").toEqual(before.events)
    expect(after.balances, "no balance moved").toEqual(before.balances)
    for (const table of snapshotTables) {
      if (table === "platform.payments" || table === "platform.webhook_events") continue
      expect(after.tables[table], table).toEqual(before.tables[table])
    }
    expect(after.tables["platform.payments"].rows).toBe(before.tables["platform.payments"].rows + 1)
    // The tenant's only endpoint subscribes to payment.pending: events nobody subscribes to are not
    // written (test/e2e/api.test.ts shows payment.failed arriving at a subscribed endpoint).
    expect(after.tables["platform.webhook_events"]).toEqual(before.tables["platform.webhook_events"])

    const { pool } = platform.database
    const failed = await pool.query(
      `select transaction_id, status, from_wallet_id, to_wallet_id, amount::text, fee::text, token, chain,
              failure_code, failed_at is not null as has_failed_at, completed_at, expires_at
         from platform.payments where status = 'failed'`,
    )
    expect(failed.rows).toEqual([
      {
        transaction_id: expect.stringMatching(/^txn_[0-9a-f]{32}$/),
        status: "failed",
        from_wallet_id: fixture.wallets.eth,
        to_wallet_id: fixture.wallets.eth2,
        amount: "500000000",
        fee: "1500000",
        token: "USDC",
        chain: "ethereum",
        failure_code: "insufficient_funds",
        has_failed_at: true,
        completed_at: null,
        expires_at: null,
      },
    ])
    const outbox = await pool.query(
      "select count(*)::int as n from platform.webhook_events where event_type = 'payment.failed'",
    )
    expect(outbox.rows).toEqual([{ n: 0 }])
  })
})
