/**
 * Assertions end-to-end tests share: every response carries `X-Request-Id`, and an error response is
 * `{"error":{type, code, message, request_id}}` with the request id of its header.
 */
import { expect } from "vitest"
import type { ApiResponse } from "./platform-process.ts"

export interface ErrorBody {
  readonly error: {
    readonly type: string
    readonly code: string
    readonly message: string
    readonly param?: string
    readonly request_id: string
  }
}

/** The response's `X-Request-Id`, asserted present. */
export const requestIdOf = (response: ApiResponse): string => {
  const id = response.headers.get("x-request-id")
  expect(id, `X-Request-Id on a ${response.status}`).toMatch(/^[A-Za-z0-9._:-]{8,128}$/)
  return id ?? ""
}

/** Asserts `response` succeeded with `status` (and has a request id); returns its body. */
export const expectOk = <T>(response: ApiResponse<T>, status = 200): T => {
  expect({ status: response.status, body: response.body }).toMatchObject({ status })
  requestIdOf(response)
  return response.body
}

/** Asserts `response` is the error `status`/`code` in the platform's shape; returns the error. */
export const expectError = (response: ApiResponse, status: number, code: string): ErrorBody["error"] => {
  expect({ status: response.status, body: response.body }).toMatchObject({
    status,
    body: { error: { code } },
  })
  const { error } = response.body as ErrorBody
  expect(error.request_id).toBe(requestIdOf(response))
  expect(typeof error.message).toBe("string")
  return error
}
