/**
 * Webhook endpoints, their deliveries, redelivery, and the sandbox's simulated events. Storage and
 * delivery live in src/webhooks; this validates input and scopes everything to the caller.
 */
import { Context, Effect } from "effect"
import { HttpApiBuilder } from "effect/http-api"
import {
  isWebhookEventType,
  type WebhookEventType,
  webhookEventTypes,
} from "../../../domain/webhooks/events.ts"
import type { Caller } from "../../platform/credentials.ts"
import { inTransaction, storeResponse } from "../../platform/idempotency.ts"
import { Platform } from "../../platform/service.ts"
import { checkWebhookUrl } from "../../webhooks/endpoint-url.ts"
import type { WebhookSecretBox } from "../../webhooks/secrets.ts"
import { simulateEvent } from "../../webhooks/simulate.ts"
import {
  createWebhook,
  deleteWebhook,
  getDelivery,
  getWebhook,
  listDeliveries,
  listWebhooks,
  toPublicWebhook,
  updateWebhook,
  type WebhookDelivery,
  WebhookEndpointsLimit,
} from "../../webhooks/store.ts"
import { CurrentCaller, PlatformApi } from "../api.ts"
import { badRequest, conflict, notFound, unprocessable } from "../errors.ts"
import { type IdempotencyTicket, idempotent, StoredResponseSealer, storedResponse } from "../idempotency.ts"
import { textLengths } from "../limits.ts"
import { characterCount, db, listCursor, longerThan, parseLimit, requireSandbox, respond } from "./common.ts"
import { faucetResponse } from "./wallets.ts"

/** Seals the endpoints' signing secrets (built from the KEK in the composition root). */
export class WebhookSecrets extends Context.Service<WebhookSecrets, WebhookSecretBox>()(
  "platform/http/WebhookSecrets",
) {}

const scopeOf = (caller: Caller) => ({ tenant_id: caller.tenant_id, environment: caller.environment })

/** The URL to store (normalised), or 400 `invalid_url`. */
const checkUrl = (caller: Caller, url: string) => {
  const check = checkWebhookUrl(url, caller.environment)
  return check.ok
    ? Effect.succeed(check.url)
    : Effect.fail(badRequest("invalid_url", `url: ${check.problem}.`, "url"))
}

const checkEvents = (events: ReadonlyArray<string>) => {
  const unknown = events.find((event) => !isWebhookEventType(event))
  if (unknown !== undefined || events.length === 0) {
    return Effect.fail(
      badRequest(
        "invalid_events",
        `events must list one or more of ${webhookEventTypes.join(", ")}${unknown === undefined ? "" : `; got ${JSON.stringify(unknown)}`}.`,
        "events",
      ),
    )
  }
  return Effect.succeed([...new Set(events)] as ReadonlyArray<WebhookEventType>)
}

const checkSecret = (secret: string) =>
  characterCount(secret) >= textLengths.webhook_secret.min &&
  !longerThan(secret, textLengths.webhook_secret.max) &&
  !/\s/.test(secret)
    ? Effect.void
    : Effect.fail(
        badRequest(
          "invalid_secret",
          `secret must be ${textLengths.webhook_secret.min} to ${textLengths.webhook_secret.max} characters without spaces.`,
          "secret",
        ),
      )

const checkDescription = (description: string | null | undefined) =>
  description === undefined ||
  description === null ||
  !longerThan(description, textLengths.webhook_description.max)
    ? Effect.void
    : Effect.fail(
        badRequest(
          "invalid_description",
          `description is at most ${textLengths.webhook_description.max} characters.`,
          "description",
        ),
      )

const deliveryView = (delivery: WebhookDelivery) => ({
  delivery_id: delivery.delivery_id,
  event_id: delivery.event_id,
  event_type: delivery.event_type,
  webhook_id: delivery.webhook_id,
  status: delivery.status,
  attempt_count: delivery.attempt_count,
  next_attempt_at: delivery.next_attempt_at?.toISOString() ?? null,
  created_at: delivery.created_at.toISOString(),
  attempts: delivery.attempts.map((attempt) => ({
    attempt: attempt.attempt,
    started_at: attempt.started_at.toISOString(),
    latency_ms: attempt.latency_ms,
    response_status: attempt.response_status,
    response_excerpt: attempt.response_excerpt,
    error: attempt.error,
  })),
})

const create = (payload: {
  url: string
  events: ReadonlyArray<string>
  secret: string
  description?: string | undefined
}) =>
  Effect.gen(function* () {
    const caller = yield* CurrentCaller
    const { pool } = yield* Platform
    const box = yield* WebhookSecrets
    // The body holds the secret: its idempotency fingerprint is keyed, not a plain digest.
    const sealer = yield* StoredResponseSealer
    const url = yield* checkUrl(caller, payload.url)
    const events = yield* checkEvents(payload.events)
    yield* checkSecret(payload.secret)
    yield* checkDescription(payload.description)
    return yield* idempotent(
      caller,
      "webhooks.create",
      payload,
      (ticket) =>
        Effect.tryPromise({
          try: () =>
            inTransaction(pool, async (client) => {
              const webhook = await createWebhook(
                client,
                scopeOf(caller),
                { url, events, secret: payload.secret, description: payload.description ?? null },
                box,
              )
              const body = toPublicWebhook(webhook)
              if (ticket !== undefined) await storeResponse(client, storedResponse(ticket, 201, body))
              return body
            }),
          catch: (error) => error,
        }).pipe(
          Effect.catch((error) =>
            error instanceof WebhookEndpointsLimit
              ? Effect.fail(
                  unprocessable(
                    "webhook_endpoints_limit",
                    `This environment already has ${error.endpoints_max} webhook endpoints, the most a tenant may have: delete one, or subscribe an existing one to more events.`,
                  ),
                )
              : Effect.die(error),
          ),
        ),
      { sealer, response_carries_api_key: false },
    )
  })

const update = (
  webhook_id: string,
  payload: {
    url?: string | undefined
    events?: ReadonlyArray<string> | undefined
    secret?: string | undefined
    description?: string | null | undefined
    enabled?: boolean | undefined
  },
) =>
  Effect.gen(function* () {
    const caller = yield* CurrentCaller
    const { pool } = yield* Platform
    const box = yield* WebhookSecrets
    // Another tenant's endpoint is not found whatever the body says: ownership is settled first.
    const owned = yield* db(() => getWebhook(pool, scopeOf(caller), webhook_id))
    if (owned === undefined) return yield* notFound("webhook", webhook_id, "webhook_id")
    const url = payload.url === undefined ? undefined : yield* checkUrl(caller, payload.url)
    const events = payload.events === undefined ? undefined : yield* checkEvents(payload.events)
    if (payload.secret !== undefined) yield* checkSecret(payload.secret)
    yield* checkDescription(payload.description)
    const updated = yield* db(() =>
      updateWebhook(
        pool,
        scopeOf(caller),
        webhook_id,
        {
          ...(url === undefined ? {} : { url }),
          ...(events === undefined ? {} : { events }),
          ...(payload.secret === undefined ? {} : { secret: payload.secret }),
          ...(payload.description === undefined ? {} : { description: payload.description }),
          ...(payload.enabled === undefined ? {} : { enabled: payload.enabled }),
        },
        box,
      ),
    )
    if (updated === undefined) return yield* notFound("webhook", webhook_id, "webhook_id")
    return toPublicWebhook(updated)
  })

/** A disabled endpoint is sent nothing, on request neither: enable it first (PATCH enabled: true). */
const disabled = (webhook_id: string) =>
  conflict(
    "webhook_disabled",
    `Webhook ${webhook_id} is disabled; enable it (PATCH {"enabled": true}) before sending it events.`,
    "webhook_id",
  )

/**
 * Sends a sample event. The event and the stored response commit together: the same
 * Idempotency-Key sent to two processes at once makes one event, and both answers name it.
 */
const simulate = (
  payload: { event_type: string; webhook_id?: string | undefined },
  ticket: IdempotencyTicket | undefined,
) =>
  Effect.gen(function* () {
    const caller = yield* CurrentCaller
    const { pool } = yield* Platform
    yield* requireSandbox(caller)
    if (!isWebhookEventType(payload.event_type)) {
      return yield* badRequest(
        "invalid_event_type",
        `event_type must be one of ${webhookEventTypes.join(", ")}.`,
        "event_type",
      )
    }
    const event_type = payload.event_type
    if (payload.webhook_id !== undefined) {
      const target = yield* db(() => getWebhook(pool, scopeOf(caller), payload.webhook_id as string))
      if (target === undefined) return yield* notFound("webhook", payload.webhook_id, "webhook_id")
      if (!target.enabled) return yield* disabled(payload.webhook_id)
    }
    const sent = yield* db(() =>
      inTransaction(pool, async (client) => {
        const simulated = await simulateEvent(client, scopeOf(caller), {
          event_type,
          ...(payload.webhook_id === undefined ? {} : { webhook_id: payload.webhook_id }),
        })
        if (simulated === undefined) return undefined
        const body = { event_id: simulated.event_id, event_type }
        if (ticket !== undefined) await storeResponse(client, storedResponse(ticket, 202, body))
        return body
      }),
    )
    if (sent === undefined) return yield* notFound("webhook", payload.webhook_id ?? "", "webhook_id")
    return sent
  })

export const WebhooksHandlers = HttpApiBuilder.group(PlatformApi, "webhooks", (handlers) =>
  Effect.succeed(
    handlers
      .handle("create", ({ payload }) => respond(create(payload)))
      .handle("list", ({ query }) =>
        respond(
          Effect.gen(function* () {
            const caller = yield* CurrentCaller
            const { pool } = yield* Platform
            const limit = yield* parseLimit(query.limit)
            const starting_after = yield* listCursor(pool, "webhooks", caller, query.starting_after)
            const page = yield* db(() =>
              listWebhooks(pool, scopeOf(caller), {
                limit,
                ...(starting_after === undefined ? {} : { starting_after }),
              }),
            )
            return { ...page, data: page.data.map((webhook) => toPublicWebhook(webhook)) }
          }),
        ),
      )
      .handle("get", ({ params }) =>
        respond(
          Effect.gen(function* () {
            const caller = yield* CurrentCaller
            const { pool } = yield* Platform
            const webhook = yield* db(() => getWebhook(pool, scopeOf(caller), params.webhook_id))
            if (webhook === undefined) return yield* notFound("webhook", params.webhook_id, "webhook_id")
            return toPublicWebhook(webhook)
          }),
        ),
      )
      .handle("update", ({ params, payload }) => respond(update(params.webhook_id, payload)))
      .handle("delete", ({ params }) =>
        respond(
          Effect.gen(function* () {
            const caller = yield* CurrentCaller
            const { pool } = yield* Platform
            const deleted = yield* db(() => deleteWebhook(pool, scopeOf(caller), params.webhook_id))
            if (!deleted) return yield* notFound("webhook", params.webhook_id, "webhook_id")
            return { webhook_id: params.webhook_id, deleted: true as const }
          }),
        ),
      )
      .handle("deliveries", ({ params, query }) =>
        respond(
          Effect.gen(function* () {
            const caller = yield* CurrentCaller
            const { pool } = yield* Platform
            const limit = yield* parseLimit(query.limit)
            const owned = yield* db(() => getWebhook(pool, scopeOf(caller), params.webhook_id))
            if (owned === undefined) return yield* notFound("webhook", params.webhook_id, "webhook_id")
            const starting_after = yield* listCursor(
              pool,
              "webhook_deliveries",
              caller,
              query.starting_after,
              {
                column: "webhook_id",
                id: params.webhook_id,
              },
            )
            const page = yield* db(() =>
              listDeliveries(pool, scopeOf(caller), params.webhook_id, {
                limit,
                ...(starting_after === undefined ? {} : { starting_after }),
              }),
            )
            if (page === undefined) return yield* notFound("webhook", params.webhook_id, "webhook_id")
            return { ...page, data: page.data.map(deliveryView) }
          }),
        ),
      )
      .handle("redeliver", ({ params }) =>
        respond(
          Effect.gen(function* () {
            const caller = yield* CurrentCaller
            const platform = yield* Platform
            // The endpoint is checked inside `idempotent`: a retry of a redelivery made is answered
            // with its stored response, even once the endpoint was disabled or deleted since.
            return yield* idempotent(
              caller,
              `webhooks.redeliver.${params.webhook_id}.${params.delivery_id}`,
              {},
              (ticket) =>
                Effect.gen(function* () {
                  const owned = yield* db(() => getWebhook(platform.pool, scopeOf(caller), params.webhook_id))
                  if (owned === undefined) return yield* notFound("webhook", params.webhook_id, "webhook_id")
                  if (!owned.enabled) return yield* disabled(params.webhook_id)
                  const existing = yield* db(() =>
                    getDelivery(platform.pool, scopeOf(caller), params.delivery_id),
                  )
                  if (existing === undefined || existing.webhook_id !== params.webhook_id) {
                    return yield* notFound("delivery", params.delivery_id, "delivery_id")
                  }
                  // The redelivery and its stored response commit together: a key another request
                  // stores meanwhile rolls the redelivery back, and a crash in between leaves neither.
                  const view = yield* db(() =>
                    inTransaction(platform.pool, async (client) => {
                      const delivery = await platform.redeliver(scopeOf(caller), params.delivery_id, client)
                      if (delivery === undefined) return undefined
                      const body = deliveryView(delivery)
                      if (ticket !== undefined) await storeResponse(client, storedResponse(ticket, 202, body))
                      return body
                    }),
                  )
                  if (view === undefined)
                    return yield* notFound("delivery", params.delivery_id, "delivery_id")
                  return view
                }),
            )
          }),
        ),
      ),
  ),
)

export const SandboxHandlers = HttpApiBuilder.group(PlatformApi, "sandbox", (handlers) =>
  Effect.succeed(
    handlers
      .handle("faucet", ({ payload }) => respond(faucetResponse(payload)))
      .handle("simulateWebhook", ({ payload }) =>
        respond(
          Effect.gen(function* () {
            const caller = yield* CurrentCaller
            return yield* idempotent(caller, "webhooks.simulate", payload, (ticket) =>
              simulate(payload, ticket),
            )
          }),
        ),
      ),
  ),
)
