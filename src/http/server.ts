/**
 * Serves PlatformApi over HTTP with @effect/platform-node: OpenAPI at /openapi.json, an interactive
 * reference at /docs, the request middleware on every route. Needs the Platform and Database
 * services.
 */
import { createServer, STATUS_CODES } from "node:http"
import { NodeHttpServer } from "@effect/platform-node"
import { Effect, Layer } from "effect"
import { HttpRouter } from "effect/http"
import { HttpApiBuilder, HttpApiScalar } from "effect/http-api"
import { errorText } from "../error-text.ts"
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
import { newRequestId, RequestMiddleware } from "./request.ts"

const health_check_timeout_ms = 2_000

const checkHealth = Effect.gen(function* () {
  const { pool } = yield* Database
  yield* Effect.tryPromise({ try: () => pool.query("select 1"), catch: (error) => error }).pipe(
    Effect.timeoutOrElse({
      duration: health_check_timeout_ms,
      orElse: () => Effect.fail(new Error(`no answer within ${health_check_timeout_ms} ms`)),
    }),
    Effect.mapError((error): typeof Unhealthy.Type => ({ status: "unhealthy", database: errorText(error) })),
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

/** What Node's HTTP parser refuses before any route runs, by its error code. */
const parserRefusals: Readonly<Record<string, readonly [status: number, code: string, message: string]>> = {
  HPE_HEADER_OVERFLOW: [
    431,
    "headers_too_large",
    "The request line and headers are over 16 KiB together (a very long URL counts).",
  ],
  HPE_CHUNK_EXTENSIONS_OVERFLOW: [413, "body_too_large", "The chunk extensions are too large."],
  ERR_HTTP_REQUEST_TIMEOUT: [408, "request_timeout", "The request did not arrive in time."],
  HPE_INVALID_METHOD: [400, "malformed_request", "The request's method is not one HTTP knows."],
}

/** The deadline of a request's headers, then of the whole request (408 `request_timeout`). */
export const request_headers_timeout_ms = 15_000
export const request_timeout_ms = 30_000

/**
 * A Node HTTP server whose own refusals (headers too large, a request that is not HTTP/1.1) are
 * answered like every other error: the platform's error body and an X-Request-Id, then the
 * connection closed, instead of a bare status line.
 */
const createPlatformServer = () => {
  const server = createServer({
    // A client that trickles its request (slow-loris) holds a connection at most this long, not
    // Node's 60 s for the headers and 300 s for the whole request; the deadlines are checked
    // every 2 s rather than every 30 s.
    headersTimeout: request_headers_timeout_ms,
    requestTimeout: request_timeout_ms,
    connectionsCheckingInterval: 2_000,
  })
  server.on("clientError", (error: Error & { readonly code?: string }, socket) => {
    if (error.code === "ECONNRESET" || !socket.writable) {
      socket.destroy()
      return
    }
    const [status, code, message] = parserRefusals[error.code ?? ""] ?? [
      400,
      "malformed_request",
      "The request is not valid HTTP/1.1.",
    ]
    const request_id = newRequestId()
    const body = JSON.stringify({ error: { type: "invalid_request_error", code, message, request_id } })
    socket.end(
      `HTTP/1.1 ${status} ${STATUS_CODES[status] ?? ""}\r\ncontent-type: application/json\r\n` +
        `content-length: ${Buffer.byteLength(body)}\r\nx-request-id: ${request_id}\r\nconnection: close\r\n\r\n${body}`,
    )
  })
  return server
}

/** The HTTP server on `port` (0 picks a free one). */
export const HttpServerLive = (port: number) =>
  HttpRouter.serve(Routes, { disableLogger: true }).pipe(
    Layer.provide(NodeHttpServer.layer(createPlatformServer, { port, host: "0.0.0.0" })),
  )
