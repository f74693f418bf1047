/**
 * What `JSON.parse` silently forgives in a request body and a payments API must not: a key named
 * twice in one object (the last one wins, so a proxy that reads the first sees another request), a
 * number whose text says something its double does not (`0.99999999999999999` parses as 1, `1e400`
 * as Infinity), and a string with an unpaired surrogate (`"\ud800"`: not Unicode, PostgreSQL's
 * JSON refuses it). One pass over the text, before the body is decoded; a body that is not JSON at
 * all is left to the decoder, which says so.
 */
import { withoutTrailingZeros } from "../money/amount.ts"

/** Why a body is refused: a code for the error body, a message, and where (`metadata.order_id`). */
export interface JsonBodyProblem {
  readonly code:
    | "duplicate_key"
    | "amount_imprecise"
    | "number_imprecise"
    | "invalid_string"
    | "nested_too_deep"
    | "too_many_members"
  readonly message: string
  readonly param: string | undefined
}

/** Deeper nesting is refused: no request schema comes near it, and it bounds the recursion. */
export const json_depth_max = 64

/**
 * More fields in one object, or items in one list, are refused (400 `too_many_members`), and more
 * than `json_members_total_max` in the whole body: no request takes nearly as many (metadata, the
 * largest object, holds 50), and stopping here bounds what the scan and the schemas after it spend
 * on one body, before its key is even checked.
 */
export const json_members_max = 256
export const json_members_total_max = 4_096

/**
 * A double carries every decimal of at most 15 significant digits exactly (its shortest text is
 * that decimal), within its range: numerals longer than this are compared in full, since a run of
 * zeros can take a short one out of range (`0.000…001` with 400 zeros reads as 0).
 */
const exact_digits_max = 15
const short_numeral_length_max = 24

class NotJson extends Error {}

class Refused extends Error {
  readonly problem: JsonBodyProblem
  constructor(problem: JsonBodyProblem) {
    super(problem.message)
    this.problem = problem
  }
}

const tooManyMembers = (path: string | undefined, what: "fields" | "items"): Refused =>
  new Refused({
    code: "too_many_members",
    message: `${path === undefined ? "The request body" : `The ${what === "fields" ? "object" : "list"} at ${path}`} has more than ${json_members_max} ${what}; no request takes that many.`,
    param: path,
  })

const tooManyInAll = (): Refused =>
  new Refused({
    code: "too_many_members",
    message: `The request body has more than ${json_members_total_max} fields and items in all; no request takes that many.`,
    param: undefined,
  })

const join = (path: string | undefined, segment: string): string =>
  path === undefined ? segment : `${path}.${segment}`

/** Whether the number written as `text` is exactly the double `JSON.parse` makes of it. */
const numberIsExact = (text: string): boolean => {
  let digits = 0
  let leading = true
  for (let index = 0; index < text.length; index++) {
    const c = text.charCodeAt(index)
    if (c === 101 || c === 69) return sameValue(text) // e, E: let the comparison decide
    if (c < 48 || c > 57) continue // sign, point
    if (leading && c === 48) continue
    leading = false
    digits += 1
  }
  return (digits <= exact_digits_max && text.length <= short_numeral_length_max) || sameValue(text)
}

/**
 * A decimal numeral (JSON's grammar, or what `String(number)` writes) reduced to one form per
 * value: its significant digits and the power of ten of the last one. `0.50`, `5e-1` and `.5e0`
 * all give `5e-1`; zero of either sign gives `0`.
 */
const canonicalDecimal = (text: string): string => {
  const match = /^(-?)(\d*)(?:\.(\d*))?(?:[eE]([+-]?\d+))?$/.exec(text)
  if (match === null) return text
  const [, sign = "", whole = "", fraction = "", exponent = "0"] = match
  const all = `${whole}${fraction}`.replace(/^0+/, "")
  if (all === "") return "0"
  const digits = withoutTrailingZeros(all)
  const power = Number(exponent) - fraction.length + (all.length - digits.length)
  return `${sign}${digits}e${power}`
}

const sameValue = (text: string): boolean => {
  const value = Number(text)
  return Number.isFinite(value) && canonicalDecimal(text) === canonicalDecimal(String(value))
}

/** The scanner: `index` walks `text`; every method leaves it just past what it read. */
class Scanner {
  index = 0
  /** Fields and items read so far, in the whole body. */
  members = 0
  readonly text: string
  constructor(text: string) {
    this.text = text
  }

  whitespace(): void {
    const text = this.text
    while (this.index < text.length) {
      const c = text.charCodeAt(this.index)
      if (c !== 32 && c !== 10 && c !== 13 && c !== 9) return
      this.index++
    }
  }

  /** A string token: its value, decoded only when it has escapes (checked for lone surrogates). */
  string(path: string | undefined, key: boolean): string {
    const text = this.text
    const start = this.index
    this.index++ // the opening quote
    let escaped = false
    while (this.index < text.length) {
      const c = text.charCodeAt(this.index)
      if (c === 34) {
        this.index++
        if (!escaped) return text.slice(start + 1, this.index - 1)
        const value = JSON.parse(text.slice(start, this.index)) as string
        if (!value.isWellFormed()) {
          const where = key ? join(path, value.toWellFormed()) : path
          throw new Refused({
            code: "invalid_string",
            message: `The ${key ? "key" : "string"} ${where === undefined ? "" : `at ${where} `}has an unpaired UTF-16 surrogate (an escape such as \\ud800 alone); it is not Unicode text.`,
            param: where,
          })
        }
        return value
      }
      if (c === 92) {
        escaped = true
        this.index++ // the escaped character is skipped with the backslash
      }
      this.index++
    }
    throw new NotJson()
  }

  /** `depth`: the containers around the value (0 for the body itself). */
  value(path: string | undefined, depth: number): void {
    this.whitespace()
    const c = this.text.charCodeAt(this.index)
    // A container here would be level depth + 1, empty or not.
    if ((c === 123 || c === 91) && depth >= json_depth_max) {
      throw new Refused({
        code: "nested_too_deep",
        message: `The request body nests deeper than ${json_depth_max} levels.`,
        param: undefined,
      })
    }
    if (c === 123) this.object(path, depth)
    else if (c === 91) this.array(path, depth)
    else if (c === 34) this.string(path, false)
    else if (c === 45 || (c >= 48 && c <= 57)) this.number(path)
    else this.literal()
  }

  object(path: string | undefined, depth: number): void {
    this.index++
    this.whitespace()
    if (this.text.charCodeAt(this.index) === 125) {
      this.index++
      return
    }
    const keys = new Set<string>()
    while (true) {
      this.whitespace()
      if (this.text.charCodeAt(this.index) !== 34) throw new NotJson()
      const key = this.string(path, true)
      const where = join(path, key)
      if (keys.has(key)) {
        throw new Refused({
          code: "duplicate_key",
          message: `The request body names the field ${JSON.stringify(where)} more than once; send each field once.`,
          param: where,
        })
      }
      if (keys.size >= json_members_max) throw tooManyMembers(path, "fields")
      if (++this.members > json_members_total_max) throw tooManyInAll()
      keys.add(key)
      this.whitespace()
      if (this.text.charCodeAt(this.index) !== 58) throw new NotJson()
      this.index++
      this.value(where, depth + 1)
      this.whitespace()
      const next = this.text.charCodeAt(this.index++)
      if (next === 125) return
      if (next !== 44) throw new NotJson()
    }
  }

  array(path: string | undefined, depth: number): void {
    this.index++
    this.whitespace()
    if (this.text.charCodeAt(this.index) === 93) {
      this.index++
      return
    }
    for (let item = 0; ; item++) {
      if (item >= json_members_max) throw tooManyMembers(path, "items")
      if (++this.members > json_members_total_max) throw tooManyInAll()
      this.value(join(path, String(item)), depth + 1)
      this.whitespace()
      const next = this.text.charCodeAt(this.index++)
      if (next === 93) return
      if (next !== 44) throw new NotJson()
    }
  }

  number(path: string | undefined): void {
    const text = this.text
    const start = this.index
    while (this.index < text.length) {
      const c = text.charCodeAt(this.index)
      // digits, minus, plus, point, e, E
      if ((c >= 48 && c <= 57) || c === 45 || c === 43 || c === 46 || c === 101 || c === 69) this.index++
      else break
    }
    const token = text.slice(start, this.index)
    if (numberIsExact(token)) return
    const amount = path !== undefined && (path === "amount" || path.endsWith(".amount"))
    throw new Refused({
      code: amount ? "amount_imprecise" : "number_imprecise",
      message:
        `The number ${token.length > 40 ? `${token.slice(0, 40)}...` : token}${path === undefined ? "" : ` at ${path}`} ` +
        "cannot be carried exactly by a JSON number (it would be read as " +
        `${String(Number(token))}); send it as a decimal string.`,
      param: path,
    })
  }

  literal(): void {
    const text = this.text
    for (const word of ["true", "false", "null"]) {
      if (text.startsWith(word, this.index)) {
        this.index += word.length
        return
      }
    }
    throw new NotJson()
  }
}

/**
 * The first thing wrong with a JSON body that `JSON.parse` would accept, or undefined when there is
 * nothing (or when the text is not JSON at all: the decoder reports that).
 *
 * @example
 * jsonBodyProblem('{"amount":"1","amount":"2"}') // { code: "duplicate_key", param: "amount", ... }
 * jsonBodyProblem('{"amount":0.99999999999999999}') // { code: "amount_imprecise", ... }
 */
export const jsonBodyProblem = (text: string): JsonBodyProblem | undefined => {
  const scanner = new Scanner(text)
  try {
    scanner.value(undefined, 0)
    return undefined
  } catch (error) {
    if (error instanceof Refused) return error.problem
    if (error instanceof NotJson || error instanceof SyntaxError) return undefined
    throw error
  }
}
