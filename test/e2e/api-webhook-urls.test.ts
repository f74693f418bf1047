// Proves over HTTP, against the real platform process, how a webhook endpoint's URL is taken: it is
// checked once and stored as the WHATWG parser normalises it (mixed-case schemes and hosts are
// accepted and stored in lower case), a URL the parser would have to repair is refused with 400,
// and no URL is answered 500; production refuses every endpoint at a non-public host, however it is
// written, and writes nothing, while the sandbox keeps accepting local and private receivers; and
// PATCH of another tenant's endpoint is 404 whatever its body holds; a 17th endpoint in an
// environment is refused with 422.
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest"
import type { Webhook } from "../../src/http/api.ts"
import { expectError, expectOk } from "../support/api-expect.ts"
import {
  type ApiClient,
  apiClient,
  type RunningPlatform,
  registerTenant,
  startPlatform,
} from "../support/platform-process.ts"

type WebhookView = typeof Webhook.Type

let platform: RunningPlatform
let sandbox: ApiClient
let production: ApiClient
let other: ApiClient

beforeAll(async () => {
  platform = await startPlatform()
  const tenant = await registerTenant(platform.url)
  sandbox = tenant.client
  expectOk(
    await sandbox.post("/api/v1/tenant/verification", {
      legal_name: "Hooks GmbH",
      registration_number: "HRB 12345",
      country: "DE",
      representative: { name: "Ada Example", country: "DE" },
    }),
  )
  const key = expectOk(
    await sandbox.post<{ api_key: string }>("/api/v1/api-keys", { environment: "production" }),
    201,
  )
  production = apiClient(platform.url, { tenant_id: tenant.credentials.tenant_id, api_key: key.api_key })
  other = (await registerTenant(platform.url)).client
})
afterAll(async () => {
  await platform?.stop()
})

const hook = { events: ["payment.completed"], secret: "whsec_0123456789abcdef" }

const create = (api: ApiClient, url: string) => api.post<WebhookView>("/api/v1/webhooks", { ...hook, url })

/** Deletes every endpoint `api` has: a tenant may have only 16 in an environment. */
const deleteAll = async (api: ApiClient) => {
  const listed = expectOk(await api.get<{ data: Array<WebhookView> }>("/api/v1/webhooks?limit=100"))
  for (const { webhook_id } of listed.data) expectOk(await api.delete(`/api/v1/webhooks/${webhook_id}`))
}
afterEach(async () => {
  await deleteAll(sandbox)
  await deleteAll(production)
})

/** Every endpoint row and its URL, to prove a refused request wrote nothing. */
const endpointRows = async () =>
  (
    await platform.database.pool.query<{ webhook_id: string; url: string }>(
      "select webhook_id, url from platform.webhooks order by webhook_id",
    )
  ).rows

describe("a webhook URL is stored as the URL parser normalises it", () => {
  it.each([
    ["HTTP://LOCALHOST:3199/a", "http://localhost:3199/a"],
    ["hTtP://LocalHost:3199/a", "http://localhost:3199/a"],
    ["http://127.0.0.1:3199/a", "http://127.0.0.1:3199/a"],
    ["HTTPS://Hooks.Example.COM:443/Path?Q=1", "https://hooks.example.com/Path?Q=1"],
  ])("accepts %s in the sandbox as %s, and PATCH alike", async (url, normalised) => {
    const created = expectOk(await create(sandbox, url), 201)
    expect(created.url).toBe(normalised)
    expect(expectOk(await sandbox.get<WebhookView>(`/api/v1/webhooks/${created.webhook_id}`)).url).toBe(
      normalised,
    )
    const patched = expectOk(
      await sandbox.patch<WebhookView>(`/api/v1/webhooks/${created.webhook_id}`, {
        url: url.replace("3199", "3200"),
      }),
    )
    expect(patched.url).toBe(normalised.replace("3199", "3200"))
  })

  it("accepts a mixed-case https URL in production, stored in lower case", async () => {
    const created = expectOk(await create(production, "HTTPS://HOOKS.EXAMPLE.COM/In"), 201)
    expect(created).toMatchObject({ url: "https://hooks.example.com/In", environment: "production" })
    const patched = expectOk(
      await production.patch<WebhookView>(`/api/v1/webhooks/${created.webhook_id}`, {
        url: "HTTPS://Other.Example.com/In",
      }),
    )
    expect(patched.url).toBe("https://other.example.com/In")
  })

  it.each([
    [" http://localhost:3199/a", "spaces or control characters"],
    ["\thttp://localhost:3199/a", "spaces or control characters"],
    ["http://localhost:3199/a\n", "spaces or control characters"],
    ["http:localhost:3199/a", "must start with http:// or https://"],
    ["http:\\\\localhost:3199\\a", "backslashes"],
  ])("refuses %j with 400 invalid_url, on create and PATCH, writing nothing", async (url, reason) => {
    const { webhook_id } = expectOk(await create(sandbox, "http://127.0.0.1:3199/kept"), 201)
    const before = await endpointRows()
    const refused = [
      await create(sandbox, url),
      await sandbox.patch(`/api/v1/webhooks/${webhook_id}`, { url }),
    ]
    for (const response of refused) {
      const error = expectError(response, 400, "invalid_url")
      expect(error.param).toBe("url")
      expect(error.message).toContain(reason)
    }
    expect(await endpointRows()).toEqual(before)
  })

  it("answers every odd URL with 201 or 400, never 500", async () => {
    const odd = [
      "HTTP://",
      "http://[::1]:3199/",
      "http://%41.example/",
      "http://a..b/",
      "http://xn--/",
      "http://\u00a0localhost/",
      "http://localhost:99999/",
      "http://[fe80::1%25eth0]/",
      "http://@/",
      "http://:80/",
      "http:///localhost/",
      "http://localhost/%00",
      "http://ünïcödé.example/",
      "http://1.2.3.4.5/",
      "https://0x100000000/",
      "javascript:alert(1)",
      `http://example.com/${"é".repeat(700)}`,
    ]
    for (const url of odd) {
      for (const api of [sandbox, production]) {
        const response = await create(api, url)
        expect([201, 400], `${url}: ${JSON.stringify(response.body)}`).toContain(response.status)
        if (response.status === 201) await deleteAll(api)
      }
    }
  })
})

describe("production endpoints", () => {
  const non_public = [
    "https://169.254.169.254/latest/meta-data",
    "https://127.0.0.1/x",
    "https://10.0.0.1/x",
    "https://172.16.5.4/x",
    "https://192.168.1.1/x",
    "https://100.64.0.1/x",
    "https://[::1]/x",
    "https://[fd00::1]/x",
    "https://[fe80::1]/x",
    "https://[::ffff:127.0.0.1]/x",
    "https://0.0.0.0/x",
    "https://[::]/x",
    "https://224.0.0.1/x",
    "https://2130706433/",
    "https://0x7f.1/",
    "https://localhost/x",
    "https://LOCALHOST:3199/a",
    "https://api.localhost/x",
    "https://printer.local/x",
    "https://metadata.google.internal/x",
    "https://intranet/x",
  ]

  it.each(non_public)(
    "refuses %s with 400 invalid_url, on create and PATCH, writing nothing",
    async (url) => {
      const { webhook_id } = expectOk(await create(production, "https://hooks.example.com/kept"), 201)
      const before = await endpointRows()
      for (const response of [
        await create(production, url),
        await production.patch(`/api/v1/webhooks/${webhook_id}`, { url }),
      ]) {
        const error = expectError(response, 400, "invalid_url")
        expect(error.param).toBe("url")
        expect(error.message).toMatch(/^url: production endpoints must reach a public host: /)
      }
      expect(await endpointRows()).toEqual(before)
    },
  )

  it("are refused a private host, while the sandbox may still point at one", async () => {
    for (const url of [
      "http://127.0.0.1:3199/a",
      "https://169.254.169.254/latest/meta-data",
      "http://localhost/",
    ]) {
      expect(expectOk(await create(sandbox, url), 201).url).toBe(url)
    }
  })
})

describe("PATCH of another tenant's endpoint", () => {
  it.each([
    { url: "HTTPS://LOCALHOST:3199/a" },
    { url: " http://localhost:3199/a" },
    { url: "ftp://example.com" },
    { events: [] },
    { secret: "short" },
    { description: "x" },
  ])("is 404 webhook_not_found with %j, and changes nothing", async (body) => {
    const { webhook_id } = expectOk(await create(sandbox, "http://127.0.0.1:3199/owned"), 201)
    const before = await endpointRows()
    for (const stranger of [other, production]) {
      const error = expectError(
        await stranger.patch(`/api/v1/webhooks/${webhook_id}`, body),
        404,
        "webhook_not_found",
      )
      expect(error.param).toBe("webhook_id")
    }
    expect(await endpointRows()).toEqual(before)
  })
})

describe("a tenant's endpoints", () => {
  it("number at most 16 per environment: the 17th is 422 webhook_endpoints_limit and writes nothing", async () => {
    for (let i = 0; i < 16; i++) expectOk(await create(sandbox, `http://127.0.0.1:3199/${i}`), 201)
    const before = await endpointRows()
    const error = expectError(
      await create(sandbox, "http://127.0.0.1:3199/16"),
      422,
      "webhook_endpoints_limit",
    )
    expect(error.message).toContain("16 webhook endpoints")
    expect(await endpointRows()).toEqual(before)
    // Production and other tenants count their own.
    expectOk(await create(production, "https://hooks.example.com/in"), 201)
    expectOk(await create(other, "http://127.0.0.1:3199/other"), 201)
  })
})
