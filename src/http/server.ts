/**
 * Serves PlatformApi over HTTP with @effect/platform-node: OpenAPI at /openapi.json, an interactive
 * reference at /docs.
 */
import { createServer } from "node:http"
import { NodeHttpServer } from "@effect/platform-node"
import { Effect, Layer } from "effect"
import { HttpRouter } from "effect/http"
import { HttpApiBuilder, HttpApiScalar } from "effect/http-api"
import { Database } from "../ports/database.ts"
import { PlatformApi, Unhealthy } from "./api.ts"

const health_check_timeout_ms = 2_000

const checkHealth = Effect.gen(function* () {
  const { pool } = yield* Database
  yield* Effect.tryPromise(() => pool.query("select 1")).pipe(
    Effect.timeout(health_check_timeout_ms),
    Effect.mapError((error) => new Unhealthy({ status: "unhealthy", database: String(error) })),
  )
  return { status: "healthy" as const }
})

const SystemHandlers = HttpApiBuilder.group(PlatformApi, "system", (handlers) =>
  Effect.succeed(handlers.handle("health", () => checkHealth).handle("apiHealth", () => checkHealth)),
)

const Routes = Layer.mergeAll(
  HttpApiBuilder.layer(PlatformApi, { openapiPath: "/openapi.json" }).pipe(Layer.provide(SystemHandlers)),
  HttpApiScalar.layer(PlatformApi, { path: "/docs" }),
)

/** The HTTP server on `port` (0 picks a free one). */
export const HttpServerLive = (port: number) =>
  HttpRouter.serve(Routes).pipe(Layer.provide(NodeHttpServer.layer(createServer, { port, host: "0.0.0.0" })))
