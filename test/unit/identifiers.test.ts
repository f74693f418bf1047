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
    ["0044 (0)20 7946 0958", "+442079460958"],
    ["+44-(0)-20 7946 0958", "+442079460958"],
    ["+353 (0)1 234 5678", "+35312345678"],
    // However the international prefix is set apart from the country code.
    ["00 44 (0)20 7946 0958", "+442079460958"],
    ["00-44 (0)20 7946 0958", "+442079460958"],
    ["00.44 (0)20 7946 0958", "+442079460958"],
    ["+ 44 (0)20 7946 0958", "+442079460958"],
    ["+(44) (0)20 7946 0958", "+442079460958"],
    ["(+44) (0)20 7946 0958", "+442079460958"],
    ["(+44)(0)20 7946 0958", "+442079460958"],
    // Not right after the country code: a digit of the number, its parentheses dropped.
    ["+1 415 555 (0)103", "+14155550103"],
    ["+1 (0415) 555 0100", "+104155550100"],
    ["+442079460958", "+442079460958"],
    ["0044 20 7946 0958", "+442079460958"],
    ["+39 06 1234 5678", "+390612345678"],
    ["+683 4002", "+6834002"],
    ["+1 415\u2013555\u2013\u20140100", "+14155550100"],
    ["+1\u00a0415\u00a0555\u00a00100", "+14155550100"],
  ])("phone %s is %s", (input, expected) => {
    expect(ok("phone", input)).toBe(expected)
  })

  it.each([
    "4155550100",
    "(0)20 7946 0958",
    "+0 415 555 0100",
    "+1 415 CALL NOW",
    "+1234",
    "+123456",
    `+${"1".repeat(16)}`,
  ])("refuses the phone %s", (input) => {
    expect(Result.isFailure(normaliseIdentifier("phone", input))).toBe(true)
  })

  it.each([
    ["+1 415 555 0100 ext 5", /extensions are not/],
    ["+1 415 CALL NOW", /only digits/],
    ["+0 415 555 0100", /do not start with 0/],
    ["4155550100", /country code/],
    ["++442079460958", /one \+, before its country code/],
    ["+44+2079460958", /one \+, before its country code/],
    ["tel:+442079460958", /without the tel: scheme/],
  ])("says why the phone %s is refused", (input, reason) => {
    const refused = normaliseIdentifier("phone", input)
    expect(Result.isFailure(refused) ? refused.failure.message : "accepted").toMatch(reason)
  })

  it.each([
    ["ana@bücher.de", "ana@xn--bcher-kva.de"],
    ["Ana@BÜCHER.de", "ana@xn--bcher-kva.de"],
    ["ana@xn--bcher-kva.de", "ana@xn--bcher-kva.de"],
    ["ana@example.xn--p1ai", "ana@example.xn--p1ai"],
    ["ana@пример.рф", "ana@xn--e1afmkfd.xn--p1ai"],
    ["josé@example.com", "josé@example.com"],
    // The same é written as e + a combining accent is the same address.
    ["jose\u0301@example.com", "josé@example.com"],
    // Case-folded, not only lower-cased: "ΣΑΣ" lower-cases to "σας" (a final sigma), the micro sign
    // and the long s have no upper case of their own.
    ["ΣΑΣ@uni.example", "σασ@uni.example"],
    ["σας@uni.example", "σασ@uni.example"],
    ["\u00b5ail@uni.example", "\u03bcail@uni.example"],
    ["\u039cAIL@uni.example", "\u03bcail@uni.example"],
    ["\u017fam@uni.example", "sam@uni.example"],
    // Lower-casing can undo a composition: J + caron lower-cases to j + caron, which is ǰ.
    ["J\u030cana@example.com", "\u01f0ana@example.com"],
    ["\u01f0ana@example.com", "\u01f0ana@example.com"],
    ["\u1e9b@uni.example", "\u1e61@uni.example"],
    // Old Cyrillic letter forms fold to the letters they are: rounded ve is ve, tall te is te.
    ["\u1c80\u1c84@uni.example", "\u0432\u0442@uni.example"],
    ["\u0412\u0422@uni.example", "\u0432\u0442@uni.example"],
    ["\u1c88@uni.example", "\ua64b@uni.example"],
    ["\ufb05@uni.example", "\ufb06@uni.example"],
  ])("e-mail %s is %s", (input, expected) => {
    expect(ok("email", input)).toBe(expected)
  })

  it("normalises an e-mail address to NFC text that normalises to itself", () => {
    const pieces = [
      ..."aJjIiSsſσςΣµ",
      "J\u030c",
      "\u01f0",
      "e\u0301",
      "\u00e9",
      "A\u030a",
      "\u212b",
      "\u1e9b",
      "\u0345",
    ]
    fc.assert(
      fc.property(fc.array(fc.constantFrom(...pieces), { minLength: 1, maxLength: 6 }), (parts) => {
        const once = ok("email", `${parts.join("")}@uni.example`)
        expect(once).toBe(once.normalize("NFC"))
        expect(ok("email", once)).toBe(once)
      }),
      { numRuns: 2_000 },
    )
  })

  it("treats two e-mail addresses alike exactly when they are equal ignoring case (upper-cased alike)", () => {
    // Letters whose upper case is one letter, so that upper-casing is an oracle (not ß, whose upper
    // case is "SS" while its simple case folding is itself).
    const letters = [..."aAsSſµΜμσςΣθϑΘβϐΒκϰΚρϱΡεϵΕπϖΠφϕΦιΙ\u1fbe\u1e9b\u1e60\u1e61"]
    fc.assert(
      fc.property(
        fc.array(fc.constantFrom(...letters), { minLength: 1, maxLength: 6 }),
        fc.array(fc.constantFrom(...letters), { minLength: 1, maxLength: 6 }),
        (a, b) => {
          const left = ok("email", `${a.join("")}@uni.example`)
          const right = ok("email", `${b.join("")}@uni.example`)
          const sameIgnoringCase = a.join("").toUpperCase() === b.join("").toUpperCase()
          expect(left === right).toBe(sameIgnoringCase)
        },
      ),
    )
  })

  it.each([
    "ana@bücher",
    "ana@bü/cher.de",
    "ana@exa mple.com",
    "ana@example.c",
    "ana@example.123",
    "ana@-example.com",
    "an a@example.com",
    "ana@@example.com",
    `${"a".repeat(65)}@example.com`,
    `${"é".repeat(33)}@example.com`,
  ])("refuses the e-mail %s", (input) => {
    expect(Result.isFailure(normaliseIdentifier("email", input))).toBe(true)
  })

  it.each([
    ["email", " Ana@Example.COM ", "ana@example.com"],
    ["handle", "@Twitter:Ana_B", "@x:ana_b"],
    ["handle", "@TELEGRAM:Ana_B5", "@telegram:ana_b5"],
    ["handle", "@instagram:Ana.B_", "@instagram:ana.b_"],
    ["handle", "@x:Abcdefghijklm_o", "@x:abcdefghijklm_o"],
  ] as const)("%s %s is %s", (kind, input, expected) => {
    expect(ok(kind, input)).toBe(expected)
  })

  it.each([
    ["@x:a.b", /an @x: handle is 1 to 15/],
    ["@x:abcdefghijklmnop", /an @x: handle is 1 to 15/],
    ["@telegram:abcd", /an @telegram: handle is 5 to 32/],
    ["@telegram:1abcde", /starting with a letter/],
    ["@telegram:abcde_", /not ending with _/],
    ["@telegram:ana.b", /@telegram: handle/],
    ["@instagram:.ana", /@instagram: handle/],
    ["@instagram:ana.", /@instagram: handle/],
    ["@instagram:an..a", /@instagram: handle/],
    [`@instagram:${"a".repeat(31)}`, /an @instagram: handle is 1 to 30/],
    ["@myspace:ana", /unknown network/],
    ["@x:", /a handle is @<network>:<handle>/],
  ])("says why the handle %s is refused", (input, reason) => {
    const refused = normaliseIdentifier("handle", input)
    expect(Result.isFailure(refused) ? refused.failure.message : "accepted").toMatch(reason)
  })

  it("writes any E.164 number in any of the usual ways to the same key, and normalising again changes nothing", () => {
    const separator = fc.constantFrom("", " ", "-", ".", " - ")
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: 999 }),
        fc.array(fc.integer({ min: 0, max: 9 }), { minLength: 7, maxLength: 11 }),
        separator,
        fc.constantFrom("+#", "00#", "+ #", "00 #", "00-#", "+(#)", "(+#)", "(00#)"),
        fc.boolean(),
        (country, subscriber, sep, prefix, trunk) => {
          const e164 = `+${country}${subscriber.join("")}`
          if (e164.length - 1 > 15) return
          const groups = subscriber.join("").match(/.{1,3}/g) ?? []
          const written = `${prefix.replace("#", String(country))}${trunk ? " (0)" : ""} ${groups.join(sep)}`
          const normalised = ok("phone", written)
          expect(normalised).toBe(e164)
          expect(ok("phone", normalised)).toBe(normalised)
          expect(Result.getOrThrow(parseRecipient(written))).toEqual({ kind: "phone", value: e164 })
        },
      ),
      { numRuns: 500 },
    )
  })

  it("says what a recipient may be when it is none of the three", () => {
    const refused = parseRecipient("hello")
    expect(Result.isFailure(refused) ? refused.failure : undefined).toMatchObject({
      kind: "recipient",
      message: expect.stringMatching(/phone number .* e-mail address or a handle/),
    })
  })
})
