// Proves that the OpenAPI document says what the platform enforces: every length, enum, pattern,
// item and range limit the served `/openapi.json` gives a request field or query parameter is
// probed just past its bound (a 400 naming that field) and, for free text, at its bound (not refused
// for that field). Cases are derived from the document itself, so a limit documented but not
// enforced, or enforced with another number, fails here. Also checks each operation's error
// statuses and headers.
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import {
  type ApiClient,
  type ApiResponse,
  type RunningPlatform,
  registerTenant,
  startPlatform,
} from "../support/platform-process.ts"

type Json = Record<string, unknown>

interface Operation {
  readonly operationId: string
  readonly parameters?: ReadonlyArray<Json>
  readonly requestBody?: { content: { "application/json": { schema: Json } } }
  readonly responses: Record<string, Json>
}

interface Document {
  readonly paths: Record<string, Record<string, Operation>>
  readonly components: { readonly headers: Record<string, Json> }
}

let platform: RunningPlatform
let client: ApiClient
let document: Document
let wallet_id: string
let webhook_id: string
let spare_key_id: string
let counter = 0
const unique = () => {
  counter += 1
  return `${Date.now().toString(36)}${counter}`
}
const linkedEmail = "doc-payee@example.com"

beforeAll(async () => {
  platform = await startPlatform()
  client = (await registerTenant(platform.url, "enterprise")).client
  const created = await client.post<{ wallet_id: string }>("/api/v1/wallets", {
    external_id: "payer",
    label: "payer",
    chain: "ethereum",
  })
  wallet_id = created.body.wallet_id
  const payee = await client.post<{ wallet_id: string }>("/api/v1/wallets", {
    external_id: "payee",
    label: "payee",
    chain: "ethereum",
  })
  expect(
    (
      await client.post("/api/v1/identities", {
        wallet_id: payee.body.wallet_id,
        kind: "email",
        value: linkedEmail,
      })
    ).status,
  ).toBe(201)
  expect(
    (await client.post("/api/v1/sandbox/faucet", { wallet_id, token: "USDC", amount: "1000" })).status,
  ).toBe(200)
  const webhook = await client.post<{ webhook_id: string }>("/api/v1/webhooks", {
    url: "http://127.0.0.1:9/hooks",
    events: ["payment.pending"],
    secret: "whsec_0123456789abcdef",
  })
  webhook_id = webhook.body.webhook_id
  const key = await client.post<{ key_id: string }>("/api/v1/api-keys", { name: "spare" })
  spare_key_id = key.body.key_id
  document = (await (await fetch(`${platform.url}/openapi.json`)).json()) as Document
}, 120_000)

afterAll(async () => {
  await platform?.stop()
})

/** A valid request for each operation with a documented body, and whether it may be sent whole. */
interface BodyCase {
  readonly path: string
  readonly method: "post" | "patch"
  readonly route: () => string
  readonly base: () => Json
  /** Sending a valid variant writes nothing we mind (it is not a chain transfer, not a rotation). */
  readonly acceptable: boolean
}

const bodyCases: ReadonlyArray<BodyCase> = [
  {
    path: "/api/tenant/register",
    method: "post",
    route: () => "/api/tenant/register",
    base: () => ({
      email: `doc-${unique()}@example.com`,
      password: "correct horse battery",
      company_name: "Doc Co",
      plan: "basic",
    }),
    acceptable: true,
  },
  {
    path: "/api/v1/tenant/verification",
    method: "post",
    route: () => "/api/v1/tenant/verification",
    base: () => ({
      legal_name: "Doc GmbH",
      registration_number: "HRB 1",
      country: "DE",
      representative: { name: "Ana Doc", country: "DE" },
      documents: ["doc-1"],
    }),
    acceptable: true,
  },
  {
    path: "/api/v1/api-keys",
    method: "post",
    route: () => "/api/v1/api-keys",
    base: () => ({ name: "doc key", scopes: ["wallets:read"] }),
    acceptable: true,
  },
  {
    path: "/api/v1/api-keys/{key_id}/rotate",
    method: "post",
    route: () => `/api/v1/api-keys/${spare_key_id}/rotate`,
    base: () => ({ grace_period_seconds: 60 }),
    acceptable: false,
  },
  {
    path: "/api/v1/wallets",
    method: "post",
    route: () => "/api/v1/wallets",
    base: () => ({ external_id: `w-${unique()}`, label: "doc", chain: "ethereum" }),
    acceptable: true,
  },
  {
    path: "/api/v1/sandbox/faucet",
    method: "post",
    route: () => "/api/v1/sandbox/faucet",
    base: () => ({ wallet_id, token: "USDC", amount: "1" }),
    acceptable: true,
  },
  {
    path: "/api/v1/sandbox/webhooks/simulate",
    method: "post",
    route: () => "/api/v1/sandbox/webhooks/simulate",
    base: () => ({ event_type: "payment.pending" }),
    acceptable: true,
  },
  {
    path: "/api/v1/identities",
    method: "post",
    route: () => "/api/v1/identities",
    base: () => ({ wallet_id, kind: "email", value: `doc-${unique()}@example.com` }),
    acceptable: true,
  },
  {
    path: "/api/social-payments/pay",
    method: "post",
    route: () => "/api/social-payments/pay",
    base: () => ({ recipient: linkedEmail, amount: "0.01", token: "USDC", note: "n", metadata: { k: "v" } }),
    acceptable: true,
  },
  {
    path: "/api/v2/transfers",
    method: "post",
    route: () => "/api/v2/transfers",
    base: () => ({
      from_wallet: wallet_id,
      to_address: "0x000000000000000000000000000000000000dEaD",
      amount: "1",
      token: "USDC",
      chain: "ethereum",
    }),
    acceptable: false,
  },
  {
    path: "/api/v1/webhooks",
    method: "post",
    route: () => "/api/v1/webhooks",
    base: () => ({
      url: "http://127.0.0.1:9/hooks",
      events: ["payment.pending"],
      secret: "whsec_0123456789abcdef",
      description: "d",
    }),
    acceptable: true,
  },
  {
    path: "/api/v1/webhooks/{webhook_id}",
    method: "patch",
    route: () => `/api/v1/webhooks/${webhook_id}`,
    base: () => ({ description: "d" }),
    acceptable: true,
  },
]

/** Fields whose content is free text: a value at the bound must be taken. */
const freeText = new Set([
  "company_name",
  "legal_name",
  "registration_number",
  "representative.name",
  "documents",
  "name",
  "external_id",
  "label",
  "note",
  "metadata",
  "secret",
  "description",
])

/** The non-null member of an optional field's `anyOf` (an amount's string one), else the schema. */
const member = (schema: Json): Json => {
  const members = ((schema.anyOf ?? []) as ReadonlyArray<Json>).filter((m) => m.type !== "null")
  return members.find((m) => m.type !== "number") ?? members[0] ?? schema
}

const bodySchema = (operation: Operation): Json =>
  member(operation.requestBody?.content["application/json"].schema ?? {})

/** The number member of a field that also takes a string (an amount), if it has one. */
const numberMember = (schema: Json): Json | undefined =>
  ((schema.anyOf ?? []) as ReadonlyArray<Json>).find((m) => m.type === "number")

/**
 * Every documented field of an object schema, nested ones as `a.b`, with its (non-null) schema and
 * its number member when it takes a number besides a string.
 */
const fieldsOf = (schema: Json, prefix = ""): Array<[string, Json, Json | undefined]> =>
  Object.entries((schema.properties ?? {}) as Record<string, Json>).flatMap(([name, property]) => {
    const own = member(property)
    return own.type === "object" && own.properties !== undefined
      ? fieldsOf(own, `${prefix}${name}.`)
      : [[`${prefix}${name}`, own, numberMember(property)] as [string, Json, Json | undefined]]
  })

const withField = (body: Json, field: string, value: unknown): Json => {
  const [head, ...rest] = field.split(".") as [string, ...Array<string>]
  return rest.length === 0
    ? { ...body, [head]: value }
    : { ...body, [head]: withField((body[head] ?? {}) as Json, rest.join("."), value) }
}

const text = (length: number) => "a".repeat(length)

interface Probe {
  readonly field: string
  readonly what: string
  readonly value: unknown
  readonly refused: boolean
}

/** The values just past and, for free text, at each documented bound of `field`. */
const probesOf = (field: string, schema: Json, numeric?: Json): Array<Probe> => {
  const probes: Array<Probe> = []
  const add = (what: string, value: unknown, refused: boolean) => probes.push({ field, what, value, refused })
  const free = freeText.has(field)
  if (typeof schema.maxLength === "number") {
    add(`${schema.maxLength + 1} characters`, text(schema.maxLength + 1), true)
    if (free) add(`${schema.maxLength} characters`, text(schema.maxLength), false)
  }
  if (typeof schema.minLength === "number" && schema.minLength > 0) {
    add(`${schema.minLength - 1} characters`, text(schema.minLength - 1), true)
    if (free) add(`${schema.minLength} characters`, text(schema.minLength), false)
  }
  if (Array.isArray(schema.enum)) {
    add("a value outside the enum", "not-a-member", true)
    for (const value of schema.enum) add(`enum value ${value}`, value, false)
  }
  if (schema.pattern === "^\\S+$") add("a value with a space", `${text(20)} ${text(20)}`, true)
  if (schema.pattern === "^[A-Z]{2}$") add("a lower-case code", "de", true)
  if (schema.pattern === "^(0|[1-9][0-9]*)(\\.[0-9]+)?$") {
    for (const written of ["1e3", ".5", "1.", "+1", "01"]) add(`the decimal string ${written}`, written, true)
  }
  if (typeof numeric?.maximum === "number") {
    add(`the number ${numeric.maximum + 1}`, numeric.maximum + 1, true)
    add(`the decimal string ${numeric.maximum + 1}`, String(numeric.maximum + 1), true)
  }
  if (typeof numeric?.exclusiveMinimum === "number") {
    add(`the number ${numeric.exclusiveMinimum}`, numeric.exclusiveMinimum, true)
    add(`the decimal string ${numeric.exclusiveMinimum}`, String(numeric.exclusiveMinimum), true)
  }
  if (typeof schema.maximum === "number") add(`${schema.maximum + 1}`, schema.maximum + 1, true)
  if (typeof schema.minimum === "number") add(`${schema.minimum - 1}`, schema.minimum - 1, true)
  if (schema.multipleOf === 1) add("a fraction", 1.5, true)
  if (schema.type === "array") {
    const items = schema.items as Json
    const valid = Array.isArray(items.enum) ? items.enum[0] : text(Number(items.minLength ?? 1))
    if (typeof schema.minItems === "number" && schema.minItems > 0) add("no items", [], true)
    if (typeof schema.maxItems === "number") {
      add(
        `${schema.maxItems + 1} items`,
        Array.from({ length: schema.maxItems + 1 }, () => valid),
        true,
      )
      if (free)
        add(
          `${schema.maxItems} items`,
          Array.from({ length: schema.maxItems }, () => valid),
          false,
        )
    }
    if (Array.isArray(items.enum)) add("an item outside the enum", ["not-a-member"], true)
    if (typeof items.maxLength === "number") {
      add(`an item of ${items.maxLength + 1} characters`, [text(items.maxLength + 1)], true)
      if (free) add(`an item of ${items.maxLength} characters`, [text(items.maxLength)], false)
    }
  }
  if (schema.type === "object") {
    const keys = schema.propertyNames as Json | undefined
    const values = schema.additionalProperties as Json | undefined
    if (typeof schema.maxProperties === "number") {
      const entries = (n: number) => Object.fromEntries(Array.from({ length: n }, (_, i) => [`k${i}`, "v"]))
      add(`${schema.maxProperties + 1} keys`, entries(schema.maxProperties + 1), true)
      add(`${schema.maxProperties} keys`, entries(schema.maxProperties), false)
    }
    if (typeof keys?.maxLength === "number") {
      add(`a key of ${keys.maxLength + 1} characters`, { [text(keys.maxLength + 1)]: "v" }, true)
      add(`a key of ${keys.maxLength} characters`, { [text(keys.maxLength)]: "v" }, false)
    }
    if (typeof values?.maxLength === "number") {
      add(`a value of ${values.maxLength + 1} characters`, { k: text(values.maxLength + 1) }, true)
      add(`a value of ${values.maxLength} characters`, { k: text(values.maxLength) }, false)
    }
  }
  return probes
}

const refusedFor = (answer: ApiResponse, field: string): boolean => {
  const param = (answer.body as { error?: { param?: string } } | null)?.error?.param
  return answer.status === 400 && param !== undefined && (param === field || param.startsWith(`${field}.`))
}

const describeAnswer = (answer: ApiResponse) =>
  `${answer.status} ${JSON.stringify(answer.body).slice(0, 300)}`

describe("the OpenAPI document's request limits", () => {
  it("covers every operation with a body that the cases name", () => {
    for (const { path, method } of bodyCases) {
      expect(document.paths[path]?.[method]?.requestBody, `${method} ${path}`).toBeDefined()
    }
  })

  it("give every metadata the limits the server checks (50 fields; keys 1-40, values up to 500 characters)", () => {
    for (const path of ["/api/social-payments/pay", "/api/v2/transfers"]) {
      const properties = (bodySchema(document.paths[path]?.post as Operation).properties ?? {}) as Record<
        string,
        Json
      >
      const metadata = member(properties.metadata ?? {})
      expect({ path, ...metadata }).toMatchObject({
        path,
        maxProperties: 50,
        propertyNames: { minLength: 1, maxLength: 40 },
        additionalProperties: { maxLength: 500 },
      })
    }
  })

  for (const c of bodyCases) {
    it(`are the ones ${c.method.toUpperCase()} ${c.path} enforces`, async () => {
      const operation = document.paths[c.path]?.[c.method] as Operation
      const probes = fieldsOf(bodySchema(operation)).flatMap(([field, schema, numeric]) =>
        probesOf(field, schema, numeric),
      )
      expect(probes.length, "probes").toBeGreaterThan(0)
      let sent = 0
      const failures: Array<string> = []
      for (const probe of probes) {
        if (!probe.refused && !c.acceptable) continue
        sent += 1
        const body = withField(c.base(), probe.field, probe.value)
        const answer =
          c.method === "patch" ? await client.patch(c.route(), body) : await client.post(c.route(), body)
        const refused = refusedFor(answer, probe.field)
        if (refused !== probe.refused) {
          failures.push(
            `${probe.field} = ${probe.what}: expected ${probe.refused ? "a 400 naming it" : "no refusal for it"}, got ${describeAnswer(answer)}`,
          )
        }
      }
      expect(failures).toEqual([])
      expect(sent, "probes sent").toBeGreaterThan(0)
    }, 120_000)
  }

  it("are the ones each list enforces on its query parameters", async () => {
    const failures: Array<string> = []
    let probed = 0
    for (const [path, item] of Object.entries(document.paths)) {
      const operation = item.get
      if (operation === undefined || path.includes("{")) continue
      for (const parameter of operation.parameters ?? []) {
        if (parameter.in !== "query") continue
        const name = String(parameter.name)
        const schema = parameter.schema as Json
        const values: Array<[string, boolean]> = []
        if (name === "limit") {
          const pattern = new RegExp(String(schema.pattern))
          for (const value of ["0", "1", "1.5", "x", "20", "100", "101", "007"]) {
            values.push([value, !pattern.test(value)])
          }
        }
        if (Array.isArray(schema.enum)) {
          values.push(["not-a-member", true])
          for (const value of schema.enum) values.push([String(value), false])
        }
        const formats = ((schema.anyOf ?? []) as ReadonlyArray<Json>).map((member) => member.format)
        if (formats.includes("date-time")) {
          values.push(["2026-11-31T00:00:00Z", true], ["2026-11-30T00:00:00Z", false])
          values.push(["2026-11-30T00:00:00", true])
        }
        if (formats.includes("date")) values.push(["2026-11-30", false], ["2026-11-31", true])
        if (typeof schema.maxLength === "number") values.push([text(schema.maxLength + 1), true])
        for (const [value, refused] of values) {
          probed += 1
          const answer = await client.get(`${path}?${name}=${encodeURIComponent(value)}`)
          if (refusedFor(answer, name) !== refused) {
            failures.push(
              `${path}?${name}=${value.slice(0, 40)}: expected ${refused ? "400" : "no refusal"}, got ${describeAnswer(answer)}`,
            )
          }
        }
      }
    }
    expect(probed).toBeGreaterThan(20)
    expect(failures).toEqual([])
  }, 120_000)
})

describe("the OpenAPI document's responses", () => {
  const operations = () =>
    Object.entries(document.paths).flatMap(([path, item]) =>
      Object.entries(item).map(([method, operation]) => ({ path, method, operation })),
    )

  it("list for each operation only the error statuses its kind of request can get", () => {
    for (const { path, method, operation } of operations()) {
      const statuses = Object.keys(operation.responses)
      const where = `${method} ${path}`
      if (path === "/health" || path === "/api/health") {
        expect(
          statuses.filter((s) => !s.startsWith("2")),
          where,
        ).toEqual(["503"])
        continue
      }
      expect(statuses, where).toEqual(expect.arrayContaining(["400", "429", "500"]))
      if (path === "/api/tenant/register") expect(statuses, where).not.toContain("401")
      else expect(statuses, where).toEqual(expect.arrayContaining(["401", "403", "404"]))
      if (method === "get") {
        for (const status of ["409", "413", "415"]) expect(statuses, where).not.toContain(status)
        // Only verify refuses a read for a business reason (a payment that is not on chain).
        expect(statuses.includes("422"), where).toBe(path.endsWith("/verify"))
      } else expect(statuses, where).toContain("409")
      // The database may be out of reach for any of them.
      expect(statuses, where).toContain("503")
      // A body sent with a DELETE is read too, and refused when not JSON or too large.
      if (method !== "get") expect(statuses, where).toEqual(expect.arrayContaining(["413", "415"]))
    }
  })

  it("give every answer its X-Request-Id, a 429 its Retry-After and a 401 its WWW-Authenticate", () => {
    for (const { path, method, operation } of operations()) {
      for (const [status, response] of Object.entries(operation.responses)) {
        const headers = (response.headers ?? {}) as Record<string, Json>
        const where = `${method} ${path} ${status}`
        expect(headers["X-Request-Id"], where).toEqual({ $ref: "#/components/headers/X-Request-Id" })
        if (status === "429") expect(headers["Retry-After"], where).toBeDefined()
        if (status === "401") expect(headers["WWW-Authenticate"], where).toBeDefined()
        // A POST's answer, and its stored refusal (422), may be a replay.
        if (method === "post" && (status.startsWith("2") || status === "422"))
          expect(headers["Idempotent-Replayed"], where).toBeDefined()
      }
    }
    expect(Object.keys(document.components.headers).sort()).toEqual([
      "Idempotent-Replayed",
      "Retry-After",
      "WWW-Authenticate",
      "X-Request-Id",
    ])
  })

  it("answers a 401 with the headers it documents", async () => {
    const unauthenticated = await fetch(`${platform.url}/api/v1/wallets`)
    expect(unauthenticated.status).toBe(401)
    expect(unauthenticated.headers.get("www-authenticate")).toMatch(/^Bearer/)
    expect(unauthenticated.headers.get("x-request-id")).toBeTruthy()
  })
})
