// Proves the webhook signature scheme from both sides: what `signPayload` produces is what an
// independent HMAC gives, and `verifySignature` accepts exactly the genuine, fresh requests: it
// refuses ugly headers as malformed, tampered bodies and wrong secrets as unmatched, and stale or
// future timestamps, and it accepts either signature of a rotation.
import { createHmac } from "node:crypto"
import { describe, expect, it } from "vitest"
import { AssertionFailed } from "../../domain/assert.ts"
import { type SignatureFailure, signPayload, verifySignature } from "../../domain/webhooks/signature.ts"

const secret = "whsec_current"
const old_secret = "whsec_previous"
const body =
  '{"id":"evt_1","event_type":"payment.completed","created_at":"2025-01-01T00:00:00.000Z","data":{}}'
const t = 1_735_689_600
const hex = (key: string, timestamp: number, payload: string) =>
  createHmac("sha256", key).update(`${timestamp}.${payload}`).digest("hex")
const good = hex(secret, t, body)

describe("signPayload", () => {
  it("puts the timestamp first, then one v1 per secret in the order given", () => {
    expect(signPayload({ secrets: [secret], body, timestamp_s: t })).toBe(`t=${t},v1=${good}`)
    expect(signPayload({ secrets: [secret, old_secret], body, timestamp_s: t })).toBe(
      `t=${t},v1=${good},v1=${hex(old_secret, t, body)}`,
    )
  })

  it("signs bytes and strings alike", () => {
    const bytes = new TextEncoder().encode(body)
    expect(signPayload({ secrets: [secret], body: bytes, timestamp_s: t })).toBe(`t=${t},v1=${good}`)
  })

  it.each([
    ["no secret", { secrets: [], body, timestamp_s: t }],
    ["an empty secret", { secrets: [""], body, timestamp_s: t }],
    ["a fractional timestamp", { secrets: [secret], body, timestamp_s: 1.5 }],
    ["a negative timestamp", { secrets: [secret], body, timestamp_s: -1 }],
  ])("refuses %s (a programmer error)", (_name, input) => {
    expect(() => signPayload(input)).toThrow(AssertionFailed)
  })
})

describe("verifySignature", () => {
  const cases: ReadonlyArray<{
    readonly name: string
    readonly header: string | ReadonlyArray<string> | undefined
    readonly body?: string
    readonly now_s?: number
    readonly verify_secret?: string
    readonly expected: true | SignatureFailure
  }> = [
    { name: "a genuine request", header: `t=${t},v1=${good}`, expected: true },
    { name: "spaces around items", header: ` t=${t} , v1=${good} `, expected: true },
    { name: "upper-case hex", header: `t=${t},v1=${good.toUpperCase()}`, expected: true },
    { name: "items in another order", header: `v1=${good},t=${t}`, expected: true },
    { name: "an unknown scheme beside v1", header: `t=${t},v0=abc,v1=${good}`, expected: true },
    {
      name: "the matching signature second",
      header: `t=${t},v1=${"0".repeat(64)},v1=${good}`,
      expected: true,
    },
    { name: "no header at all", header: undefined, expected: "missing" },
    { name: "a list of headers", header: [`t=${t},v1=${good}`], expected: "malformed" },
    { name: "an empty header", header: "", expected: "malformed" },
    { name: "garbage", header: "garbage", expected: "malformed" },
    { name: "no timestamp", header: `v1=${good}`, expected: "malformed" },
    { name: "no v1", header: `t=${t}`, expected: "malformed" },
    { name: "only another scheme", header: `t=${t},v0=${good}`, expected: "malformed" },
    { name: "two timestamps", header: `t=${t},t=${t},v1=${good}`, expected: "malformed" },
    { name: "a signed timestamp", header: `t=+${t},v1=${good}`, expected: "malformed" },
    { name: "a fractional timestamp", header: `t=${t}.5,v1=${good}`, expected: "malformed" },
    { name: "an empty timestamp", header: `t=,v1=${good}`, expected: "malformed" },
    { name: "a short signature", header: `t=${t},v1=${good.slice(2)}`, expected: "malformed" },
    { name: "a non-hex signature", header: `t=${t},v1=${"z".repeat(64)}`, expected: "malformed" },
    { name: "an empty item", header: `t=${t},,v1=${good}`, expected: "malformed" },
    { name: "an item without =", header: `t=${t},v1${good}`, expected: "malformed" },
    { name: "nine signatures", header: `t=${t}${`,v1=${good}`.repeat(9)}`, expected: "malformed" },
    { name: "a huge header", header: `t=${t},v1=${good},x=${"a".repeat(5000)}`, expected: "malformed" },
    {
      name: "a tampered body",
      header: `t=${t},v1=${good}`,
      body: body.replace("evt_1", "evt_2"),
      expected: "no_matching_signature",
    },
    {
      name: "a body with a trailing newline",
      header: `t=${t},v1=${good}`,
      body: `${body}\n`,
      expected: "no_matching_signature",
    },
    {
      name: "a wrong secret",
      header: `t=${t},v1=${good}`,
      verify_secret: "whsec_other",
      expected: "no_matching_signature",
    },
    {
      name: "a signature for another timestamp",
      header: `t=${t + 1},v1=${good}`,
      expected: "no_matching_signature",
    },
    {
      name: "a timestamp 301 s old",
      header: `t=${t},v1=${good}`,
      now_s: t + 301,
      expected: "timestamp_too_old",
    },
    { name: "a timestamp 300 s old", header: `t=${t},v1=${good}`, now_s: t + 300, expected: true },
    {
      name: "a timestamp 301 s ahead",
      header: `t=${t},v1=${good}`,
      now_s: t - 301,
      expected: "timestamp_in_future",
    },
    { name: "a timestamp 300 s ahead", header: `t=${t},v1=${good}`, now_s: t - 300, expected: true },
  ]

  it.each(cases)("$name: $expected", (c) => {
    const result = verifySignature({
      header: c.header,
      body: c.body ?? body,
      secret: c.verify_secret ?? secret,
      now_s: c.now_s ?? t + 5,
    })
    expect(result).toEqual(c.expected === true ? { ok: true } : { ok: false, reason: c.expected })
  })

  it("honours a custom tolerance", () => {
    const header = `t=${t},v1=${good}`
    expect(verifySignature({ header, body, secret, now_s: t + 61, tolerance_s: 60 })).toEqual({
      ok: false,
      reason: "timestamp_too_old",
    })
    expect(verifySignature({ header, body, secret, now_s: t + 60, tolerance_s: 60 })).toEqual({ ok: true })
  })

  it("accepts a rotated header with either secret, and neither other secret", () => {
    const header = signPayload({ secrets: [secret, old_secret], body, timestamp_s: t })
    for (const key of [secret, old_secret]) {
      expect(verifySignature({ header, body, secret: key, now_s: t })).toEqual({ ok: true })
    }
    expect(verifySignature({ header, body, secret: "whsec_third", now_s: t })).toEqual({
      ok: false,
      reason: "no_matching_signature",
    })
  })

  it("round-trips what signPayload produces, for bodies as bytes", () => {
    const bytes = new TextEncoder().encode('{"amount":"1.00","note":"caf\u00e9 \u2615"}')
    const header = signPayload({ secrets: [secret], body: bytes, timestamp_s: t })
    expect(verifySignature({ header, body: bytes, secret, now_s: t })).toEqual({ ok: true })
    const tampered = Uint8Array.from(bytes)
    tampered[3] = (tampered[3] ?? 0) ^ 1
    expect(verifySignature({ header, body: tampered, secret, now_s: t }).ok).toBe(false)
  })
})
