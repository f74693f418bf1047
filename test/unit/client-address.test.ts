// The client address of a request, directly or behind trusted proxies (src/http/client-address.ts).
import { Option } from "effect"
import { HttpServerRequest } from "effect/http"
import { describe, expect, it } from "vitest"
import { clientAddress } from "../../src/http/client-address.ts"

const request = (forwarded?: string) =>
  HttpServerRequest.fromWeb(
    new Request("http://platform.test/api/v1/wallets", {
      headers: forwarded === undefined ? {} : { "x-forwarded-for": forwarded },
    }),
  ).modify({ remoteAddress: Option.some("10.0.0.2") })

describe("clientAddress", () => {
  it.each([
    { hops: 0, forwarded: "203.0.113.7", expected: "10.0.0.2" },
    { hops: 1, forwarded: undefined, expected: "10.0.0.2" },
    { hops: 1, forwarded: "203.0.113.7", expected: "203.0.113.7" },
    { hops: 1, forwarded: "198.51.100.9, 203.0.113.7", expected: "203.0.113.7" },
    { hops: 2, forwarded: "198.51.100.9, 203.0.113.7, 10.0.0.1", expected: "203.0.113.7" },
    { hops: 2, forwarded: "203.0.113.7", expected: "10.0.0.2" },
    { hops: 1, forwarded: " , ", expected: "10.0.0.2" },
  ])("$hops trusted hops, X-Forwarded-For $forwarded: $expected", ({ hops, forwarded, expected }) => {
    expect(clientAddress(request(forwarded), hops)).toBe(expected)
  })
})
