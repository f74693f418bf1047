/**
 * Reconciliation reports (`GET /api/v2/reconciliation`) and an immediate run for the caller
 * (`POST /api/v2/reconciliation/runs`): src/reconciliation/reconciler.ts compares, per chain and
 * token, what the ledger owes with what the tenant's custody addresses hold on chain.
 */
import { Effect } from "effect"
import { HttpApiBuilder } from "effect/http-api"
import { Platform } from "../../platform/service.ts"
import { Chains } from "../../ports/chains.ts"
import { logReport, reconcileTenant, storedReports, toReportView } from "../../reconciliation/reconciler.ts"
import { CurrentCaller, PlatformApi } from "../api.ts"
import { idempotent, storeAfterwards } from "../idempotency.ts"
import { db, respond } from "./common.ts"

const latest = Effect.gen(function* () {
  const caller = yield* CurrentCaller
  const { pool } = yield* Platform
  const reports = yield* db(() => storedReports(pool, caller.tenant_id, caller.environment))
  return { data: reports.map(toReportView) }
})

/** A run changes nothing but the stored reports, so a retry after a lost answer may run again. */
const runNow = Effect.gen(function* () {
  const caller = yield* CurrentCaller
  const { pool } = yield* Platform
  const chains = yield* Chains
  return yield* idempotent(caller, "reconciliation.run", {}, (ticket) =>
    Effect.gen(function* () {
      const reports = yield* db(() => reconcileTenant({ pool, chains }, caller.tenant_id, caller.environment))
      // Logged as the job's reports are: a drift found by a run asked for is an error line too.
      for (const report of reports) yield* logReport(report)
      return yield* latest
    }).pipe(Effect.flatMap(storeAfterwards(ticket, 200))),
  )
})

export const ReconciliationHandlers = HttpApiBuilder.group(PlatformApi, "reconciliation", (handlers) =>
  Effect.succeed(handlers.handle("latest", () => respond(latest)).handle("run", () => respond(runNow))),
)
