/**
 * Registration, the tenant record, verification (KYC/KYB) and API keys.
 */
import { Effect, Result } from "effect"
import { HttpServerRequest } from "effect/http"
import { HttpApiBuilder } from "effect/http-api"
import { normaliseEmail } from "../../../domain/platform/identifiers.ts"
import {
  type ApiScope,
  apiScopes,
  type Environment,
  environments,
  isApiScope,
  type Plan,
  plans,
} from "../../../domain/platform/scopes.ts"
import { isCountryCode, simulateVerification } from "../../../domain/platform/verification.ts"
import {
  announceKeyChange,
  type Caller,
  getKey,
  insertKey,
  listKeys,
  type RotationOutcome,
  rotateKey as rotateStoredKey,
  rotation_grace_ms_default,
  rotation_grace_ms_max,
  toKeyView,
} from "../../platform/credentials.ts"
import { inTransaction, storeResponse } from "../../platform/idempotency.ts"
import { idPrefixes, newId } from "../../platform/ids.ts"
import { hashPassword } from "../../platform/passwords.ts"
import { Platform } from "../../platform/service.ts"
import { CurrentCaller, PlatformApi } from "../api.ts"
import { clientAddress } from "../client-address.ts"
import { ApiError, badRequest, conflict, forbidden, notFound } from "../errors.ts"
import {
  type IdempotencyTicket,
  idempotent,
  StoredResponseSealer,
  sealed_replay_ms,
  storedResponse,
} from "../idempotency.ts"
import { textLengths, verification_documents_max } from "../limits.ts"
import {
  characterCount,
  db,
  dbUnique,
  invalidCursor,
  longerThan,
  parseLimit,
  respond,
  text,
  unprintable,
} from "./common.ts"

/** Registrations per second from one client address (burst twice that). */
const registration_rate_per_s = 20

interface TenantRow {
  tenant_id: string
  email: string
  company_name: string
  plan: Plan
  kyc_status: "unverified" | "verified" | "rejected"
  kyc_level: number
  kyc_reason: string | null
  kyc_decided_at: Date | null
  created_at: Date
}

const toTenant = (row: TenantRow, environment: Environment) => ({
  tenant_id: row.tenant_id,
  email: row.email,
  company_name: row.company_name,
  plan: row.plan,
  environment,
  verification: {
    status: row.kyc_status,
    kyc_level: row.kyc_level,
    reason: row.kyc_reason,
    decided_at: row.kyc_decided_at?.toISOString() ?? null,
  },
  created_at: row.created_at.toISOString(),
})

const tenantColumns =
  "tenant_id, email, company_name, plan, kyc_status, kyc_level, kyc_reason, kyc_decided_at, created_at"

const register = (payload: { email: string; password: string; company_name: string; plan: string }) =>
  Effect.gen(function* () {
    const platform = yield* Platform
    const request = yield* HttpServerRequest.HttpServerRequest
    const address = clientAddress(request, platform.settings.trusted_proxy_hops)
    const admitted = platform.limiter.admit(
      [{ key: `register:${address}`, rate_per_s: registration_rate_per_s }],
      Date.now(),
    )
    if (!admitted.allowed) {
      return yield* new ApiError({
        status: 429,
        code: "rate_limited",
        message: "Too many registrations from this address.",
        headers: { "retry-after": String(admitted.retry_after_s) },
      })
    }
    const email = normaliseEmail(payload.email)
    if (Result.isFailure(email))
      return yield* badRequest("invalid_email", "email is not a valid e-mail address.", "email")
    const password_length = characterCount(payload.password)
    if (
      password_length < textLengths.password.min ||
      password_length > textLengths.password.max ||
      payload.password.trim() === ""
    ) {
      return yield* badRequest(
        "invalid_password",
        `password must be ${textLengths.password.min} to ${textLengths.password.max} characters, not only spaces.`,
        "password",
      )
    }
    const company_name = yield* text(payload.company_name, "company_name", textLengths.company_name)
    const plan = payload.plan.trim().toLowerCase()
    if (!(plans as ReadonlyArray<string>).includes(plan)) {
      return yield* badRequest("invalid_plan", `plan must be one of ${plans.join(", ")}.`, "plan")
    }
    const password_hash = yield* Effect.promise(() => hashPassword(payload.password))
    // The answer carries the tenant's first API key: stored sealed, like every response with a key.
    const sealer = yield* StoredResponseSealer
    // Before a tenant exists, a key is scoped by the address it registers: unrelated sign-ups that
    // happen to send the same key (`signup-1`) never meet, and one learns nothing of the other.
    return yield* idempotent(
      { tenant_id: "", environment: `register:${email.success}` },
      "tenant.register",
      payload,
      (ticket) =>
        dbUnique(
          () =>
            inTransaction(platform.pool, async (client) => {
              const tenant_id = newId(idPrefixes.tenant)
              await client.query(
                `insert into platform.tenants (tenant_id, email, password_hash, company_name, plan, custody_index, created_at)
               values ($1, $2, $3, $4, $5, nextval('platform.tenant_custody_index'), now())`,
                [tenant_id, email.success, password_hash, company_name, plan],
              )
              await client.query(
                "insert into platform.tenant_environments (tenant_id, environment) values ($1, 'sandbox')",
                [tenant_id],
              )
              const key = await insertKey(client, {
                tenant_id,
                environment: "sandbox",
                scopes: apiScopes,
                name: "default",
              })
              const body = { tenant_id, api_key: key.api_key, environment: "sandbox" as const }
              if (ticket !== undefined) await storeResponse(client, storedResponse(ticket, 201, body))
              return body
            }),
          () => conflict("email_taken", "A tenant with this e-mail address is already registered.", "email"),
        ),
      { sealer, response_carries_api_key: true },
    )
  })

export const RegistrationHandlers = HttpApiBuilder.group(PlatformApi, "registration", (handlers) =>
  Effect.succeed(handlers.handle("register", ({ payload }) => respond(register(payload)))),
)

const loadTenant = (tenant_id: string) =>
  Effect.gen(function* () {
    const { pool } = yield* Platform
    const row = (yield* db(() =>
      pool.query<TenantRow>(`select ${tenantColumns} from platform.tenants where tenant_id = $1`, [
        tenant_id,
      ]),
    )).rows[0]
    if (row === undefined) return yield* Effect.die(new Error(`authenticated tenant ${tenant_id} has no row`))
    return row
  })

const submitVerification = (payload: {
  legal_name: string
  registration_number: string
  country: string
  representative: { name: string; country: string }
  documents?: ReadonlyArray<string> | undefined
}) =>
  Effect.gen(function* () {
    const caller = yield* CurrentCaller
    const { pool } = yield* Platform
    const legal_name = yield* text(payload.legal_name, "legal_name", textLengths.legal_name)
    const registration_number = yield* text(
      payload.registration_number,
      "registration_number",
      textLengths.registration_number,
    )
    const representative_name = yield* text(
      payload.representative.name,
      "representative.name",
      textLengths.representative_name,
    )
    for (const [param, value] of [
      ["country", payload.country],
      ["representative.country", payload.representative.country],
    ] as const) {
      if (!isCountryCode(value)) {
        return yield* badRequest(
          "invalid_country",
          `${param} must be an assigned ISO 3166-1 alpha-2 country code in upper case, such as DE.`,
          param,
        )
      }
    }
    // Document references are text like the names: trimmed, one printable line each. A blank or
    // unprintable one is no document, and documents raise the KYC level.
    const documents = (payload.documents ?? []).map((d) => d.trim())
    const { min, max } = textLengths.verification_document
    if (
      documents.length > verification_documents_max ||
      documents.some((d) => d.length < min || longerThan(d, max) || unprintable.test(d))
    ) {
      return yield* badRequest(
        "invalid_documents",
        `documents: at most ${verification_documents_max} references, each one line of ${min}-${max} printable characters (no control characters or bidirectional overrides).`,
        "documents",
      )
    }
    const submission = {
      legal_name,
      registration_number,
      country: payload.country,
      representative_name,
      representative_country: payload.representative.country,
      documents,
    }
    const decision = simulateVerification(submission)
    const reason = decision.status === "rejected" ? decision.reason : null
    const { keys } = yield* Platform
    // A rejection suspends the tenant's production keys: at once in this process, not at the
    // cache's next read.
    return yield* Effect.ensuring(
      idempotent(caller, "tenant.verification", payload, (ticket) =>
        // The verification decides whether production works at all: once a production key works,
        // only a production key may change it (a leaked sandbox key could otherwise switch
        // production off). Checked inside `idempotent`: a retry is answered with what was done.
        Effect.gen(function* () {
          yield* productionFromProduction(
            caller,
            "production",
            "change the tenant's verification",
            "tenant:manage",
          )
          return yield* db(() =>
            inTransaction(pool, async (client) => {
              const updated = await client.query<TenantRow>(
                `update platform.tenants
                set kyc_status = $2, kyc_level = $3, kyc_reason = $4, kyc_submission = $5, kyc_decided_at = now()
              where tenant_id = $1 returning ${tenantColumns}`,
                [caller.tenant_id, decision.status, decision.kyc_level, reason, JSON.stringify(submission)],
              )
              const row = updated.rows[0]
              if (row === undefined) throw new Error("tenant vanished")
              const body = toTenant(row, caller.environment)
              if (ticket !== undefined) await storeResponse(client, storedResponse(ticket, 200, body))
              // Every process re-reads the tenant's keys: a rejection suspends its production keys.
              await announceKeyChange(client, { tenant_id: caller.tenant_id })
              return body
            }),
          )
        }),
      ),
      Effect.sync(() => keys.forgetTenant(caller.tenant_id)),
    )
  })

export const TenantHandlers = HttpApiBuilder.group(PlatformApi, "tenant", (handlers) =>
  Effect.succeed(
    handlers
      .handle("get", () =>
        Effect.gen(function* () {
          const caller = yield* CurrentCaller
          return toTenant(yield* loadTenant(caller.tenant_id), caller.environment)
        }),
      )
      .handle("submitVerification", ({ payload }) => respond(submitVerification(payload))),
  ),
)

/** Production keys are created and rotated only for a verified tenant. */
const notVerified = () =>
  forbidden(
    "tenant_not_verified",
    "Production credentials require a verified tenant; submit verification at POST /api/v1/tenant/verification.",
  )

/**
 * A production key is made or rotated only while its tenant is verified. Checked inside
 * `idempotent`: the tenant's state as it is now counts for a new request only, a retry is its answer.
 */
const verifiedFor = (tenant_id: string, environment: string | undefined) =>
  environment === "production"
    ? Effect.flatMap(loadTenant(tenant_id), (tenant) =>
        tenant.kyc_status === "verified" ? Effect.void : notVerified(),
      )
    : Effect.void

/**
 * Production keys and the verification are managed with a production key once the tenant has one
 * that may do it (not revoked, not rotated out, holding `scope`: keys:manage for keys, tenant:manage
 * for the verification): a sandbox key (in a test suite, a CI job) that leaks must not reach
 * production. The first production key can only come from a sandbox key, so it may be created by
 * one; and a tenant whose production keys cannot manage (least-privilege keys only) still manages
 * with its sandbox key, so it never locks itself out. Nor does a key whose secret the tenant never
 * received: one never used within `sealed_replay_ms` of its creation (after which its answer is no
 * longer replayed) counts for nothing. A rotated-out key counts through its grace period while its
 * successor stands (the tenant may still run on it while it rolls the successor out), and for
 * nothing once that successor was revoked (the only key left to manage would be it, and it manages
 * nothing but its own end). While a rejected verification suspends production,
 * its keys still reach what recovers it (`OpenWhileSuspended`).
 */
const productionFromProduction = (
  caller: Caller,
  environment: string | undefined,
  what: string,
  scope: ApiScope = "keys:manage",
) =>
  environment !== "production" || caller.environment === "production"
    ? Effect.void
    : Effect.gen(function* () {
        const { pool } = yield* Platform
        const found = yield* db(() =>
          pool.query<{ live: boolean }>(
            `select exists (select 1 from platform.api_keys k
                             where k.tenant_id = $1 and k.environment = 'production' and k.revoked_at is null
                               and $2 = any (k.scopes)
                               and ((k.expires_at is null
                                     and (k.first_used_at is not null
                                          or k.created_at > now() - make_interval(secs => $3)))
                                    or (k.expires_at > now()
                                        and exists (select 1 from platform.api_keys successor
                                                     where successor.key_id = k.rotated_to
                                                       and successor.revoked_at is null)))) as live`,
            [caller.tenant_id, scope, sealed_replay_ms / 1000],
          ),
        )
        if (found.rows[0]?.live !== true) return
        return yield* forbidden(
          "production_key_required",
          `A sandbox key cannot ${what} once the tenant has a production key: use a production key (sk_live_...) with ${scope}.`,
        )
      })

/** A key grants only scopes it holds itself: a limited key cannot mint (or rotate into) a stronger one. */
const scopesNotHeld = (caller: Caller, scopes: ReadonlyArray<ApiScope>, what: string) => {
  const missing = scopes.filter((scope) => !caller.scopes.includes(scope))
  return missing.length === 0
    ? Effect.void
    : Effect.fail(
        forbidden(
          "scope_not_held",
          `${what} scopes this API key does not hold (${missing.join(", ")}); a key can pass on only its own scopes.`,
        ),
      )
}

/** The scopes and environment of one of the caller's tenant's keys; undefined when it has no such key. */
const keyScopes = (caller: Caller, key_id: string) =>
  Effect.gen(function* () {
    const { pool } = yield* Platform
    const found = yield* db(() =>
      pool.query<{ scopes: ApiScope[]; environment: Environment }>(
        "select scopes, environment from platform.api_keys where tenant_id = $1 and key_id = $2",
        [caller.tenant_id, key_id],
      ),
    )
    return found.rows[0]
  })

/** The scopes asked for, or by default the creating key's own. */
const parseScopes = (
  caller: Caller,
  scopes: ReadonlyArray<string> | undefined,
): Effect.Effect<ReadonlyArray<ApiScope>, ApiError> => {
  if (scopes === undefined) return Effect.succeed(caller.scopes)
  const unknown = scopes.find((scope) => !isApiScope(scope))
  if (unknown !== undefined) {
    return Effect.fail(
      badRequest(
        "invalid_scope",
        `Unknown scope ${JSON.stringify(unknown)}; see the docs for the list.`,
        "scopes",
      ),
    )
  }
  if (scopes.length === 0)
    return Effect.fail(badRequest("invalid_scope", "A key needs at least one scope.", "scopes"))
  return Effect.succeed([...new Set(scopes)] as ReadonlyArray<ApiScope>)
}

/**
 * A key rotated out works on for its grace period, for requests in flight, but manages no keys:
 * rotating a leaked key would contain nothing if the leaked key could mint or rotate others.
 */
const notRotatedOut = (caller: Caller, what: string) =>
  caller.expires_at === null
    ? Effect.void
    : Effect.fail(
        forbidden(
          "api_key_rotated_out",
          `This API key (${caller.key_id}) was rotated and works only until ${caller.expires_at.toISOString()}, for requests in flight; it cannot ${what}. Use its successor.`,
        ),
      )

/**
 * What a key must pass to issue a key of `environment` (creating or rotating one), checked once no
 * stored response answers the request: not rotated out, a verified tenant for production, and a
 * production key for production once the tenant has one.
 */
const mayIssueKeys = (caller: Caller, environment: string | undefined, verb: "create" | "rotate") =>
  Effect.andThen(
    Effect.andThen(notRotatedOut(caller, `${verb} keys`), verifiedFor(caller.tenant_id, environment)),
    productionFromProduction(caller, environment, `${verb} production keys`),
  )

const createKey = (payload: {
  environment?: string | undefined
  scopes?: ReadonlyArray<string> | undefined
  name?: string | undefined
}) =>
  Effect.gen(function* () {
    const caller = yield* CurrentCaller
    const { pool } = yield* Platform
    const environment = payload.environment ?? caller.environment
    if (!(environments as ReadonlyArray<string>).includes(environment)) {
      return yield* badRequest(
        "invalid_environment",
        `environment must be one of ${environments.join(", ")}.`,
        "environment",
      )
    }
    const scopes = yield* parseScopes(caller, payload.scopes)
    yield* scopesNotHeld(caller, scopes, "The new key would have")
    const name = payload.name === undefined ? null : yield* text(payload.name, "name", textLengths.key_name)
    const sealer = yield* StoredResponseSealer
    // Fingerprinted with the scopes it asks for: a body without `scopes` asks for the calling key's
    // own, so the same body from a key with other scopes is another request (409), never a replay
    // of a stronger key's answer. And with the calling key: its answer holds a secret, which no
    // other key of the tenant gets by sending the same Idempotency-Key.
    const request = { body: payload, scopes: [...scopes].sort(), caller_key_id: caller.key_id }
    return yield* idempotent(
      caller,
      "keys.create",
      request,
      // Checked once no stored response answers: a retry of a creation made before the calling key
      // was rotated is still the replay it is.
      (ticket) =>
        Effect.andThen(
          mayIssueKeys(caller, environment, "create"),
          db(() =>
            inTransaction(pool, async (client) => {
              await client.query(
                "insert into platform.tenant_environments (tenant_id, environment) values ($1, $2) on conflict do nothing",
                [caller.tenant_id, environment],
              )
              const key = await insertKey(client, {
                tenant_id: caller.tenant_id,
                environment: environment as Environment,
                scopes,
                name,
              })
              if (ticket !== undefined) await storeResponse(client, storedResponse(ticket, 201, key))
              return key
            }),
          ),
        ),
      { sealer, response_carries_api_key: true },
    )
  })

/** Why a key is not rotated: 404 when the tenant has no such key, 409 when it is no longer active. */
const rotationRefused = (
  key_id: string,
  refusal: Exclude<RotationOutcome, { readonly kind: "rotated" }>,
): ApiError => {
  if (refusal.kind === "not_found") return notFound("api_key", key_id, "key_id")
  const { key, successor_key_id } = refusal
  const successor = successor_key_id === null ? "" : `; its successor is ${successor_key_id}`
  switch (key.status) {
    case "revoked":
      return conflict(
        "api_key_already_revoked",
        `API key ${key_id} was revoked at ${key.revoked_at}; a revoked key cannot be rotated. Create a new key with POST /api/v1/api-keys.`,
        "key_id",
      )
    case "expired":
      return conflict(
        "api_key_already_expired",
        `API key ${key_id} expired at ${key.expires_at}${successor}; an expired key cannot be rotated.`,
        "key_id",
      )
    case "expiring":
      return conflict(
        "api_key_rotating",
        `API key ${key_id} is already being rotated: it expires at ${key.expires_at}${successor}. Rotate the successor instead (or, if it was revoked, create a new key with POST /api/v1/api-keys); an expiry is never extended.`,
        "key_id",
      )
    case "active":
      throw new Error(`rotation of active key ${key_id} was refused`)
  }
}

const rotateKey = (key_id: string, payload: { grace_period_seconds?: number | undefined }) =>
  Effect.gen(function* () {
    const caller = yield* CurrentCaller
    const platform = yield* Platform
    const grace_ms =
      payload.grace_period_seconds === undefined
        ? rotation_grace_ms_default
        : payload.grace_period_seconds * 1000
    // The seconds must be whole: 1.5 s is 1,500 ms, an integer, and was accepted.
    if (
      (payload.grace_period_seconds !== undefined && !Number.isInteger(payload.grace_period_seconds)) ||
      grace_ms < 0 ||
      grace_ms > rotation_grace_ms_max
    ) {
      return yield* badRequest(
        "invalid_grace_period",
        `grace_period_seconds must be an integer from 0 to ${rotation_grace_ms_max / 1000}.`,
        "grace_period_seconds",
      )
    }
    // The successor has the rotated key's scopes: the caller must hold them all. A production key
    // is rotated only while the tenant is verified (the key itself stops working otherwise).
    const target = yield* keyScopes(caller, key_id)
    if (target !== undefined) yield* scopesNotHeld(caller, target.scopes, `Key ${key_id} has`)
    const sealer = yield* StoredResponseSealer
    const result = yield* idempotent(
      caller,
      `keys.rotate.${key_id}`,
      // With the calling key, as for a creation: the answer holds the successor's secret.
      { body: payload, caller_key_id: caller.key_id },
      // As for a creation: a key that rotated itself gets its retry's replay (the successor's secret).
      (ticket) =>
        Effect.flatMap(mayIssueKeys(caller, target?.environment, "rotate"), () =>
          Effect.flatMap(
            db(() =>
              inTransaction(platform.pool, async (client) => {
                const outcome = await rotateStoredKey(client, caller.tenant_id, key_id, grace_ms)
                if (outcome.kind !== "rotated") return outcome
                await announceKeyChange(client, { key_id })
                const body = { new_key: outcome.new_key, old_key: outcome.old_key }
                if (ticket !== undefined) await storeResponse(client, storedResponse(ticket, 200, body))
                return body
              }),
            ),
            (answer) =>
              "kind" in answer ? Effect.fail(rotationRefused(key_id, answer)) : Effect.succeed(answer),
          ),
        ),
      { sealer, response_carries_api_key: true },
    )
    platform.keys.forget(key_id)
    return result
  })

const revokeKey = (key_id: string, ticket: IdempotencyTicket | undefined) =>
  Effect.gen(function* () {
    const caller = yield* CurrentCaller
    const platform = yield* Platform
    // A rotated-out key may still end itself early, but not another key (its own successor, say).
    if (key_id !== caller.key_id) yield* notRotatedOut(caller, "revoke other keys")
    // As for rotation: a limited key may not revoke a stronger one (the tenant's own full key).
    const target = yield* keyScopes(caller, key_id)
    if (target !== undefined) yield* scopesNotHeld(caller, target.scopes, `Key ${key_id} has`)
    yield* productionFromProduction(caller, target?.environment, "revoke production keys")
    // A key past its rotation's grace period is over: revoking it would rewrite how it ended (its
    // status "expired" becoming "revoked" after the fact). A revoked key stays as it was revoked.
    // The revocation, its announcement to the other processes and the stored response commit
    // together: a key another request stored meanwhile rolls the revocation back.
    const outcome = yield* db(() =>
      inTransaction(platform.pool, async (client) => {
        const revoked = await client.query<{ environment: Environment; expired: boolean; changed: boolean }>(
          `with target as (
             select key_id, environment, revoked_at is null and coalesce(expires_at <= now(), false) as expired,
                    revoked_at is null as active
               from platform.api_keys where tenant_id = $1 and key_id = $2
           ), revoked as (
             update platform.api_keys k set revoked_at = coalesce(k.revoked_at, now())
               from target t where k.tenant_id = $1 and k.key_id = t.key_id and not t.expired
           )
           select environment, expired, active and not expired as changed from target`,
          [caller.tenant_id, key_id],
        )
        const found = revoked.rows[0]
        if (found === undefined) return "missing" as const
        if (found.expired) return "expired" as const
        const row = await getKey(client, caller.tenant_id, found.environment, key_id)
        if (row === undefined) return "missing" as const
        const view = toKeyView(row)
        if (ticket !== undefined) await storeResponse(client, storedResponse(ticket, 200, view))
        if (found.changed) await announceKeyChange(client, { key_id })
        return view
      }),
    )
    platform.keys.forget(key_id)
    if (outcome === "missing") return yield* notFound("api_key", key_id, "key_id")
    if (outcome === "expired") {
      return yield* conflict(
        "api_key_already_expired",
        `API key ${key_id} expired at the end of its rotation's grace period; an expired key is not revoked (it no longer works).`,
        "key_id",
      )
    }
    return outcome
  })

export const KeysHandlers = HttpApiBuilder.group(PlatformApi, "apiKeys", (handlers) =>
  Effect.succeed(
    handlers
      .handle("create", ({ payload }) => respond(createKey(payload)))
      .handle("list", ({ query }) =>
        respond(
          Effect.gen(function* () {
            const caller = yield* CurrentCaller
            const { pool } = yield* Platform
            const limit = yield* parseLimit(query.limit)
            // An empty cursor is the first page, as in every list.
            const starting_after = query.starting_after === "" ? undefined : query.starting_after
            const page = yield* db(() => listKeys(pool, caller.tenant_id, { starting_after, limit }))
            if (page !== undefined) return page
            return yield* invalidCursor(starting_after ?? "")
          }),
        ),
      )
      .handle("rotate", ({ params, payload }) => respond(rotateKey(params.key_id, payload)))
      .handle("revoke", ({ params }) =>
        respond(
          Effect.gen(function* () {
            const caller = yield* CurrentCaller
            return yield* idempotent(caller, `keys.revoke.${params.key_id}`, {}, (ticket) =>
              revokeKey(params.key_id, ticket),
            )
          }),
        ),
      ),
  ),
)
