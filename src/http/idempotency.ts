/**
 * `Idempotency-Key` on every POST. A retry with the same key and body gets the stored response (with
 * `Idempotent-Replayed: true`); the same key with a different body is a 409. Concurrent duplicates
 * in this process wait for the first and share its outcome. Across processes the stored response,
 * written in the effect's own transaction, keeps the effect single: of two transactions storing one
 * key, the second rolls back and its request is answered from the first's response (a replay, or a
 * 409 for a different request). Ledger commands dedupe in the ledger by the same key. Keys are
 * scoped to the tenant and environment. A handler whose request or response carries a secret
 * passes `Secrets`: its request is fingerprinted with a keyed hash, and a response that carries an
 * API key is stored encrypted, decrypted on replay and replayed for 24 hours only.
 */
import { hash } from "node:crypto"
import { Context, Deferred, Effect, Exit } from "effect"
import { HttpServerRequest, HttpServerResponse } from "effect/http"
import {
  anyRequestOf,
  findStoredResponse,
  IdempotencyKeyTaken,
  inTransaction,
  isSealedBody,
  type ResponseSealer,
  rerun_status,
  type StoredResponse,
  storeResponse,
} from "../platform/idempotency.ts"
import { Platform } from "../platform/service.ts"
import { ApiError } from "./errors.ts"

/** JSON with object keys sorted, so that two spellings of one body fingerprint alike. */
const stableJson = (value: unknown): string => {
  if (Array.isArray(value)) return `[${value.map(stableJson).join(",")}]`
  if (value !== null && typeof value === "object") {
    const entries = Object.entries(value).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))
    return `{${entries.map(([k, v]) => `${JSON.stringify(k)}:${stableJson(v)}`).join(",")}}`
  }
  return JSON.stringify(value) ?? "null"
}

const keyPattern = /^[\x21-\x7e]{1,255}$/

/** Seals the stored responses that carry a secret (built from the KEK in the composition root). */
export class StoredResponseSealer extends Context.Service<StoredResponseSealer, ResponseSealer>()(
  "platform/http/StoredResponseSealer",
) {}

/** What a handler needs to store its response with its effect. */
export interface IdempotencyTicket {
  readonly tenant_id: string
  readonly environment: string
  readonly idempotency_key: string
  readonly fingerprint: string
  /** Present when the response carries a secret: the body is then stored sealed. */
  readonly sealer?: ResponseSealer | undefined
}

/** The row to store for `ticket` answering `status` with `body` (sealed when the ticket says so). */
export const storedResponse = (ticket: IdempotencyTicket, status: number, body: unknown): StoredResponse => ({
  tenant_id: ticket.tenant_id,
  environment: ticket.environment,
  idempotency_key: ticket.idempotency_key,
  fingerprint: ticket.fingerprint,
  response_status: status,
  response_body: ticket.sealer === undefined ? body : ticket.sealer.seal(ticket, body),
})

const reused = new ApiError({
  status: 409,
  type: "idempotency_error",
  code: "idempotency_key_reused",
  message: "This Idempotency-Key was used with a different request; use a new key for a new request.",
  param: "Idempotency-Key",
})

type InFlight = {
  readonly fingerprint: string
  readonly done: Deferred.Deferred<Exit.Exit<unknown, unknown>>
}
const inFlight = new Map<string, InFlight>()

const unreadable = new ApiError({
  status: 500,
  code: "stored_response_unreadable",
  message:
    "This Idempotency-Key's request took effect, but its stored response cannot be decrypted with the platform's current key; it is not replayed. The request id identifies it in our logs.",
  param: "Idempotency-Key",
})

/** The body to answer again: a sealed body opened, or a 500 when the configured key cannot open it. */
const storedBody = (stored: StoredResponse, sealer: ResponseSealer | undefined) =>
  Effect.gen(function* () {
    const body = stored.response_body
    if (!isSealedBody(body)) return body
    const opened = Effect.try({
      try: () => {
        if (sealer === undefined) throw new Error("the operation that found it does not seal responses")
        return sealer.open(stored, body)
      },
      catch: (error) => error,
    })
    return yield* opened.pipe(
      Effect.tapError((error) =>
        Effect.logError("stored response unreadable", String(error)).pipe(
          Effect.annotateLogs({ tenant_id: stored.tenant_id, environment: stored.environment }),
        ),
      ),
      Effect.mapError(() => unreadable),
    )
  })

/**
 * How long a stored response that carries an API key (registration, key creation, rotation) is
 * replayed: long enough for a client that lost the answer to retry, not for ever (whoever holds
 * the calling key and the Idempotency-Key could otherwise read that API key at any time later).
 */
export const sealed_replay_ms = 24 * 3600 * 1000

const replayExpired = (operation: string) =>
  new ApiError({
    status: 409,
    type: "idempotency_error",
    code: "idempotency_key_expired",
    message:
      operation === "tenant.register"
        ? "This Idempotency-Key's registration took effect, but its response carried the tenant's first API key and is replayed for 24 hours only: that key cannot be shown again."
        : "This Idempotency-Key's request took effect, but its response carried an API key and is replayed for 24 hours only: list your API keys (GET /api/v1/api-keys) to see the key it made, and revoke it if its secret was lost.",
    param: "Idempotency-Key",
  })

/**
 * What a handler whose request or response carries a secret passes to `idempotent`: the sealer
 * (from `StoredResponseSealer`) and whether its response carries an API key (registration, key
 * creation, rotation: sealed, replayed for 24 hours) or only its request holds a secret (a
 * webhook's signing secret: the fingerprint is keyed, the response stored as it is).
 */
export interface Secrets {
  readonly sealer: ResponseSealer
  readonly response_carries_api_key: boolean
}

/** The stored response again; the request middleware adds each request's own X-Request-Id. */
const replay = (stored: StoredResponse, operation: string, secrets: Secrets | undefined) =>
  secrets?.response_carries_api_key === true && (stored.age_ms ?? 0) > sealed_replay_ms
    ? Effect.fail(replayExpired(operation))
    : Effect.map(storedBody(stored, secrets?.sealer), (body) =>
        HttpServerResponse.jsonUnsafe(body, {
          status: stored.response_status,
          headers: { "idempotent-replayed": "true" },
        }),
      )

/**
 * Runs `run` at most once per idempotency key of the scope. `run` receives the ticket to store its
 * response with (undefined without a key); a `run` that succeeds without storing its response must
 * be idempotent by itself (a concurrent duplicate runs it again and must get a replay). With
 * `secrets`, the request is fingerprinted with a keyed hash, and a response that carries an API key
 * is stored encrypted and replayed for 24 hours only.
 * @example idempotent({ tenant_id, environment }, "wallets.create", payload, (ticket) => createWallet(..., ticket))
 */
export const idempotent = <A, R>(
  scope: { readonly tenant_id: string; readonly environment: string },
  operation: string,
  payload: unknown,
  run: (ticket: IdempotencyTicket | undefined) => Effect.Effect<A, ApiError, R>,
  secrets?: Secrets,
): Effect.Effect<
  A | HttpServerResponse.HttpServerResponse,
  ApiError,
  R | Platform | HttpServerRequest.HttpServerRequest
> =>
  Effect.gen(function* () {
    const request = yield* HttpServerRequest.HttpServerRequest
    const key = request.headers["idempotency-key"]
    if (key === undefined) return yield* run(undefined)
    if (!keyPattern.test(key)) {
      return yield* new ApiError({
        status: 400,
        code: "invalid_idempotency_key",
        message: "Idempotency-Key must be 1-255 printable ASCII characters without spaces.",
        param: "Idempotency-Key",
      })
    }
    const request_text = `${operation}\n${stableJson(payload)}`
    const sealer = secrets?.sealer
    const fingerprint =
      sealer === undefined ? hash("sha256", request_text, "hex") : sealer.fingerprint(request_text)
    const ticket: IdempotencyTicket = {
      tenant_id: scope.tenant_id,
      environment: scope.environment,
      idempotency_key: key,
      fingerprint,
      sealer: secrets?.response_carries_api_key === true ? sealer : undefined,
    }
    const slot = `${scope.tenant_id}|${scope.environment}|${key}`
    const { pool } = yield* Platform
    // Look up and claim the slot in one synchronous step, before the first wait (the stored-response
    // lookup): a duplicate arriving meanwhile then waits for this request instead of running again.
    const running = inFlight.get(slot)
    if (running !== undefined) {
      if (running.fingerprint !== fingerprint) return yield* reused
      const exit = yield* Deferred.await(running.done)
      // The first stored its answer with its effect: this duplicate is a replay of it, and says so.
      const stored = yield* Effect.promise(() =>
        findStoredResponse(pool, scope.tenant_id, scope.environment, key),
      )
      if (
        stored !== undefined &&
        stored.fingerprint === fingerprint &&
        stored.response_status !== rerun_status
      )
        return yield* replay(stored, operation, secrets)
      // Nothing stored: the first failed (this duplicate shares its error), or its run stores no
      // response and is idempotent itself (the faucet replays in the ledger): run it again, so that
      // this duplicate is answered as the replay it is.
      if (Exit.isSuccess(exit)) return yield* run(ticket)
      return yield* exit as Exit.Exit<A | HttpServerResponse.HttpServerResponse, ApiError>
    }
    const done = Deferred.makeUnsafe<Exit.Exit<unknown, unknown>>()
    inFlight.set(slot, { fingerprint, done })
    const lookup = Effect.promise(() => findStoredResponse(pool, scope.tenant_id, scope.environment, key))
    /** The answer for a key stored already: its replay, or a 409 for another request's key. */
    const answerStored = (
      stored: StoredResponse,
    ): Effect.Effect<A | HttpServerResponse.HttpServerResponse, ApiError, R> =>
      Effect.gen(function* () {
        if (stored.fingerprint !== fingerprint && stored.fingerprint !== anyRequestOf(operation)) {
          // Under another KEK every keyed fingerprint differs: a sealed record this key cannot open
          // is answered as unreadable, not as a different request. A request that seals nothing
          // (a wallet after a key creation's key) is simply another request.
          if (sealer !== undefined && isSealedBody(stored.response_body)) yield* storedBody(stored, sealer)
          return yield* reused
        }
        // The key was taken by a request that answers its retry by running again (the faucet).
        if (stored.response_status === rerun_status) return yield* run(ticket)
        return yield* replay(stored, operation, secrets)
      })
    // Another process may store a response under this key while `run` runs: `storeResponse` then
    // rolls `run`'s transaction back, or `run` meets the other's effect as a conflict (the e-mail
    // just registered). Either way the request is answered from what the other stored.
    const afterRace = (
      fallback: Effect.Effect<never, ApiError>,
    ): Effect.Effect<A | HttpServerResponse.HttpServerResponse, ApiError, R> =>
      Effect.flatMap(lookup, (stored) => (stored === undefined ? fallback : answerStored(stored)))
    const first = Effect.gen(function* () {
      const stored = yield* lookup
      if (stored !== undefined) return yield* answerStored(stored)
      return yield* run(ticket).pipe(
        Effect.catch((error) => (error.status === 409 ? afterRace(Effect.fail(error)) : Effect.fail(error))),
        Effect.catchDefect((defect) =>
          defect instanceof IdempotencyKeyTaken ? afterRace(Effect.die(defect)) : Effect.die(defect),
        ),
      )
    })
    return yield* first.pipe(
      Effect.onExit((exit) =>
        Effect.suspend(() => {
          inFlight.delete(slot)
          return Deferred.succeed(done, exit)
        }),
      ),
    )
  })

/**
 * Stores the response of a request whose effect only observes (a reconciliation run: its report is
 * the state as read, whoever asked), after it took effect: if the process stops in between, the
 * retry runs it again, which changes nothing but the report's time. A key another request stored
 * meanwhile is answered as that request's (a replay, or 409 for another request), never with
 * this one's body. Any effect that changes something stores its response in its own transaction.
 */
export const storeAfterwards =
  (ticket: IdempotencyTicket | undefined, status: number) =>
  <A>(body: A) =>
    ticket === undefined
      ? Effect.succeed(body)
      : Effect.gen(function* () {
          const { pool } = yield* Platform
          // `IdempotencyKeyTaken` goes on as a defect: `idempotent` answers from what the other stored.
          yield* Effect.promise(() =>
            inTransaction(pool, (client) => storeResponse(client, storedResponse(ticket, status, body))),
          )
          return body
        })
