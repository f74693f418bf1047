/**
 * Social identifiers a payment can be addressed to: phone numbers (normalised to E.164), e-mail
 * addresses, and handles `@<network>:<handle>` on the networks the platform knows: a microblog
 * (`x`, also spelled `twitter`), a messenger (`telegram`) and a photo network (`instagram`).
 * Normalisation makes one person one key: "+1 (415) 555-0100" and "+14155550100" are the same.
 */
import { Data, Result } from "effect"

export const identityKinds = ["phone", "email", "handle"] as const
export type IdentityKind = (typeof identityKinds)[number]

/** Networks a handle may name; an alias maps to the canonical name. */
export const handleNetworks = ["x", "telegram", "instagram"] as const
const networkAliases: Readonly<Record<string, (typeof handleNetworks)[number]>> = {
  x: "x",
  twitter: "x",
  telegram: "telegram",
  instagram: "instagram",
}

export interface Identifier {
  readonly kind: IdentityKind
  /** The normalised form: the key identities are stored and matched by. */
  readonly value: string
}

export class InvalidIdentifier extends Data.TaggedError("InvalidIdentifier")<{
  readonly kind: IdentityKind | "recipient"
  readonly message: string
}> {}

/** The longest identifier (and payment recipient) read, in UTF-16 units: an e-mail address's limit. */
export const identifierLengthMax = 254
/** The shortest numbers in service have 7 digits with their country code (Niue, Tokelau: +683 4002). */
const phoneDigitsMin = 7
const phoneDigitsMax = 15
/** Separators people write inside numbers: spaces, dots, parentheses and every kind of dash. */
const phoneSeparators = /[\s().\-\u2010-\u2015\u2212]/g
/**
 * A trunk prefix written `(0)` right after the country code (`+` or `00` and 1 to 3 digits, then
 * any separators), however the international prefix is set apart: "+44 (0)20 7946 0958",
 * "0044 (0)20...", "00 44 (0)20...", "00-44 (0)20...", "+ 44 (0)20...", "+(44) (0)20...",
 * "(+44) (0)20...". Anywhere
 * else its parentheses are separators like any other and the 0 is a digit of the number.
 */
const trunkPrefix =
  /^[\s(]*(?:\+|00)[\s().\-\u2010-\u2015\u2212]*([1-9][0-9]{0,2})[\s().\-\u2010-\u2015\u2212]*\(\s*0\s*\)/

/**
 * A phone number in E.164: `+`, a country code and subscriber number, 7 to 15 digits in all.
 * Spaces, dots, dashes (also typographic ones) and parentheses are dropped; a leading `00` is read as `+`; a trunk prefix
 * written `(0)` right after the country code ("+44 (0)20 7946 0958") is dropped with its parentheses,
 * as it is dialled only from inside the country (a `(0)` anywhere else is a digit of the number). A
 * number without its country code is refused:
 * guessing the country would pay the wrong person.
 * @example normalisePhone("+1 (415) 555-0100") // Result.succeed("+14155550100")
 * @example normalisePhone("+44 (0)20 7946 0958") // Result.succeed("+442079460958")
 */
export function normalisePhone(input: string): Result.Result<string, InvalidIdentifier> {
  const compact = input.trim().replace(trunkPrefix, "+$1").replace(phoneSeparators, "")
  const international = compact.startsWith("00") ? `+${compact.slice(2)}` : compact
  const fail = (message: string) => Result.fail(new InvalidIdentifier({ kind: "phone", message }))
  if (/^tel:/i.test(international))
    return fail("write the number itself, without the tel: scheme, e.g. +14155550100")
  if (/[^+0-9]/.test(international))
    return fail(
      "a phone number has only digits after its + (spaces, dots, dashes and parentheses are allowed; extensions are not)",
    )
  if (!international.startsWith("+")) return fail("phone numbers need their country code, e.g. +14155550100")
  const digits = international.slice(1)
  if (digits.includes("+")) return fail("a phone number has one +, before its country code")
  if (!/^[1-9][0-9]*$/.test(digits))
    return fail("a phone number is one + and digits; country codes do not start with 0")
  if (digits.length < phoneDigitsMin || digits.length > phoneDigitsMax) {
    return fail(`a phone number has ${phoneDigitsMin} to ${phoneDigitsMax} digits (E.164)`)
  }
  return Result.succeed(`+${digits}`)
}

/** RFC 5321 dot-atom, with the letters and digits of any script (RFC 6531 internationalised mail). */
const emailLocalPattern =
  /^[\p{L}\p{M}\p{N}!#$%&'*+/=?^_`{|}~-]+(?:\.[\p{L}\p{M}\p{N}!#$%&'*+/=?^_`{|}~-]+)*$/u
const domainLabelPattern = /^[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?$/
/** A top-level domain: letters, or an internationalised one in its ASCII form (`xn--p1ai`). */
const tldPattern = /^(?:[A-Za-z]{2,}|xn--[A-Za-z0-9-]{1,59})$/

/** An internationalised domain in its ASCII (punycode) form; undefined if it is not a host name. */
const asciiDomain = (domain: string): string | undefined => {
  // ASCII stays as written (the label checks below judge it); only other scripts are converted.
  if (/^[\x21-\x7e]*$/.test(domain)) return domain
  if (/[/\\?#@:%\s[\]]/.test(domain)) return undefined
  try {
    return new URL(`http://${domain}/`).hostname
  } catch {
    return undefined
  }
}

/**
 * An e-mail address (a dot-atom local part, in any script; a domain of at least two labels),
 * Unicode-normalised (NFC) and lower-cased: identities match case-insensitively. An
 * internationalised domain is kept in its ASCII form, so `ana@bücher.de` and
 * `ana@xn--bcher-kva.de` are one address.
 * @example normaliseEmail("Ana@Example.COM") // Result.succeed("ana@example.com")
 * @example normaliseEmail("ana@Bücher.de") // Result.succeed("ana@xn--bcher-kva.de")
 */
export function normaliseEmail(input: string): Result.Result<string, InvalidIdentifier> {
  const text = input.trim().normalize("NFC")
  const fail = (message: string) => Result.fail(new InvalidIdentifier({ kind: "email", message }))
  const at = text.lastIndexOf("@")
  if (at <= 0) return fail("not an e-mail address")
  const local = text.slice(0, at)
  const domain = asciiDomain(text.slice(at + 1))
  if (new TextEncoder().encode(local).length > 64 || !emailLocalPattern.test(local))
    return fail("the part before @ is not valid")
  const labels = domain?.split(".") ?? []
  const tld = labels[labels.length - 1] ?? ""
  if (
    labels.length < 2 ||
    !labels.every((label) => domainLabelPattern.test(label)) ||
    !tldPattern.test(tld)
  ) {
    return fail("the domain is not valid")
  }
  // Decomposed first, composed again last: lower-casing can undo a composition (J + caron becomes
  // j + caron, which composes to ǰ), so a lower-cased NFC text need not be NFC any more.
  const address = foldCase(`${local}@${domain}`.normalize("NFD").toLowerCase()).normalize("NFC")
  if (address.length > identifierLengthMax) return fail("not an e-mail address")
  return Result.succeed(address)
}

/**
 * The lower-case letters whose simple case folding (Unicode's CaseFolding.txt, statuses C and S) is
 * another letter, each with that letter, as two strings of the same length: after `toLowerCase`,
 * replacing these makes two spellings equal exactly when they are equal ignoring case. Without it
 * "σας" (a final sigma, what "ΣΑΣ" lower-cases to) and "σασ", or the micro sign and the Greek mu,
 * would be different addresses. Migrations 304 and 305 fold the addresses stored before.
 */
export const case_fold_from =
  "\u00b5\u017f\u0345\u03c2\u03d0\u03d1\u03d5\u03d6\u03f0\u03f1\u03f5\u1e9b\u1fbe" +
  // Old Cyrillic letter forms (rounded ve, long-legged de, narrow o, wide es, tall te, three-legged
  // te, tall hard sign, tall yat, unblended uk) and the long s t ligature (to the s t one):
  // migration 305 folds the addresses stored before.
  "\u1c80\u1c81\u1c82\u1c83\u1c84\u1c85\u1c86\u1c87\u1c88\ufb05"
export const case_fold_to =
  "\u03bc\u0073\u03b9\u03c3\u03b2\u03b8\u03c6\u03c0\u03ba\u03c1\u03b5\u1e61\u03b9" +
  "\u0432\u0434\u043e\u0441\u0442\u0442\u044a\u0463\ua64b\ufb06"
const caseFolds = new Map([...case_fold_from].map((from, i) => [from, case_fold_to[i] ?? from]))
const foldable = new RegExp(`[${case_fold_from}]`, "gu")

/** `text` (lower-cased already) with every letter of `case_fold_from` replaced by its fold. */
const foldCase = (text: string): string => text.replace(foldable, (c) => caseFolds.get(c) ?? c)

/**
 * What each network allows as a user name, so that a handle no one can hold (which would keep a
 * payment to it pending until it expires) is refused at once. Case is ignored (lower-cased after).
 */
const handleRules: Readonly<
  Record<(typeof handleNetworks)[number], { readonly pattern: RegExp; readonly rule: string }>
> = {
  x: { pattern: /^[a-z0-9_]{1,15}$/i, rule: "1 to 15 letters, digits or _" },
  telegram: {
    pattern: /^[a-z][a-z0-9_]{4,31}$/i,
    rule: "5 to 32 letters, digits or _, starting with a letter and not ending with _",
  },
  instagram: {
    pattern: /^[a-z0-9_.]{1,30}$/i,
    rule: "1 to 30 letters, digits, _ or ., not starting or ending with . nor with two in a row",
  },
}

/**
 * A handle `@<network>:<handle>` on a known network (aliases become the canonical name:
 * `@twitter:ana` is `@x:ana`), the name as the network allows it (see `handleRules`), lower-cased.
 * @example normaliseHandle("@Twitter:Ana_B") // Result.succeed("@x:ana_b")
 */
export function normaliseHandle(input: string): Result.Result<string, InvalidIdentifier> {
  const match = /^@([A-Za-z]+):(.+)$/.exec(input.trim())
  const fail = (message: string) => Result.fail(new InvalidIdentifier({ kind: "handle", message }))
  if (match === null) return fail("a handle is @<network>:<handle>, e.g. @telegram:ana_b")
  const network = networkAliases[(match[1] ?? "").toLowerCase()]
  if (network === undefined) return fail(`unknown network; one of ${handleNetworks.join(", ")}`)
  const name = match[2] ?? ""
  const { pattern, rule } = handleRules[network]
  const valid =
    pattern.test(name) &&
    !(network === "telegram" && name.endsWith("_")) &&
    !(network === "instagram" && (name.startsWith(".") || name.endsWith(".") || name.includes("..")))
  if (!valid) return fail(`an @${network}: handle is ${rule}`)
  return Result.succeed(`@${network}:${name.toLowerCase()}`)
}

/**
 * Normalises `value` as an identifier of `kind`.
 * @example normaliseIdentifier("phone", "0044 20 7946 0018") // Result.succeed("+442079460018")
 */
export function normaliseIdentifier(
  kind: IdentityKind,
  value: string,
): Result.Result<string, InvalidIdentifier> {
  switch (kind) {
    case "phone":
      return normalisePhone(value)
    case "email":
      return normaliseEmail(value)
    case "handle":
      return normaliseHandle(value)
  }
}

/**
 * Reads a payment recipient: a handle starts with `@`, an e-mail address contains `@`, anything
 * else must be a phone number.
 * @example parseRecipient("ana@example.com") // Result.succeed({ kind: "email", value: "ana@example.com" })
 */
export function parseRecipient(input: string): Result.Result<Identifier, InvalidIdentifier> {
  const text = input.trim()
  const kind: IdentityKind = text.startsWith("@") ? "handle" : text.includes("@") ? "email" : "phone"
  if (text.length === 0 || text.length > identifierLengthMax) {
    return Result.fail(
      new InvalidIdentifier({ kind: "recipient", message: "recipient must be 1-254 characters" }),
    )
  }
  if (kind === "phone" && !/[0-9]/.test(text)) {
    return Result.fail(
      new InvalidIdentifier({
        kind: "recipient",
        message:
          "recipient is a phone number with its country code (+14155550100), an e-mail address or a handle (@telegram:ana_b)",
      }),
    )
  }
  return Result.map(normaliseIdentifier(kind, text), (value) => ({ kind, value }))
}
