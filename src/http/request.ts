/**
 * The global request middleware: gives every request an id (`X-Request-Id`, echoed when the
 * client sent a sane one), caps bodies at 1 MiB, and turns every failure that escaped a handler
 * (malformed JSON, a body that fails its schema, an unknown route, a defect) into the platform's
 * error body. Defects are logged with the request id and answered 500 without internals.
 */
import { randomBytes } from "node:crypto"
import { ByteSize, Cause, Effect, SchemaAST, SchemaIssue, type Types } from "effect"
import {
  HttpIncomingMessage,
  HttpRouter,
  HttpServerRequest,
  type HttpServerResponse,
  HttpServerResponse as Response,
} from "effect/http"
import { HttpApi, HttpApiError } from "effect/http-api"
import { jsonBodyProblem } from "../../domain/platform/json-body.ts"
import { ProjectionTimeout } from "../ledger/queries.ts"
import { Authentication, PlatformApi } from "./api.ts"
import { ApiError, CurrentRequestId, errorResponse, PendingRefusal } from "./errors.ts"

/** Largest request body accepted. */
export const request_body_bytes_max = 1_048_576

const requestIdPattern = /^[A-Za-z0-9._:-]{8,128}$/

/** Request ids: a random prefix per process and a counter, unique without a random draw each. */
const requestIdPrefix = `req_${randomBytes(6).toString("hex")}`
let requestCounter = 0
export const newRequestId = () => {
  requestCounter += 1
  return `${requestIdPrefix}${requestCounter.toString(16).padStart(12, "0")}`
}

const formatIssues = SchemaIssue.makeFormatterStandardSchemaV1()

const pathOf = (path: ReadonlyArray<PropertyKey | { readonly key: PropertyKey }> | undefined) =>
  path === undefined || path.length === 0
    ? undefined
    : path.map((segment) => String(typeof segment === "object" ? segment.key : segment)).join(".")

/** The error to answer for a failure or defect that no handler turned into a response. */
export const classify = (squashed: unknown): ApiError | undefined => {
  if (squashed instanceof ApiError) return squashed
  if (HttpApiError.HttpApiSchemaError.is(squashed)) {
    if (squashed.kind === "Body" || squashed.kind === "ResponseHeaders") return undefined
    const issues = formatIssues(squashed.cause.issue).issues
    const first = issues[0]
    const param = pathOf(first?.path)
    const where = squashed.kind === "Payload" ? "body" : squashed.kind.toLowerCase()
    if (squashed.kind === "Payload" && param === undefined && /JSON/.test(first?.message ?? "")) {
      return new ApiError({
        status: 400,
        code: "invalid_json",
        message: "The request body is not valid JSON.",
      })
    }
    return new ApiError({
      status: 400,
      code: "invalid_parameter",
      message: `Invalid request ${where}${param === undefined ? "" : ` at ${param}`}: ${first?.message ?? "malformed"}`,
      param,
    })
  }
  const tag = (squashed as { readonly _tag?: unknown } | null)?._tag
  const reason = (
    squashed as { readonly reason?: { readonly _tag?: unknown; readonly reason?: unknown } } | null
  )?.reason
  if (tag === "HttpServerError" && reason?._tag === "RequestParseError") {
    return reason.reason === "BodyTooLarge"
      ? bodyTooLarge()
      : new ApiError({ status: 400, code: "invalid_json", message: "The request body is not valid JSON." })
  }
  if (tag === "RouteNotFound" || (tag === "HttpServerError" && reason?._tag === "RouteNotFound")) {
    return new ApiError({ status: 404, code: "route_not_found", message: "No such endpoint." })
  }
  return undefined
}

const bodyTooLarge = () =>
  new ApiError({
    status: 413,
    code: "body_too_large",
    message: `Request bodies are limited to ${request_body_bytes_max} bytes.`,
  })

const bodyMethods = new Set(["POST", "PUT", "PATCH", "DELETE"])

/** Probes may add a query string (a cache buster): health checks take any. */
const health_paths: ReadonlySet<string> = new Set(["/health", "/api/health"])

/** A route: the API's endpoints, the OpenAPI document and /docs. */
interface Route {
  readonly pattern: RegExp
  readonly method: string
  /** Whether it takes a body. */
  readonly body: boolean
  /**
   * The query parameters it takes (none for most endpoints); undefined where any is let through:
   * health checks, the OpenAPI document and /docs.
   */
  readonly query: ReadonlyArray<string> | undefined
  /** Whether the Authentication middleware guards it. */
  readonly authenticated: boolean
}

const routes: ReadonlyArray<Route> = (() => {
  const found: Array<Route> = [
    { pattern: /^\/openapi\.json\/?$/, method: "GET", body: false, query: undefined, authenticated: false },
    { pattern: /^\/docs\/?$/, method: "GET", body: false, query: undefined, authenticated: false },
  ]
  HttpApi.reflect(PlatformApi, {
    onGroup: () => {},
    onEndpoint: ({ endpoint, middleware }) => {
      const segments = endpoint.path
        .split("/")
        .map((segment) =>
          segment.startsWith(":") ? "[^/]+" : segment.replace(/[.*+?^${}()|[\]\\]/g, "\\$&"),
        )
      found.push({
        // The router ignores a trailing slash (`/api/v1/transactions/` is the list): so do the
        // checks that look routes up here, or that spelling would skip them.
        pattern: new RegExp(`^${segments.join("/")}/?$`),
        method: endpoint.method,
        body: endpoint.payload.size > 0,
        query: health_paths.has(endpoint.path)
          ? undefined
          : endpoint.query !== undefined && SchemaAST.isObjects(endpoint.query.ast)
            ? endpoint.query.ast.propertySignatures.map((property) => String(property.name))
            : [],
        authenticated: (middleware as ReadonlySet<unknown>).has(Authentication),
      })
    },
  })
  return found
})()

/** The methods some route serves at `url`'s path (empty when no route has the path at all). */
export const allowedMethods = (url: string): ReadonlyArray<string> => {
  const path = url.split("?")[0] ?? ""
  const methods = new Set<string>()
  for (const route of routes) if (route.pattern.test(path)) methods.add(route.method)
  return [...methods].sort()
}

/** A route that exists with other methods is 405 with `Allow`, not 404. */
const wrongMethod = (known: ApiError, request: HttpServerRequest.HttpServerRequest): ApiError => {
  if (known.code !== "route_not_found") return known
  const allowed = allowedMethods(request.url)
  if (allowed.length === 0) return known
  // The path takes this very method, yet the router found nothing: a path parameter it would not
  // read (over 100 characters, or broken percent-encoding). Nothing can be there.
  if (allowed.includes(request.method === "HEAD" ? "GET" : request.method)) {
    return new ApiError({
      status: 404,
      code: "route_not_found",
      message:
        "Nothing is at this path: one of its ids is longer than 100 characters or not valid percent-encoding.",
    })
  }
  // HEAD is served wherever GET is.
  const allow = (allowed.includes("GET") ? [...allowed, "HEAD"].sort() : allowed).join(", ")
  return new ApiError({
    status: 405,
    code: "method_not_allowed",
    message: `${request.method} is not served here; this path takes ${allow}.`,
    headers: { allow },
  })
}

const internal = new ApiError({
  status: 500,
  code: "internal_error",
  message: "Something went wrong on our side; the request id identifies it in our logs.",
})

const answer = (
  cause: Cause.Cause<unknown>,
  request: HttpServerRequest.HttpServerRequest,
  request_id: string,
): Effect.Effect<HttpServerResponse.HttpServerResponse> => {
  const known = classify(Cause.squash(cause))
  if (known !== undefined) return Effect.succeed(errorResponse(wrongMethod(known, request), request_id))
  if (Cause.hasInterruptsOnly(cause)) return Effect.failCause(cause as Cause.Cause<never>)
  const squashed = Cause.squash(cause)
  if (squashed instanceof ProjectionTimeout) {
    return Effect.logWarning("read model behind its ledger", {
      stream_id: squashed.stream_id,
      min_version: squashed.min_version,
      reached_version: squashed.reached_version,
    }).pipe(Effect.annotateLogs({ request_id }), Effect.as(errorResponse(readModelBehind, request_id)))
  }
  const unreachable = databaseUnreachable(squashed)
  return Effect.logError(
    unreachable === undefined ? "unhandled request failure" : "database unavailable",
    unreachable ?? Cause.pretty(cause),
  ).pipe(
    Effect.annotateLogs({ request_id }),
    Effect.as(errorResponse(unreachable === undefined ? internal : databaseUnavailable, request_id)),
  )
}

/**
 * A read that must see the ledger's latest commands found the read model behind them past its wait:
 * the projection reads only what every open transaction of the database has committed before, so a
 * long transaction anywhere holds it back until it ends.
 */
const readModelBehind = new ApiError({
  status: 503,
  code: "read_model_behind",
  message:
    "The balances are still being brought up to date with the ledger's latest entries (a long-running database transaction holds them back). Retry shortly.",
  headers: { "retry-after": "1" },
})

const databaseUnavailable = new ApiError({
  status: 503,
  code: "database_unavailable",
  message:
    "The platform cannot reach its database just now. Retry shortly with the same Idempotency-Key: the retry is then safe whether or not this request took effect.",
  headers: { "retry-after": "1" },
})

/** Node's errors of a connection that failed or broke; PostgreSQL's connection and shutdown codes. */
const connection_errnos = new Set([
  "ECONNREFUSED",
  "ECONNRESET",
  "ENOENT",
  "EPIPE",
  "ETIMEDOUT",
  "EHOSTUNREACH",
])
const isConnectionSqlState = (code: string) => code.startsWith("08") || /^57P0[123]$/.test(code)

/**
 * An error of an HTTP client (fetch, viem, axios): a chain's node out of reach, never the database,
 * which is reached over its own protocol. Its causes (a refused connection) are not looked into.
 */
const isHttpClientError = (error: Error): boolean =>
  (error instanceof TypeError && error.message === "fetch failed") ||
  "shortMessage" in error ||
  (error as { readonly isAxiosError?: unknown }).isAxiosError === true

/**
 * What failed when `error` (or an error it wraps) is the database being out of reach; undefined
 * for anything else. Such a request is answered 503 rather than as a defect of ours (500).
 */
export const databaseUnreachable = (error: unknown, depth = 0): string | undefined => {
  if (!(error instanceof Error) || depth > 3 || isHttpClientError(error)) return undefined
  const code = (error as { readonly code?: unknown }).code
  if (
    (typeof code === "string" && (connection_errnos.has(code) || isConnectionSqlState(code))) ||
    // node-postgres's own deadlines: a statement or a connection that waited past
    // DATABASE_QUERY_TIMEOUT_SECONDS (a server that stopped answering).
    /Connection terminated|not queryable|Client was closed|Query read timeout|timeout exceeded when trying to connect/.test(
      error.message,
    )
  ) {
    return error.message
  }
  return databaseUnreachable(error.cause, depth + 1)
}

/** The routes that take no body although their method does, and the lists with a query schema. */
const bodylessRoutes = routes.filter((route) => bodyMethods.has(route.method) && !route.body)
const queryRoutes = routes.filter((route) => route.query !== undefined)
const authenticatedRoutes = routes.filter((route) => route.authenticated)

/** The route of `candidates` that `request` reaches, if any (few candidates: no scan of every route). */
const routeAmong = (candidates: ReadonlyArray<Route>, request: HttpServerRequest.HttpServerRequest) => {
  const path = request.url.split("?")[0] ?? ""
  return candidates.find((candidate) => candidate.method === request.method && candidate.pattern.test(path))
}

/**
 * A path no route has as it is spelt: 404, answered here rather than by the router, which reads a
 * path more loosely (it ignores case and doubled slashes, decodes percent-encoding, cuts the path
 * at `;` or `#`). The checks here look routes up by the path as sent, so another spelling would
 * skip them (`//api/v1/transactions?wallet=` answered the unfiltered list), or reach another
 * endpoint than they checked (`/api/v1/wallets/{id};/balance` served the wallet). No path of the
 * API needs any of that: its ids are plain letters, digits and `_`.
 */
const unspeltPath = (request: HttpServerRequest.HttpServerRequest): ApiError | undefined => {
  const path = request.url.split("?")[0] ?? ""
  if (!/[;#]|%2f/i.test(path) && allowedMethods(request.url).length > 0) return undefined
  return new ApiError({
    status: 404,
    code: "route_not_found",
    message:
      "No such endpoint. Paths are spelt as documented: lower case, single slashes, ids as given (no `;`, no encoded `/`).",
  })
}

/** Whether the route `request` reaches takes no body (an action such as revoke or redeliver). */
const takesNoBody = (request: HttpServerRequest.HttpServerRequest): boolean =>
  routeAmong(bodylessRoutes, request) !== undefined

/**
 * A query parameter the endpoint does not take, one it takes given twice, or a filter given empty
 * (`?wallet_id=` is no wallet's id: a 404 "No wallet \"\"" blamed the wallet): a misspelt filter
 * (`?wallet=`) would otherwise be ignored and answer the unfiltered list, which reads as a filtered
 * one; one given to an endpoint that takes none (`/api/v2/reconciliation?chain=solana`) would be
 * ignored the same way.
 */
const unknownQueryParameter = (request: HttpServerRequest.HttpServerRequest): ApiError | undefined => {
  const at = request.url.indexOf("?")
  if (at < 0) return undefined
  const taken = routeAmong(queryRoutes, request)?.query
  if (taken === undefined) return undefined
  const seen = new Set<string>()
  for (const [name, value] of new URLSearchParams(request.url.slice(at + 1))) {
    // An empty cursor means the first page (a loop may send `starting_after=${next_cursor ?? ""}`);
    // an empty limit is the limit's own 400 (`invalid_limit`, as any limit out of its range).
    if (value === "" && name !== "starting_after" && name !== "limit" && taken.includes(name)) {
      return new ApiError({
        status: 400,
        code: "invalid_parameter",
        message: `Query parameter ${JSON.stringify(name)} is empty; leave it out instead (no filter, the default).`,
        param: name,
      })
    }
    if (seen.has(name) && taken.includes(name)) {
      return new ApiError({
        status: 400,
        code: "invalid_parameter",
        message: `Query parameter ${JSON.stringify(name)} is given more than once; give it once.`,
        param: name,
      })
    }
    seen.add(name)
    if (!taken.includes(name)) {
      return new ApiError({
        status: 400,
        code: "invalid_parameter",
        message:
          taken.length === 0
            ? `Unknown query parameter ${JSON.stringify(name)}; this endpoint takes none.`
            : `Unknown query parameter ${JSON.stringify(name)}; this endpoint takes ${taken.join(", ")}.`,
        param: name,
      })
    }
  }
  return undefined
}

/**
 * An endpoint without a body takes none, `{}` or `null`: anything else was silently ignored (a
 * `wallet_id` sent to another wallet's "make default" changed nothing and said nothing).
 */
const unexpectedBody = (text: string): ApiError | undefined => {
  if (text.trim() === "") return undefined
  let value: unknown
  try {
    value = JSON.parse(text)
  } catch {
    return new ApiError({ status: 400, code: "invalid_json", message: "The request body is not valid JSON." })
  }
  if (value === null) return undefined
  if (typeof value === "object" && !Array.isArray(value)) {
    const [field] = Object.keys(value)
    return field === undefined
      ? undefined
      : new ApiError({
          status: 400,
          code: "invalid_parameter",
          message: `This endpoint takes no body fields; got ${JSON.stringify(field)}.`,
          param: field,
        })
  }
  return new ApiError({
    status: 400,
    code: "invalid_parameter",
    message: "This endpoint takes no body: send none, {} or null.",
  })
}

/** Bodies are UTF-8 (RFC 8259): other bytes are refused, not replaced by U+FFFD and stored. */
const utf8 = new TextDecoder("utf-8", { fatal: true })

/** The `charset` a Content-Type names, lower-cased, unquoted; undefined when it names none. */
const charsetOf = (media: string): string | undefined =>
  /;\s*charset\s*=\s*"?([^";\s]+)"?/i.exec(media)?.[1]?.toLowerCase()

/**
 * A JSON body's checks before any decoder sees it: the encodings it may come in, then the checks
 * `JSON.parse` skips (see json-body.ts). The body is read once: the request caches its bytes for the
 * decoder. Bodies of other media types are left to the decoder's 415, except where no decoder runs
 * (endpoints that take no body); a body that cannot be read (over 1 MiB) is refused here, since on
 * those endpoints nothing else would read it.
 */
const checkJsonBody = (request: HttpServerRequest.HttpServerRequest): Effect.Effect<ApiError | undefined> => {
  if (!bodyMethods.has(request.method)) return Effect.succeed(undefined)
  const encoding = request.headers["content-encoding"]
  if (encoding !== undefined && !/^\s*identity\s*$/i.test(encoding)) {
    return Effect.succeed(
      unsupportedMediaType(
        request,
        `Request bodies are not compressed: send them without Content-Encoding (got ${JSON.stringify(encoding)}).`,
      ),
    )
  }
  const media = request.headers["content-type"]
  const json = media === undefined || /^\s*application\/json\s*(;|$)/i.test(media)
  const charset = media === undefined ? undefined : charsetOf(media)
  if (json && charset !== undefined && charset !== "utf-8" && charset !== "utf8") {
    return Effect.succeed(
      unsupportedMediaType(
        request,
        `Request bodies are UTF-8 JSON: send \`charset=utf-8\` or no charset (got ${JSON.stringify(charset)}).`,
      ),
    )
  }
  // A body said to be over the limit is refused before any of it is read (or waited for).
  const declared = request.headers["content-length"]
  if (declared !== undefined && /^\s*\d+\s*$/.test(declared) && Number(declared) > request_body_bytes_max) {
    return Effect.succeed(bodyTooLarge())
  }
  const bodyless = takesNoBody(request)
  // Other media types are the decoder's to refuse (415), except where no decoder runs.
  if (!json && !bodyless) return Effect.succeed(undefined)
  return request.arrayBuffer.pipe(
    Effect.map((bytes) => {
      if (!json) return bytes.byteLength === 0 ? undefined : unsupportedMediaType(request)
      let text: string
      try {
        text = utf8.decode(bytes)
      } catch {
        return new ApiError({
          status: 400,
          code: "invalid_json",
          message: "The request body is not valid UTF-8.",
        })
      }
      const problem = jsonBodyProblem(text)
      if (problem !== undefined)
        return new ApiError({
          status: 400,
          code: problem.code,
          message: problem.message,
          param: problem.param,
        })
      return bodyless ? unexpectedBody(text) : undefined
    }),
    Effect.catchCause((cause) => Effect.succeed(classify(Cause.squash(cause)))),
  )
}

/** HttpApi answers an unsupported media type in plain text: the platform's error body instead. */
const unsupportedMediaType = (request: HttpServerRequest.HttpServerRequest, message?: string) =>
  new ApiError({
    status: 415,
    code: "unsupported_media_type",
    message:
      message ??
      `Request bodies are JSON: send \`Content-Type: application/json\` (got ${JSON.stringify(request.headers["content-type"] ?? "")}).`,
  })

export const RequestMiddleware = HttpRouter.middleware(
  (httpEffect) =>
    Effect.gen(function* () {
      const request = yield* HttpServerRequest.HttpServerRequest
      const sent = request.headers["x-request-id"]
      const request_id = sent !== undefined && requestIdPattern.test(sent) ? sent : newRequestId()
      const refused =
        unspeltPath(request) ??
        unknownQueryParameter(request) ??
        (yield* checkJsonBody(request).pipe(
          Effect.provideService(HttpIncomingMessage.MaxBodySize, ByteSize.bytes(request_body_bytes_max)),
        ))
      // Where credentials are required they are checked first: the refusal waits for them.
      const deferred = refused !== undefined && routeAmong(authenticatedRoutes, request) !== undefined
      const response =
        refused !== undefined && !deferred
          ? errorResponse(refused, request_id)
          : yield* httpEffect.pipe(
              Effect.provideService(PendingRefusal, refused),
              Effect.provideService(CurrentRequestId, request_id),
              Effect.provideService(HttpIncomingMessage.MaxBodySize, ByteSize.bytes(request_body_bytes_max)),
              Effect.catchCause((cause) => answer(cause, request, request_id)),
            )
      if (response.status === 415 && !/json/.test(response.headers["content-type"] ?? "")) {
        return errorResponse(unsupportedMediaType(request), request_id)
      }
      // The rest of a body too large is not read: the connection is closed after the answer
      // rather than drained (Node would read and discard it all to keep the connection).
      if (response.status === 413) {
        const closing = Response.setHeader(response, "connection", "close")
        return closing.headers["x-request-id"] === undefined
          ? Response.setHeader(closing, "x-request-id", request_id)
          : closing
      }
      return response.headers["x-request-id"] === undefined
        ? Response.setHeader(response, "x-request-id", request_id)
        : response
      // Every failure is answered above; the router's type wants the unhandled marker kept.
    }) as Effect.Effect<
      HttpServerResponse.HttpServerResponse,
      Types.unhandled,
      HttpServerRequest.HttpServerRequest
    >,
  { global: true },
)
