// Proves that one person is one key: every way of writing a phone number, e-mail address or handle
// normalises to the same identifier (and normalising again changes nothing), while what cannot be
// read without guessing (a phone without its country code) is refused.
import { Result } from "effect"
import fc from "fast-check"
import { describe, expect, it } from "vitest"
import { normaliseIdentifier, parseRecipient } from "../../domain/platform/identifiers.ts"

const ok = (kind: "phone" | "email" | "handle", value: string) =>
  Result.getOrThrow(normaliseIdentifier(kind, value))

describe("normaliseIdentifier", () => {
  it.each([
    ["+1 (415) 555-0100", "+14155550100"],
    ["0014155550100", "+14155550100"],
    ["+1.415.555.0100", "+14155550100"],
    ["+44 (0)20 7946 0958", "+442079460958"],
    ["+44 ( 0 ) 20 7946 0958", "+442079460958"],
    ["+442079460958", "+442079460958"],
    ["0044 20 7946 0958", "+442079460958"],
    ["+39 06 1234 5678", "+390612345678"],
  ])("phone %s is %s", (input, expected) => {
    expect(ok("phone", input)).toBe(expected)
  })

  it.each([
    "4155550100",
    "(0)20 7946 0958",
    "+0 415 555 0100",
    "+1 415 CALL NOW",
    "+1234",
    `+${"1".repeat(16)}`,
  ])("refuses the phone %s", (input) => {
    expect(Result.isFailure(normaliseIdentifier("phone", input))).toBe(true)
  })

  it.each([
    ["email", " Ana@Example.COM ", "ana@example.com"],
    ["handle", "@Twitter:Ana_B", "@x:ana_b"],
    ["handle", "@TELEGRAM:ana.b", "@telegram:ana.b"],
  ] as const)("%s %s is %s", (kind, input, expected) => {
    expect(ok(kind, input)).toBe(expected)
  })

  it("writes any E.164 number in any of the usual ways to the same key, and normalising again changes nothing", () => {
    const separator = fc.constantFrom("", " ", "-", ".", " - ")
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: 999 }),
        fc.array(fc.integer({ min: 0, max: 9 }), { minLength: 7, maxLength: 11 }),
        separator,
        fc.constantFrom("+", "00"),
        fc.boolean(),
        (country, subscriber, sep, prefix, trunk) => {
          const e164 = `+${country}${subscriber.join("")}`
          if (e164.length - 1 > 15) return
          const groups = subscriber.join("").match(/.{1,3}/g) ?? []
          const written = `${prefix}${country}${trunk ? " (0)" : ""} ${groups.join(sep)}`
          const normalised = ok("phone", written)
          expect(normalised).toBe(e164)
          expect(ok("phone", normalised)).toBe(normalised)
          expect(Result.getOrThrow(parseRecipient(written))).toEqual({ kind: "phone", value: e164 })
        },
      ),
      { numRuns: 500 },
    )
  })
})
