/**
 * Deposits into the tenant's custody wallets (`GET /api/v2/deposits`): what the deposit watchers
 * (src/deposits) saw and credited, newest first, optionally of one wallet.
 */
import { Effect } from "effect"
import { HttpApiBuilder } from "effect/http-api"
import { listDeposits } from "../../deposits/list.ts"
import { Platform } from "../../platform/service.ts"
import { CurrentCaller, PlatformApi } from "../api.ts"
import { db, listCursor, parseLimit, respond } from "./common.ts"
import { callerWallet } from "./wallets.ts"

const list = (query: {
  readonly limit?: string | undefined
  readonly starting_after?: string | undefined
  readonly wallet_id?: string | undefined
}) =>
  Effect.gen(function* () {
    const caller = yield* CurrentCaller
    const { pool } = yield* Platform
    const limit = yield* parseLimit(query.limit)
    if (query.wallet_id !== undefined) yield* callerWallet(caller, query.wallet_id)
    const starting_after = yield* listCursor(pool, "deposits", caller, query.starting_after)
    return yield* db(() =>
      listDeposits(pool, caller.tenant_id, caller.environment, {
        wallet_id: query.wallet_id,
        starting_after,
        limit,
      }),
    )
  })

export const DepositsHandlers = HttpApiBuilder.group(PlatformApi, "deposits", (handlers) =>
  Effect.succeed(handlers.handle("list", ({ query }) => respond(list(query)))),
)
