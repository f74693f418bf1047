/**
 * Serves PlatformApi over HTTP with @effect/platform-node: OpenAPI at /openapi.json, an interactive
 * reference at /docs, the request middleware on every route. Needs the Platform and Database
 * services.
 */
import { createServer } from "node:http"
import { NodeHttpServer } from "@effect/platform-node"
import { Effect, Layer } from "effect"
import { HttpRouter } from "effect/http"
import { HttpApiBuilder, HttpApiScalar } from "effect/http-api"
import { Database } from "../ports/database.ts"
import { PlatformApi, type Unhealthy } from "./api.ts"
import { AuthenticationLive } from "./auth.ts"
import { ChainsHandlers } from "./handlers/chains.ts"
import { DepositsHandlers } from "./handlers/deposits.ts"
import { IdentitiesHandlers } from "./handlers/identities.ts"
import { PaymentsHandlers } from "./handlers/payments.ts"
import { ReconciliationHandlers } from "./handlers/reconciliation.ts"
import { KeysHandlers, RegistrationHandlers, TenantHandlers } from "./handlers/tenants.ts"
import { TransfersHandlers } from "./handlers/transfers.ts"
import { WalletsHandlers } from "./handlers/wallets.ts"
import { SandboxHandlers, WebhooksHandlers } from "./handlers/webhooks.ts"
import { RequestMiddleware } from "./request.ts"

const health_check_timeout_ms = 2_000

const checkHealth = Effect.gen(function* () {
  const { pool } = yield* Database
  yield* Effect.tryPromise(() => pool.query("select 1")).pipe(
    Effect.timeout(health_check_timeout_ms),
    Effect.mapError((error): typeof Unhealthy.Type => ({ status: "unhealthy", database: String(error) })),
  )
  return { status: "healthy" as const }
})

const SystemHandlers = HttpApiBuilder.group(PlatformApi, "system", (handlers) =>
  Effect.succeed(handlers.handle("health", () => checkHealth).handle("apiHealth", () => checkHealth)),
)

const Handlers = Layer.mergeAll(
  SystemHandlers,
  RegistrationHandlers,
  TenantHandlers,
  KeysHandlers,
  WalletsHandlers,
  ChainsHandlers,
  SandboxHandlers,
  IdentitiesHandlers,
  PaymentsHandlers,
  TransfersHandlers,
  DepositsHandlers,
  ReconciliationHandlers,
  WebhooksHandlers,
)

const Routes = Layer.mergeAll(
  HttpApiBuilder.layer(PlatformApi, { openapiPath: "/openapi.json" }).pipe(
    Layer.provide(Handlers),
    Layer.provide(AuthenticationLive),
  ),
  HttpApiScalar.layer(PlatformApi, { path: "/docs" }),
  RequestMiddleware,
)

/** The HTTP server on `port` (0 picks a free one). */
export const HttpServerLive = (port: number) =>
  HttpRouter.serve(Routes, { disableLogger: true }).pipe(
    Layer.provide(NodeHttpServer.layer(createServer, { port, host: "0.0.0.0" })),
  )
