/**
 * What the OpenAPI document says beyond the endpoint schemas: the conventions (authentication,
 * scopes, errors, idempotency, pagination, rate limits, webhook signatures) and, on every
 * operation, the error responses and the `X-Tenant-Id` / `Idempotency-Key` headers.
 */
import { tokenSymbols } from "../../domain/chains/registry.ts"
import { handleNetworks, identifierLengthMax, identityKinds } from "../../domain/platform/identifiers.ts"
import {
  apiScopes,
  environments,
  plans,
  rateLimits,
  scopeDescriptions,
} from "../../domain/platform/scopes.ts"
import { walletChains } from "../../domain/platform/tokens.ts"
import { webhookEventTypes } from "../../domain/webhooks/events.ts"
import { rotation_grace_ms_max } from "../platform/credentials.ts"
import { url_length_max } from "../webhooks/endpoint-url.ts"
import {
  amount_whole_units_max,
  type LengthBounds,
  list_limit_default,
  list_limit_max,
  metadata_keys_max,
  textLengths,
  verification_documents_max,
} from "./limits.ts"

const scopeLines = apiScopes.map((scope) => `- \`${scope}\`: ${scopeDescriptions[scope]}`).join("\n")
const limitLines = Object.entries(rateLimits)
  .map(([plan, limit]) => `- ${plan}: ${limit.tenant_per_s}/s per tenant, ${limit.key_per_s}/s per key`)
  .join("\n")

export const apiDescription = `
Payments on an append-only, double-entry ledger.

**Authentication.** Send \`Authorization: Bearer <api_key>\` and \`X-Tenant-Id: <tenant_id>\`; both
must belong to the same tenant. Keys are prefixed by environment (\`sk_sandbox_\`, \`sk_live_\`);
sandbox and production are separate ledgers. Production keys need a verified tenant.

**Scopes.**
${scopeLines}

**Errors.** \`{"error":{"type","code","message","param"?,"request_id"}}\` with 400 (validation),
401, 403 (scope or environment), 404 (also for another tenant's resources), 405 (a method the path
does not take; \`Allow\` lists those it does), 409 (idempotency or state conflict), 413 (body over
1 MiB), 415 (a body that is not \`application/json\`), 422 (business rule, e.g.
\`insufficient_funds\`), 429 (with \`Retry-After\`), 500, 503 (the database, the ledger or a
chain is briefly unavailable: retry, with the same \`Idempotency-Key\` for a write). Each operation lists the statuses it can answer. Every response
carries \`X-Request-Id\`.

**Idempotency.** Every POST accepts \`Idempotency-Key\` (1-255 printable ASCII characters, no
spaces). A retry with the same key and body returns the stored response (\`Idempotent-Replayed:
true\`); the same key with a different body is a 409.

**Money.** Request amounts are a JSON number or a decimal string, never more decimals than the
token has; responses carry exact decimal strings with at least two decimals.

**Pagination.** \`limit\` (1-100, default 20) and \`starting_after\` (the last id of the previous page)
give \`{"data":[...],"has_more":bool,"next_cursor":...}\`. A \`starting_after\` that is not the id of an
item of that list is 400 \`invalid_cursor\`; an empty one means the first page.

**Rate limits** (token buckets, burst twice the rate):
${limitLines}

**Webhooks.** Signed \`x-service-signature: t=<unix seconds>,v1=<hex HMAC-SHA256(secret, "<t>.<raw body>")>\`;
reject signatures older than 5 minutes. See the README for the retry schedule and a verifier.
`.trim()

/** What each error status means; the README lists every code. */
const errorDescriptions: Readonly<Record<string, string>> = {
  "400":
    "Validation: malformed JSON, a wrong type, an unknown field or query parameter, a value out of its range " +
    "(`invalid_parameter`, `invalid_json`, `too_many_decimals`, `unknown_token`, `invalid_cursor`...).",
  "401":
    "No valid credentials (`missing_api_key`, `missing_tenant_id`, `invalid_api_key`, `api_key_revoked`, " +
    "`api_key_expired`, `duplicate_credentials`); carries `WWW-Authenticate: Bearer`.",
  "403":
    "The key lacks the scope or the environment (`insufficient_scope`, `scope_not_held`, `sandbox_only`, " +
    "`tenant_not_verified`, `production_key_required`), or was rotated out and manages no keys (`api_key_rotated_out`).",
  "404": "No such resource for this tenant and environment (another tenant's resources included).",
  "409":
    "Idempotency or state conflict (`idempotency_key_reused`, `email_taken`, `identity_already_linked`...).",
  "413": "The body is over 1 MiB (`body_too_large`).",
  "415": "The body is not `application/json` (`unsupported_media_type`).",
  "422": "A business rule refused the request (`insufficient_funds`, `same_wallet`, `no_default_wallet`...).",
  "429": "Rate limited (`rate_limited`); `Retry-After` says when to retry.",
  "500": "An internal error; nothing was half-written.",
  "503":
    "Temporarily unavailable (`database_unavailable`, `ledger_busy`, `read_model_behind`, `chain_unavailable`): " +
    "retry shortly, with the same `Idempotency-Key` for a write.",
}

const header = (description: string) => ({ description, schema: { type: "string" } })

const headers = {
  "X-Request-Id": header(
    "The request's id (a client's own `X-Request-Id` of 8-128 safe characters is echoed).",
  ),
  "Idempotent-Replayed": header(
    "`true` when the response is the stored answer to an earlier request with this `Idempotency-Key` " +
      "(a stored refusal, such as a 422, included).",
  ),
  "Retry-After": header(
    "Seconds to wait before retrying: on every 429, and on a 503 `ledger_busy`, `database_unavailable` or " +
      "`read_model_behind`.",
  ),
  "WWW-Authenticate": header('`Bearer realm="api"`.'),
}

const ref = (name: keyof typeof headers) => ({ $ref: `#/components/headers/${name}` })

/** A POST's 422 is stored with its Idempotency-Key (the refused payment is recorded) and replayed. */
const errorResponse = (status: string, method: string) => ({
  description: errorDescriptions[status] ?? "Error",
  headers: {
    "X-Request-Id": ref("X-Request-Id"),
    ...(method === "post" && status === "422" ? { "Idempotent-Replayed": ref("Idempotent-Replayed") } : {}),
    ...(status === "429" || status === "503" ? { "Retry-After": ref("Retry-After") } : {}),
    ...(status === "401" ? { "WWW-Authenticate": ref("WWW-Authenticate") } : {}),
  },
  content: { "application/json": { schema: { $ref: "#/components/schemas/Error" } } },
})

const healthPaths = new Set(["/health", "/api/health"])
const openPaths = new Set([...healthPaths, "/api/tenant/register"])

/** Statuses an operation answers beyond those of its kind of request. */
const extraStatuses: Readonly<Record<string, ReadonlyArray<string>>> = {
  // A social payment, or a transfer not (or never) on chain, has nothing to verify.
  "transfers.verify": ["422"],
}

/** The error statuses an operation can answer, by how it is reached. */
const errorStatusesOf = (
  path: string,
  method: string,
  operation_id: string | undefined,
): ReadonlyArray<string> => {
  if (healthPaths.has(path)) return []
  const writes = method !== "get"
  // A DELETE takes no body, but one sent is read (and refused when not JSON or too large).
  const bodied = method === "post" || method === "patch" || method === "delete"
  return [
    "400",
    ...(openPaths.has(path) ? [] : ["401", "403", "404"]),
    ...(writes ? ["409"] : []),
    ...(bodied ? ["413", "415"] : []),
    ...(writes && !openPaths.has(path) ? ["422"] : []),
    ...(operation_id === undefined ? [] : (extraStatuses[operation_id] ?? [])),
    "429",
    "500",
    "503",
  ].sort()
}

// --- Field constraints -------------------------------------------------------------------------
// The request schemas take plain strings so that the handlers can answer each refusal with its own
// code (`unsupported_chain`, `invalid_note`...); the document states what they accept.

type Fragment = Readonly<Record<string, unknown>>

const length = (bounds: LengthBounds): Fragment =>
  bounds.min === 0 ? { maxLength: bounds.max } : { minLength: bounds.min, maxLength: bounds.max }
const oneOf = (values: ReadonlyArray<string>): Fragment => ({ enum: [...values] })
const described = (description: string, fragment: Fragment = {}): Fragment => ({ ...fragment, description })

const walletChainList = [...walletChains]
/** An amount: a JSON number or a decimal string, more than 0 and at most `whole_units_max` units. */
const amount = (whole_units_max: bigint): Fragment =>
  described(
    `More than 0 and at most ${whole_units_max.toLocaleString("en-US")} token units, with no more decimals ` +
      "than the token has (6; 18 on bsc): a JSON number, or a decimal string without sign, exponent, " +
      'spaces or a leading or trailing point ("12.50").',
    { pattern: "^(0|[1-9][0-9]*)(\\.[0-9]+)?$", exclusiveMinimum: 0, maximum: Number(whole_units_max) },
  )
const tokenList = [...tokenSymbols]
const statusList = ["pending", "completed", "failed"]
const identifier = { minLength: 1, maxLength: identifierLengthMax }
const listQuery: Record<string, Fragment> = {
  limit: described(`Page size, an integer from 1 to ${list_limit_max} (default ${list_limit_default}).`, {
    pattern: `^0*(?:[1-9][0-9]?|${list_limit_max})$`,
  }),
  starting_after: described("The last id of the previous page; empty for the first page."),
}
/** Payments' and transfers' metadata, as `checkMetadata` takes it. */
const metadataLimits: Fragment = {
  maxProperties: metadata_keys_max,
  propertyNames: length(textLengths.metadata_key),
  additionalProperties: length(textLengths.metadata_value),
}
const rfc3339 = described(
  "An RFC 3339 date-time with its offset (`2026-01-31T12:00:00Z`, up to microseconds), or a date " +
    "(`2026-01-31`, midnight UTC).",
  { anyOf: [{ format: "date-time" }, { format: "date" }] },
)

interface OperationFields {
  /** Body properties (`a.b` for a nested one). */
  readonly body?: Readonly<Record<string, Fragment>>
  readonly query?: Readonly<Record<string, Fragment>>
}

const webhookBody: Readonly<Record<string, Fragment>> = {
  url: described(
    `http(s) URL of at most ${url_length_max} characters; https to a public host in production.`,
    { format: "uri", maxLength: url_length_max },
  ),
  events: { items: oneOf(webhookEventTypes), minItems: 1 },
  secret: described("Used to sign deliveries; no whitespace.", {
    ...length(textLengths.webhook_secret),
    pattern: "^\\S+$",
  }),
  description: length(textLengths.webhook_description),
}

/** By operation id: what each field of the request accepts. */
const operationFields: Readonly<Record<string, OperationFields>> = {
  register: {
    body: {
      email: { format: "email", maxLength: identifierLengthMax },
      password: described("Not only spaces.", length(textLengths.password)),
      company_name: length(textLengths.company_name),
      plan: oneOf(plans),
    },
  },
  "tenant.submitVerification": {
    body: {
      legal_name: length(textLengths.legal_name),
      registration_number: length(textLengths.registration_number),
      country: described("ISO 3166-1 alpha-2.", { pattern: "^[A-Z]{2}$" }),
      "representative.name": length(textLengths.representative_name),
      "representative.country": described("ISO 3166-1 alpha-2.", { pattern: "^[A-Z]{2}$" }),
      documents: {
        maxItems: verification_documents_max,
        items: length(textLengths.verification_document),
      },
    },
  },
  "apiKeys.create": {
    body: {
      environment: oneOf(environments),
      scopes: described("Default: the creating key's scopes.", { items: oneOf(apiScopes), minItems: 1 }),
      name: length(textLengths.key_name),
    },
  },
  "apiKeys.list": { query: listQuery },
  "apiKeys.rotate": {
    body: {
      grace_period_seconds: described("How long the old key keeps working (default 86400).", {
        minimum: 0,
        maximum: rotation_grace_ms_max / 1000,
        multipleOf: 1,
      }),
    },
  },
  "wallets.create": {
    body: {
      external_id: length(textLengths.external_id),
      label: length(textLengths.label),
      chain: oneOf(walletChainList),
    },
  },
  "wallets.list": {
    query: { ...listQuery, external_id: described("Only the wallets with this external id.") },
  },
  "sandbox.faucet": { body: { token: oneOf(tokenList), amount: amount(amount_whole_units_max.faucet) } },
  "sandbox.simulateWebhook": { body: { event_type: oneOf(webhookEventTypes) } },
  "identities.link": {
    body: {
      kind: oneOf(identityKinds),
      value: described(
        `A phone number with its country code (E.164 once normalised), an e-mail address, or a handle ` +
          `\`@<network>:<handle>\` on ${handleNetworks.join(", ")}.`,
        identifier,
      ),
    },
  },
  "identities.list": { query: listQuery },
  "payments.pay": {
    body: {
      recipient: described("A phone number, an e-mail address or a handle (see identities).", identifier),
      amount: amount(amount_whole_units_max.payment),
      token: oneOf(tokenList),
      chain: described(
        "The chain of the token paid with; the paying wallet's own chain when left out.",
        oneOf(walletChainList),
      ),
      note: length(textLengths.note),
      metadata: metadataLimits,
    },
  },
  "payments.list": {
    query: { ...listQuery, status: oneOf(statusList), created_gte: rfc3339, created_lt: rfc3339 },
  },
  "transfers.create": {
    body: {
      amount: amount(amount_whole_units_max.transfer),
      token: oneOf(tokenList),
      chain: oneOf(walletChainList),
      metadata: metadataLimits,
    },
  },
  "transfers.list": { query: { ...listQuery, status: oneOf(statusList) } },
  "deposits.list": { query: listQuery },
  "webhooks.create": { body: webhookBody },
  "webhooks.update": { body: webhookBody },
  "webhooks.list": { query: listQuery },
  "webhooks.deliveries": { query: listQuery },
}

const keywordTypes: Readonly<Record<string, string>> = {
  minLength: "string",
  maxLength: "string",
  pattern: "string",
  format: "string",
  // Only string alternatives are written here (a date-time or a date).
  anyOf: "string",
  enum: "string",
  items: "array",
  minItems: "array",
  maxItems: "array",
  maxProperties: "object",
  propertyNames: "object",
  additionalProperties: "object",
  minimum: "number",
  maximum: "number",
  exclusiveMinimum: "number",
  multipleOf: "number",
}

type JsonObject = Record<string, unknown>

const isObject = (value: unknown): value is JsonObject =>
  typeof value === "object" && value !== null && !Array.isArray(value)

/**
 * `schema` with `fragment`'s keywords on the member of its type: the schema itself, or the members
 * of an `anyOf` (an optional field is `anyOf: [T, null]`). A new object: the generator shares schema
 * objects between fields. `items` merges into the array's item schema.
 */
const constrain = (schema: JsonObject, fragment: Fragment): JsonObject => {
  const { description, ...keywords } = fragment
  const apply = (member: JsonObject): JsonObject => {
    const type = member.type
    const own = Object.entries(keywords).filter(([keyword]) => keywordTypes[keyword] === type)
    if (own.length === 0) return member
    const out: JsonObject = { ...member }
    for (const [keyword, value] of own) {
      out[keyword] =
        keyword === "items" && isObject(member.items) && isObject(value)
          ? constrain(member.items, value)
          : keyword === "additionalProperties" && isObject(member.additionalProperties) && isObject(value)
            ? constrain(member.additionalProperties, value)
            : keyword === "propertyNames" && isObject(member.propertyNames) && isObject(value)
              ? constrain(member.propertyNames, value)
              : value
    }
    return out
  }
  // Members the generator repeated (an optional nullable field gets `null` twice) appear once.
  const distinct = (members: ReadonlyArray<unknown>) =>
    members.filter(
      (member, index) => members.findIndex((m) => JSON.stringify(m) === JSON.stringify(member)) === index,
    )
  const out = Array.isArray(schema.anyOf)
    ? {
        ...schema,
        anyOf: distinct(schema.anyOf.map((member) => (isObject(member) ? apply(member) : member))),
      }
    : apply(schema)
  return description === undefined ? out : { ...out, description }
}

/** `schema` (an object schema) with the property at `path` constrained. */
const constrainProperty = (
  schema: JsonObject,
  path: ReadonlyArray<string>,
  fragment: Fragment,
): JsonObject => {
  const [name, ...rest] = path
  const properties = schema.properties
  if (name === undefined || !isObject(properties) || !isObject(properties[name])) {
    throw new Error(`OpenAPI: no request field ${path.join(".")}`)
  }
  const property = properties[name]
  return {
    ...schema,
    properties: {
      ...properties,
      [name]: rest.length === 0 ? constrain(property, fragment) : constrainProperty(property, rest, fragment),
    },
  }
}

interface Operation {
  operationId?: string
  responses?: Record<string, unknown>
  parameters?: Array<unknown>
  requestBody?: { content?: Record<string, { schema?: JsonObject }> }
}

interface Spec {
  readonly paths?: Record<string, Record<string, Operation>>
  components?: { schemas?: Record<string, unknown>; headers?: Record<string, unknown> }
}

const errorSchema = {
  type: "object",
  required: ["error"],
  properties: {
    error: {
      type: "object",
      required: ["type", "code", "message", "request_id"],
      properties: {
        type: { type: "string" },
        code: { type: "string" },
        message: { type: "string" },
        param: { type: "string", description: "The field or parameter at fault, when there is one." },
        request_id: { type: "string" },
      },
    },
  },
}

/** Writes the field constraints of `fields` into the operation's body schema and query parameters. */
const documentFields = (operation: Operation, fields: OperationFields): void => {
  const content = operation.requestBody?.content?.["application/json"]
  if (fields.body !== undefined) {
    let schema = content?.schema
    // An omittable body is `anyOf: [object, null]`: the object member carries the properties.
    const members = Array.isArray(schema?.anyOf) ? schema.anyOf.filter(isObject) : []
    const target = members.find((member) => isObject(member.properties)) ?? schema
    if (content === undefined || schema === undefined || target === undefined) {
      throw new Error(`OpenAPI: ${operation.operationId} has no JSON body`)
    }
    let constrained = target
    for (const [path, fragment] of Object.entries(fields.body)) {
      constrained = constrainProperty(constrained, path.split("."), fragment)
    }
    schema =
      target === schema
        ? constrained
        : { ...schema, anyOf: (schema.anyOf as Array<unknown>).map((m) => (m === target ? constrained : m)) }
    content.schema = schema
  }
  for (const [name, fragment] of Object.entries(fields.query ?? {})) {
    const index = (operation.parameters ?? []).findIndex(
      (parameter) => isObject(parameter) && parameter.in === "query" && parameter.name === name,
    )
    const parameter = operation.parameters?.[index]
    if (!isObject(parameter) || !isObject(parameter.schema)) {
      throw new Error(`OpenAPI: ${operation.operationId} has no query parameter ${name}`)
    }
    const { description, ...keywords } = fragment
    ;(operation.parameters as Array<unknown>)[index] = {
      ...parameter,
      ...(description === undefined ? {} : { description }),
      schema: constrain(parameter.schema, keywords),
    }
  }
}

/**
 * Adds to every operation of the document its error responses, the conventional headers and what
 * each request field accepts.
 */
export const documentConventions = <S extends object>(document: S): S => {
  const spec = document as Spec
  spec.components = {
    ...spec.components,
    schemas: { Error: errorSchema, ...spec.components?.schemas },
    headers: { ...spec.components?.headers, ...headers },
  }
  for (const [path, item] of Object.entries(spec.paths ?? {})) {
    for (const [method, operation] of Object.entries(item)) {
      const responses: Record<string, unknown> = {}
      for (const [status, response] of Object.entries(operation.responses ?? {})) {
        // The health check's own 503 (its body says what is unhealthy) carries the request id too.
        responses[status] =
          isObject(response) && (status.startsWith("2") || healthPaths.has(path))
            ? {
                ...response,
                headers: {
                  ...(isObject(response.headers) ? response.headers : {}),
                  "X-Request-Id": ref("X-Request-Id"),
                  ...(method === "post" && status.startsWith("2")
                    ? { "Idempotent-Replayed": ref("Idempotent-Replayed") }
                    : {}),
                },
              }
            : response
      }
      for (const status of errorStatusesOf(path, method, operation.operationId)) {
        responses[status] ??= errorResponse(status, method)
      }
      operation.responses = responses
      const parameters = [...(operation.parameters ?? [])]
      if (!openPaths.has(path)) {
        parameters.push({
          name: "X-Tenant-Id",
          in: "header",
          required: true,
          description: "The tenant the API key belongs to.",
          schema: { type: "string" },
        })
      }
      if (method === "post") {
        parameters.push({
          name: "Idempotency-Key",
          in: "header",
          required: false,
          description: "Makes a retry safe: the same key and body get the stored response.",
          schema: { type: "string", minLength: 1, maxLength: 255, pattern: "^[\\x21-\\x7e]+$" },
        })
      }
      operation.parameters = parameters
      const fields = operation.operationId === undefined ? undefined : operationFields[operation.operationId]
      if (fields !== undefined) documentFields(operation, fields)
    }
  }
  return document
}
