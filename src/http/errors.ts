/**
 * Every error the API answers with has one shape, `{"error":{"type","code","message","param"?,
 * "request_id"}}`, and one status. Handlers fail with `ApiError`; it renders itself (it is
 * Respondable), so the status mapping lives here and nowhere else. `request_id` is the id the
 * request middleware assigned; it is also in the `X-Request-Id` header of every response.
 */
import { Context, Data, Effect, ErrorReporter, Schema } from "effect"
import { HttpServerRespondable, HttpServerResponse } from "effect/http"

/** The current request's id (set by the request middleware; "unknown" outside a request). */
export const CurrentRequestId = Context.Reference<string>("platform/http/CurrentRequestId", {
  defaultValue: () => "unknown",
})

/**
 * A refusal of the request's form (a query parameter or a body the endpoint does not take) found
 * before authentication, for an endpoint that authenticates: the Authentication middleware raises it
 * once the caller is known, so that a request without valid credentials learns only that (401).
 */
export const PendingRefusal = Context.Reference<ApiError | undefined>("platform/http/PendingRefusal", {
  defaultValue: () => undefined,
})

export type ErrorType =
  | "invalid_request_error"
  | "authentication_error"
  | "permission_error"
  | "not_found_error"
  | "idempotency_error"
  | "conflict_error"
  | "business_rule_error"
  | "rate_limit_error"
  | "api_error"

const statusTypes: Readonly<Record<number, ErrorType>> = {
  400: "invalid_request_error",
  401: "authentication_error",
  403: "permission_error",
  404: "not_found_error",
  405: "invalid_request_error",
  409: "conflict_error",
  413: "invalid_request_error",
  415: "invalid_request_error",
  422: "business_rule_error",
  429: "rate_limit_error",
  500: "api_error",
  503: "api_error",
}

export class ApiError extends Data.TaggedError("ApiError")<{
  readonly status: number
  readonly code: string
  readonly message: string
  readonly param?: string | undefined
  /** Overrides the type derived from the status (e.g. idempotency_error for a 409). */
  readonly type?: ErrorType | undefined
  /** Extra response headers, e.g. Retry-After on a 429. */
  readonly headers?: Readonly<Record<string, string>> | undefined
}> {
  /** An answered error is not a fault: keep it out of the error reporters. */
  override readonly [ErrorReporter.ignore] = true;

  [HttpServerRespondable.symbol]() {
    const error = this
    return Effect.gen(function* () {
      return errorResponse(error, yield* CurrentRequestId)
    })
  }
}

/** The error body for `error`, as sent. */
export const errorBody = (error: ApiError, request_id: string) => ({
  error: {
    type: error.type ?? statusTypes[error.status] ?? "api_error",
    code: error.code,
    message: error.message,
    ...(error.param === undefined ? {} : { param: error.param }),
    request_id,
  },
})

export const errorResponse = (error: ApiError, request_id: string) =>
  HttpServerResponse.jsonUnsafe(errorBody(error, request_id), {
    status: error.status,
    headers: {
      ...error.headers,
      // A 401 names the scheme that authenticates (RFC 9110 section 11.6.1): bearer API keys.
      ...(error.status === 401 ? { "www-authenticate": 'Bearer realm="api"' } : {}),
      "x-request-id": request_id,
    },
  })

/** The documented error body (OpenAPI). */
export const ErrorBody = Schema.Struct({
  error: Schema.Struct({
    type: Schema.String,
    code: Schema.String,
    message: Schema.String,
    param: Schema.optional(Schema.String),
    request_id: Schema.String,
  }),
}).annotate({ identifier: "Error" })

export const badRequest = (code: string, message: string, param?: string) =>
  new ApiError({ status: 400, code, message, param })

export const notFound = (resource: string, id: string, param?: string) =>
  new ApiError({
    status: 404,
    code: `${resource}_not_found`,
    message: `No ${resource} ${JSON.stringify(id)}.`,
    param,
  })

export const forbidden = (code: string, message: string) => new ApiError({ status: 403, code, message })

export const conflict = (code: string, message: string, param?: string) =>
  new ApiError({ status: 409, code, message, param })

export const unprocessable = (code: string, message: string, param?: string) =>
  new ApiError({ status: 422, code, message, param })
