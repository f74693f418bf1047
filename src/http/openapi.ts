/**
 * What the OpenAPI document says beyond the endpoint schemas: the conventions (authentication,
 * scopes, errors, idempotency, pagination, rate limits, webhook signatures) and, on every
 * operation, the error responses and the `X-Tenant-Id` / `Idempotency-Key` headers.
 */
import { apiScopes, rateLimits, scopeDescriptions } from "../../domain/platform/scopes.ts"

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
401, 403 (scope or environment), 404 (also for another tenant's resources), 409 (idempotency or
state conflict), 413 (body over 1 MiB), 422 (business rule, e.g. \`insufficient_funds\`), 429 (with
\`Retry-After\`), 5xx. Every response carries \`X-Request-Id\`.

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

const errorStatuses = ["400", "401", "403", "404", "409", "413", "422", "429", "500"] as const

interface Operation {
  responses?: Record<string, unknown>
  parameters?: Array<unknown>
}

interface Spec {
  readonly paths?: Record<string, Record<string, Operation>>
  components?: { schemas?: Record<string, unknown> }
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
        param: { type: "string" },
        request_id: { type: "string" },
      },
    },
  },
}

const errorResponse = {
  description: "Error",
  content: { "application/json": { schema: { $ref: "#/components/schemas/Error" } } },
}

const openPaths = new Set(["/health", "/api/health", "/api/tenant/register"])

/** Adds the error responses and the conventional headers to every operation of the document. */
export const documentConventions = <S extends object>(document: S): S => {
  const spec = document as Spec
  spec.components = { ...spec.components, schemas: { Error: errorSchema, ...spec.components?.schemas } }
  for (const [path, item] of Object.entries(spec.paths ?? {})) {
    for (const [method, operation] of Object.entries(item)) {
      const responses = { ...operation.responses }
      for (const status of errorStatuses) responses[status] ??= errorResponse
      operation.responses = responses
      const parameters = [...(operation.parameters ?? [])]
      if (!openPaths.has(path)) {
        parameters.push({ name: "X-Tenant-Id", in: "header", required: true, schema: { type: "string" } })
      }
      if (method === "post") {
        parameters.push({
          name: "Idempotency-Key",
          in: "header",
          required: false,
          schema: { type: "string" },
        })
      }
      operation.parameters = parameters
    }
  }
  return document
}
