/**
 * Social identities: link an identifier (phone, e-mail, handle) to a wallet, list, get, unlink.
 * An identifier links to one wallet at a time per tenant and environment. Linking completes the
 * payments that were waiting for the identifier before it answers.
 */
import { Effect, Result } from "effect"
import { HttpApiBuilder } from "effect/http-api"
import {
  type IdentityKind,
  identityKinds,
  normaliseIdentifier,
} from "../../../domain/platform/identifiers.ts"
import { toPage } from "../../db/page.ts"
import type { Caller } from "../../platform/credentials.ts"
import { inTransaction, storeResponse } from "../../platform/idempotency.ts"
import { idPrefixes, newId } from "../../platform/ids.ts"
import { lockLedgerForPartyChange } from "../../platform/payments.ts"
import { Platform } from "../../platform/service.ts"
import { settleWaitingPayments } from "../../platform/settlement.ts"
import { CurrentCaller, PlatformApi } from "../api.ts"
import { ApiError, badRequest, conflict, notFound } from "../errors.ts"
import { idempotent, storedResponse } from "../idempotency.ts"
import { db, dbUnique, listCursor, parseLimit, respond } from "./common.ts"
import { callerWallet } from "./wallets.ts"

interface IdentityRow {
  identity_id: string
  wallet_id: string
  kind: IdentityKind
  value: string
  linked_at: Date
  unlinked_at: Date | null
}

const toIdentity = (row: IdentityRow) => ({
  identity_id: row.identity_id,
  wallet_id: row.wallet_id,
  kind: row.kind,
  value: row.value,
  status: row.unlinked_at === null ? ("linked" as const) : ("unlinked" as const),
  linked_at: row.linked_at.toISOString(),
  unlinked_at: row.unlinked_at?.toISOString() ?? null,
})

const columns = "identity_id, wallet_id, kind, value, linked_at, unlinked_at"

const link = (payload: { wallet_id: string; kind: string; value: string }) =>
  Effect.gen(function* () {
    const caller = yield* CurrentCaller
    const platform = yield* Platform
    if (!(identityKinds as ReadonlyArray<string>).includes(payload.kind)) {
      return yield* badRequest("invalid_kind", `kind must be one of ${identityKinds.join(", ")}.`, "kind")
    }
    const kind = payload.kind as IdentityKind
    const value = normaliseIdentifier(kind, payload.value)
    if (Result.isFailure(value)) return yield* badRequest(`invalid_${kind}`, value.failure.message, "value")
    yield* callerWallet(caller, payload.wallet_id)
    const identity = yield* idempotent(caller, "identities.link", payload, (ticket) =>
      dbUnique(
        () =>
          inTransaction(platform.pool, async (client) => {
            // Its list position from the tenant's counter, whose row stays locked until the link
            // commits: positions follow commit order, so a client paging on from the last identity
            // it listed never misses one committed later (ids are made before their commit).
            const inserted = await client.query<IdentityRow>(
              `with position as (
                 update platform.tenant_environments set next_identity_position = next_identity_position + 1
                  where tenant_id = $2 and environment = $3
                 returning next_identity_position - 1 as list_position)
               insert into platform.identities (identity_id, tenant_id, environment, kind, value, wallet_id, linked_at, list_position)
               select $1, $2, $3, $4, $5, $6, now(), list_position from position
               returning ${columns}`,
              [
                newId(idPrefixes.identity),
                caller.tenant_id,
                caller.environment,
                kind,
                value.success,
                payload.wallet_id,
              ],
            )
            const row = inserted.rows[0]
            if (row === undefined) throw new Error("identity insert returned nothing")
            const body = toIdentity(row)
            await platform.enqueue(client, [
              {
                tenant_id: caller.tenant_id,
                environment: caller.environment,
                event_type: "identity.linked",
                data: body,
                created_at: row.linked_at,
              },
            ])
            if (ticket !== undefined) await storeResponse(client, storedResponse(ticket, 201, body))
            return body
          }),
        () =>
          conflict(
            "identity_already_linked",
            "This identifier is linked to a wallet already; unlink it first.",
            "value",
          ),
      ),
    )
    if ("identity_id" in identity) yield* settle(caller, identity.value, identity.wallet_id)
    return identity
  }).pipe(
    Effect.catchIf(
      (error): error is ApiError => error instanceof ApiError && error.code === "identity_already_linked",
      (error) => alreadyLinked(payload, error),
    ),
  )

/** The 409 names the identity that holds the identifier, and says when it is the same wallet's. */
const alreadyLinked = (payload: { wallet_id: string; kind: string; value: string }, error: ApiError) =>
  Effect.gen(function* () {
    const caller = yield* CurrentCaller
    const { pool } = yield* Platform
    const value = normaliseIdentifier(payload.kind as IdentityKind, payload.value)
    const holder = Result.isFailure(value)
      ? undefined
      : (yield* db(() =>
          pool.query<{ identity_id: string; wallet_id: string }>(
            `select identity_id, wallet_id from platform.identities
              where tenant_id = $1 and environment = $2 and value = $3 and unlinked_at is null`,
            [caller.tenant_id, caller.environment, value.success],
          ),
        )).rows[0]
    if (holder === undefined) return yield* error
    return yield* conflict(
      "identity_already_linked",
      holder.wallet_id === payload.wallet_id
        ? `This identifier is linked to this wallet already (identity ${holder.identity_id}); nothing to do.`
        : `This identifier is linked to wallet ${holder.wallet_id} (identity ${holder.identity_id}); unlink it first.`,
      "value",
    )
  })

/** Completes waiting payments; a failure here is logged and left to the settlement sweeper. */
const settle = (caller: Caller, value: string, wallet_id: string) =>
  Effect.gen(function* () {
    const platform = yield* Platform
    yield* settleWaitingPayments(platform.pool, platform.writer, caller, value, wallet_id).pipe(
      Effect.catchCause((cause) =>
        Effect.logWarning("settlement after link failed; the sweeper retries", cause),
      ),
    )
  })

const findIdentity = (caller: Caller, identity_id: string) =>
  Effect.gen(function* () {
    const { pool } = yield* Platform
    const found = yield* db(() =>
      pool.query<IdentityRow>(
        `select ${columns} from platform.identities where tenant_id = $1 and environment = $2 and identity_id = $3`,
        [caller.tenant_id, caller.environment, identity_id],
      ),
    )
    const row = found.rows[0]
    if (row === undefined) return yield* notFound("identity", identity_id, "identity_id")
    return row
  })

const unlink = (identity_id: string) =>
  Effect.gen(function* () {
    const caller = yield* CurrentCaller
    const { pool } = yield* Platform
    // Under the ledger's lock: a payment to this link not committed yet sees the unlink and is
    // planned again, or commits first (see lockLedgerForPartyChange).
    const updated = yield* db(() =>
      inTransaction(pool, async (client) => {
        await lockLedgerForPartyChange(client, caller.tenant_id, caller.environment)
        return await client.query<IdentityRow>(
          `update platform.identities set unlinked_at = now()
            where tenant_id = $1 and environment = $2 and identity_id = $3 and unlinked_at is null
            returning ${columns}`,
          [caller.tenant_id, caller.environment, identity_id],
        )
      }),
    )
    // Unlinking twice is not an error: the identity is unlinked either way.
    return toIdentity(updated.rows[0] ?? (yield* findIdentity(caller, identity_id)))
  })

const list = (query: {
  limit?: string | undefined
  starting_after?: string | undefined
  wallet_id?: string | undefined
}) =>
  Effect.gen(function* () {
    const caller = yield* CurrentCaller
    const { pool } = yield* Platform
    const limit = yield* parseLimit(query.limit)
    if (query.wallet_id !== undefined) yield* callerWallet(caller, query.wallet_id)
    const starting_after = yield* listCursor(pool, "identities", caller, query.starting_after)
    const found = yield* db(() =>
      pool.query<IdentityRow>(
        `select ${columns} from platform.identities
          where tenant_id = $1 and environment = $2 and ($3::text is null or wallet_id = $3)
            and ($4::text is null or list_position > (
                  select list_position from platform.identities
                   where tenant_id = $1 and environment = $2 and identity_id = $4))
          order by list_position limit $5`,
        [caller.tenant_id, caller.environment, query.wallet_id ?? null, starting_after ?? null, limit + 1],
      ),
    )
    return toPage(found.rows, limit, toIdentity, (identity) => identity.identity_id)
  })

export const IdentitiesHandlers = HttpApiBuilder.group(PlatformApi, "identities", (handlers) =>
  Effect.succeed(
    handlers
      .handle("link", ({ payload }) => respond(link(payload)))
      .handle("list", ({ query }) => respond(list(query)))
      .handle("get", ({ params }) =>
        respond(
          Effect.gen(function* () {
            return toIdentity(yield* findIdentity(yield* CurrentCaller, params.identity_id))
          }),
        ),
      )
      .handle("unlink", ({ params }) => respond(unlink(params.identity_id))),
  ),
)
