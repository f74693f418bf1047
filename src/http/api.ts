/**
 * The platform's HTTP API definition (schemas only; handlers live in src/http/server.ts). It grows
 * with the Platform API issue; for now it serves the health check of the seed.
 */
import { Schema } from "effect"
import { HttpApi, HttpApiEndpoint, HttpApiGroup, OpenApi } from "effect/http-api"

export const Healthy = Schema.Struct({ status: Schema.Literal("healthy") })

export class Unhealthy extends Schema.TaggedError<Unhealthy>()(
  "Unhealthy",
  { status: Schema.Literal("unhealthy"), database: Schema.String },
  { httpApiStatus: 503 },
) {}

export class SystemApi extends HttpApiGroup.make("system", { topLevel: true })
  .add(HttpApiEndpoint.get("health", "/health", { success: Healthy, error: Unhealthy }))
  .add(HttpApiEndpoint.get("apiHealth", "/api/health", { success: Healthy, error: Unhealthy })) {}

export class PlatformApi extends HttpApi.make("platform")
  .add(SystemApi)
  .annotateMerge(OpenApi.annotations({ title: "Multi-chain payments platform", version: "0.1.0" })) {}
