// Proves the sealing of stored responses that carry a secret: a sealed body opens to what was
// sealed, under the same KEK in any process, and under no other key or record; it never shows the
// secret or a key prefix, and two seals of one body differ. Their requests' fingerprints are keyed.
import { hash, randomBytes } from "node:crypto"
import { describe, expect, it } from "vitest"
import {
  isSealedBody,
  makeResponseSealer,
  type ResponseIdentity,
  SealedBodyUnreadable,
} from "../../src/platform/idempotency.ts"

const kek = randomBytes(32)
const identity: ResponseIdentity = { tenant_id: "ten_1", environment: "sandbox", idempotency_key: "k1" }
const body = {
  key_id: "key_1",
  api_key: `sk_sandbox_${randomBytes(32).toString("base64url")}`,
  scopes: ["a"],
}

describe("makeResponseSealer", () => {
  it("opens what it sealed, also with a sealer made from the same KEK elsewhere", () => {
    const sealed = makeResponseSealer(kek).seal(identity, body)
    expect(isSealedBody(sealed)).toBe(true)
    expect(makeResponseSealer(kek).open(identity, sealed)).toEqual(body)
  })

  it("never shows the secret or a key prefix, and seals one body differently each time (random IV)", () => {
    const sealer = makeResponseSealer(kek)
    const first = JSON.stringify(sealer.seal(identity, body))
    const second = JSON.stringify(sealer.seal(identity, body))
    for (const text of [first, second]) {
      expect(text).not.toContain(body.api_key)
      expect(text).not.toContain("sk_")
    }
    expect(first).not.toBe(second)
  })

  it.each<readonly [string, ResponseIdentity]>([
    ["another tenant", { ...identity, tenant_id: "ten_2" }],
    ["another environment", { ...identity, environment: "production" }],
    ["another Idempotency-Key", { ...identity, idempotency_key: "k2" }],
  ])("refuses a record moved to %s (the identity is authenticated data)", (_, moved) => {
    const sealer = makeResponseSealer(kek)
    expect(() => sealer.open(moved, sealer.seal(identity, body))).toThrow(SealedBodyUnreadable)
  })

  it("refuses a record sealed under another KEK, naming both key ids and neither key", () => {
    const sealed = makeResponseSealer(randomBytes(32)).seal(identity, body)
    const open = () => makeResponseSealer(kek).open(identity, sealed)
    expect(open).toThrow(SealedBodyUnreadable)
    expect(open).toThrow(/sealed under sha256:[0-9a-f]{16}, the configured key is sha256:[0-9a-f]{16}/)
    expect(open).not.toThrow(new RegExp(kek.toString("hex")))
  })

  it("refuses an altered or truncated record", () => {
    const sealer = makeResponseSealer(kek)
    const sealed = sealer.seal(identity, body)
    const data = Buffer.from(sealed.data, "base64")
    data[0] = (data[0] ?? 0) ^ 1
    expect(() => sealer.open(identity, { ...sealed, data: data.toString("base64") })).toThrow(
      SealedBodyUnreadable,
    )
    expect(() => sealer.open(identity, { ...sealed, data: "AAAA" })).toThrow(SealedBodyUnreadable)
    expect(() => sealer.open(identity, { ...sealed, iv: "AAAA" })).toThrow(SealedBodyUnreadable)
  })

  it("fingerprints a request with a keyed hash: the same under one KEK, another under another, never the plain SHA-256", () => {
    const request = 'tenant.register\n{"email":"a@example.com","password":"correct horse battery"}'
    const fingerprint = makeResponseSealer(kek).fingerprint(request)
    expect(fingerprint).toMatch(/^[0-9a-f]{64}$/)
    expect(makeResponseSealer(kek).fingerprint(request)).toBe(fingerprint)
    expect(makeResponseSealer(randomBytes(32)).fingerprint(request)).not.toBe(fingerprint)
    expect(fingerprint).not.toBe(hash("sha256", request, "hex"))
  })

  it.each<readonly [string, unknown, boolean]>([
    ["a sealed body", makeResponseSealer(kek).seal(identity, body), true],
    ["a plain response", body, false],
    ["null", null, false],
    ["another format", { sealed: "aes-128-cbc/v0", key_id: "x", iv: "x", data: "x" }, false],
    ["a missing field", { sealed: "aes-256-gcm/v1", key_id: "x", iv: "x" }, false],
  ])("isSealedBody: %s is %s", (_, value, expected) => {
    expect(isSealedBody(value)).toBe(expected)
  })
})
