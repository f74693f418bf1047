/**
 * The Authentication middleware: `Authorization: Bearer <api_key>` and `X-Tenant-Id` must name the
 * same tenant; the key must be live (not revoked, not past a rotation's grace period) and hold the
 * endpoint's scope; then the tenant's and the key's rate limits apply. Every refusal is a 401, 403
 * or 429 in the platform's error shape. Refusals travel as defects carrying an `ApiError`: the
 * request middleware answers them (a middleware's typed errors would have to be schemas).
 */
import { Context, Effect, Layer, Redacted } from "effect"
import { HttpServerRequest } from "effect/http"
import { rateLimits } from "../../domain/platform/scopes.ts"
import { Platform } from "../platform/service.ts"
import { Authentication, CurrentCaller, OpenWhileSuspended, RequiredScope } from "./api.ts"
import { clientAddress } from "./client-address.ts"
import { ApiError, PendingRefusal } from "./errors.ts"

/** Refused authentications allowed per client address and second (burst twice that). */
export const failed_authentication_rate_per_s = 20

const unauthorized = (code: string, message: string) => new ApiError({ status: 401, code, message })

const refusals = {
  unknown_key: unauthorized("invalid_api_key", "The API key is not valid for this tenant."),
  tenant_mismatch: unauthorized("invalid_api_key", "The API key is not valid for this tenant."),
  revoked: unauthorized("api_key_revoked", "The API key was revoked."),
  expired: unauthorized("api_key_expired", "The API key expired at the end of its rotation grace period."),
  tenant_not_verified: new ApiError({
    status: 403,
    code: "tenant_not_verified",
    message:
      "Production keys work only while the tenant is verified, and its verification is not (GET /api/v1/tenant shows why); submit it again at POST /api/v1/tenant/verification.",
  }),
} as const

const tooManyRefusals = (retry_after_s: number) =>
  new ApiError({
    status: 429,
    code: "rate_limited",
    message: `Too many requests with API keys that are not valid from this address (over ${failed_authentication_rate_per_s}/s): until it slows down, only keys this server has already found valid are checked.`,
    headers: { "retry-after": String(retry_after_s) },
  })

/**
 * A credentials header sent twice. Node keeps the first `Authorization` and drops the rest, and joins
 * repeated `X-Tenant-Id`s with ", ": one answered as if the second were not there, the other as an
 * invalid key. Neither names the real mistake.
 */
const repeatedCredentialHeader = (
  request: HttpServerRequest.HttpServerRequest,
): "Authorization" | "X-Tenant-Id" | undefined => {
  const raw = (request.source as { readonly rawHeaders?: ReadonlyArray<string> }).rawHeaders
  if (raw === undefined) return undefined
  let authorization = 0
  let tenant = 0
  for (let i = 0; i < raw.length; i += 2) {
    const name = raw[i] as string
    if (name.length === 13 && name.toLowerCase() === "authorization") authorization++
    else if (name.length === 11 && name.toLowerCase() === "x-tenant-id") tenant++
  }
  return authorization > 1 ? "Authorization" : tenant > 1 ? "X-Tenant-Id" : undefined
}

export const AuthenticationLive = Layer.effect(
  Authentication,
  Effect.gen(function* () {
    const platform = yield* Platform
    /** Key lookups running per client address (see the refused-keys budget below). */
    const lookupsRunning = new Map<string, number>()
    return Authentication.of({
      bearer: (httpEffect, { credential, endpoint }) =>
        Effect.gen(function* () {
          const request = yield* HttpServerRequest.HttpServerRequest
          const repeated = repeatedCredentialHeader(request)
          if (repeated !== undefined) {
            return yield* Effect.die(
              unauthorized(
                "duplicate_credentials",
                `The ${repeated} header is given more than once; send it once, so which credentials count is not a guess.`,
              ),
            )
          }
          const tenant_id = request.headers["x-tenant-id"]?.trim() ?? ""
          const api_key = Redacted.value(credential).trim()
          if (api_key === "") {
            return yield* Effect.die(
              unauthorized("missing_api_key", "Send your API key as `Authorization: Bearer <api_key>`."),
            )
          }
          if (tenant_id === "") {
            return yield* Effect.die(
              unauthorized("missing_tenant_id", "Send your tenant id in the `X-Tenant-Id` header."),
            )
          }
          const now_ms = Date.now()
          // A cached key is decided at once; only a miss waits for the database, and a client
          // address whose keys keep failing (guessing, or a broken integration) is stopped first.
          let outcome = platform.keys.authenticateCached(api_key, tenant_id, now_ms)
          // Built only off the hot path (a cached valid key needs no address budget).
          const failures = () =>
            `auth-failures:${clientAddress(request, platform.settings.trusted_proxy_hops)}`
          if (outcome === undefined && platform.keys.knownKey(api_key, tenant_id, now_ms)) {
            // Another request with this key is being looked up, and its answer is this one's; or
            // the key was this tenant's when last looked up: a key in use is checked again each
            // `key_cache_ttl_ms` even while its address is refused for others' guesses.
            outcome = yield* Effect.promise(() => platform.keys.authenticate(api_key, tenant_id, now_ms))
          } else if (outcome === undefined) {
            // Checked before the lookup, counted after it: only refusals use up the address's budget.
            // The lookups of the address still running count as spent, so a burst sent at once
            // gets no more lookups than the budget holds.
            const address = failures()
            const running = lookupsRunning.get(address) ?? 0
            const admitted = platform.limiter.check(
              address,
              failed_authentication_rate_per_s,
              now_ms,
              running,
            )
            if (!admitted.allowed) return yield* Effect.die(tooManyRefusals(admitted.retry_after_s))
            lookupsRunning.set(address, running + 1)
            outcome = yield* Effect.promise(() =>
              platform.keys.authenticate(api_key, tenant_id, now_ms),
            ).pipe(
              Effect.ensuring(
                Effect.sync(() => {
                  const left = (lookupsRunning.get(address) ?? 1) - 1
                  if (left <= 0) lookupsRunning.delete(address)
                  else lookupsRunning.set(address, left)
                }),
              ),
            )
          }
          // A production key of a tenant whose verification lapsed is a real key, not a guess: its
          // 403 does not use up the address's budget. What recovers the tenant stays open to it.
          if (
            outcome.kind === "tenant_not_verified" &&
            Context.getOrUndefined(endpoint.annotations, OpenWhileSuspended) !== true
          )
            return yield* Effect.die(refusals[outcome.kind])
          if (outcome.kind !== "ok" && outcome.kind !== "tenant_not_verified") {
            const counted = platform.limiter.admit(
              [{ key: failures(), rate_per_s: failed_authentication_rate_per_s }],
              now_ms,
            )
            // A refusal answered from the cache (the same bad key again) costs no lookup, but it is
            // one of the address's refusals all the same: past the budget it is a 429 too.
            if (!counted.allowed) return yield* Effect.die(tooManyRefusals(counted.retry_after_s))
            return yield* Effect.die(refusals[outcome.kind])
          }
          const { caller } = outcome
          const scope = Context.getOrUndefined(endpoint.annotations, RequiredScope)
          if (scope !== undefined && !caller.scopes.includes(scope)) {
            return yield* Effect.die(
              new ApiError({
                status: 403,
                code: "insufficient_scope",
                message: `This API key lacks the scope \`${scope}\` this endpoint requires.`,
              }),
            )
          }
          const limits = rateLimits[caller.plan]
          const decision = platform.limiter.admit(
            [
              // Per environment: a load test in the sandbox never throttles the tenant's production.
              { key: `tenant:${caller.tenant_id}:${caller.environment}`, rate_per_s: limits.tenant_per_s },
              { key: `key:${caller.key_id}`, rate_per_s: limits.key_per_s },
            ],
            now_ms,
          )
          if (!decision.allowed) {
            return yield* Effect.die(
              new ApiError({
                status: 429,
                code: "rate_limited",
                message: `Too many requests; the ${caller.plan} plan allows ${limits.tenant_per_s}/s per tenant and ${limits.key_per_s}/s per key.`,
                headers: { "retry-after": String(decision.retry_after_s) },
              }),
            )
          }
          // A refusal of the request's form found before the credentials were checked.
          const refused = yield* PendingRefusal
          if (refused !== undefined) return yield* Effect.die(refused)
          return yield* Effect.provideService(httpEffect, CurrentCaller, caller)
        }),
    })
  }),
)
