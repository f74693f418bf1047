/**
 * Small pieces every handler uses: database calls as effects (a database fault is a defect, answered
 * 500), list parameters, money and token parsing with precise 400s, environment checks.
 */

import { Effect, Result } from "effect"
import type { HttpServerResponse } from "effect/http"
import type pg from "pg"
import { parseAmount, parseAmountNumber } from "../../../domain/money/amount.ts"
import type { Asset } from "../../../domain/money/asset.ts"
import type { AmountError } from "../../../domain/money/errors.ts"
import {
  chainTokenAsset,
  chainTokens,
  isTokenSymbol,
  isWalletChain,
} from "../../../domain/platform/tokens.ts"
import type { Caller } from "../../platform/credentials.ts"
import { ApiError, badRequest, CurrentRequestId, errorResponse } from "../errors.ts"
import {
  type LengthBounds,
  list_limit_default,
  list_limit_max,
  metadata_keys_max,
  textLengths,
} from "../limits.ts"

/** A database call; its failure is a defect (500) unless `onError` recognises it. */
export const db = <A>(run: () => Promise<A>): Effect.Effect<A> => Effect.promise(run)

/** The PostgreSQL error code of `error` (e.g. 23505 unique violation), if it has one. */
export const pgCode = (error: unknown): string | undefined =>
  typeof error === "object" && error !== null && "code" in error && typeof error.code === "string"
    ? error.code
    : undefined

/** A database call whose unique violation (23505) becomes `onConflict`. */
export const dbUnique = <A>(run: () => Promise<A>, onConflict: () => ApiError): Effect.Effect<A, ApiError> =>
  Effect.tryPromise({ try: run, catch: (error) => error }).pipe(
    Effect.catch((error) => (pgCode(error) === "23505" ? Effect.fail(onConflict()) : Effect.die(error))),
  )

/** The lists paged by `starting_after`: the table of their items and its id column. */
const cursorTables = {
  transactions: ["platform.payments", "transaction_id"],
  wallets: ["platform.wallets", "wallet_id"],
  identities: ["platform.identities", "identity_id"],
  deposits: ["platform.chain_deposits", "deposit_id"],
  transfers: ["platform.chain_transfers", "transfer_id"],
  webhooks: ["platform.webhooks", "webhook_id"],
  webhook_deliveries: ["platform.webhook_deliveries", "delivery_id"],
} as const

/** The 400 for a `starting_after` that names no item of the list. */
export const invalidCursor = (starting_after: string) =>
  badRequest(
    "invalid_cursor",
    `starting_after must be the id of an item of this list (the next_cursor of the page before); ${JSON.stringify(starting_after.slice(0, 80))} is not one.`,
    "starting_after",
  )

/**
 * A list's `starting_after`: absent or empty means the first page; anything else must be the id of
 * an item of that list that the caller can see (its tenant and environment), else 400
 * `invalid_cursor`, the same for an id that never existed and another tenant's. (A cursor that
 * named nothing used to page from wherever it sorted: an empty page that looked like the end.)
 */
export const listCursor = (
  pool: pg.Pool,
  list: keyof typeof cursorTables,
  caller: Caller,
  starting_after: string | undefined,
  /** For a list inside a parent (an endpoint's deliveries): the parent's column and id. */
  within?: { readonly column: "webhook_id"; readonly id: string },
): Effect.Effect<string | undefined, ApiError> => {
  if (starting_after === undefined || starting_after === "") return Effect.succeed(undefined)
  const [table, column] = cursorTables[list]
  const parent = within === undefined ? "" : ` and ${within.column} = $4`
  return Effect.flatMap(
    db(() =>
      pool.query(
        `select 1 from ${table} where tenant_id = $1 and environment = $2 and ${column} = $3${parent}`,
        [caller.tenant_id, caller.environment, starting_after, ...(within === undefined ? [] : [within.id])],
      ),
    ),
    (found) =>
      found.rows.length > 0 ? Effect.succeed(starting_after) : Effect.fail(invalidCursor(starting_after)),
  )
}

/** `limit` from a query string: 1..100, default 20. */
export const parseLimit = (text: string | undefined): Effect.Effect<number, ApiError> => {
  if (text === undefined) return Effect.succeed(list_limit_default)
  const value = Number(text)
  return /^\d+$/.test(text) && value >= 1 && value <= list_limit_max
    ? Effect.succeed(value)
    : Effect.fail(
        badRequest("invalid_limit", `limit must be an integer from 1 to ${list_limit_max}.`, "limit"),
      )
}

const amountCodes: Readonly<Record<AmountError["_tag"], string>> = {
  InvalidAmountFormat: "invalid_amount",
  TooManyDecimals: "too_many_decimals",
  NegativeAmount: "amount_negative",
  ZeroAmount: "amount_zero",
  AmountTooLarge: "amount_too_large",
  ImpreciseAmountNumber: "amount_imprecise",
}

const amountMessage = (error: AmountError): string => {
  switch (error._tag) {
    case "InvalidAmountFormat":
      return `amount ${JSON.stringify(error.input)} ${error.reason}.`
    case "TooManyDecimals":
      return `amount ${error.input} has ${error.decimals} decimals; this token has ${error.max}.`
    case "NegativeAmount":
      return "amount must be positive."
    case "ZeroAmount":
      return "amount must be greater than zero."
    case "AmountTooLarge":
      return "amount is too large."
    case "ImpreciseAmountNumber":
      return `amount ${error.input} has more significant digits than a JSON number carries exactly; send it as a string.`
  }
}

/**
 * Parses a request amount (JSON number or decimal string) into minor units of `asset`, at most
 * `whole_units_max` whole units.
 */
export const parseMoney = (
  amount: number | string,
  asset: Asset,
  whole_units_max: bigint,
  param = "amount",
): Effect.Effect<bigint, ApiError> => {
  const parsed =
    typeof amount === "number"
      ? parseAmountNumber(amount, asset.decimals)
      : parseAmount(amount, asset.decimals)
  if (Result.isFailure(parsed)) {
    return Effect.fail(badRequest(amountCodes[parsed.failure._tag], amountMessage(parsed.failure), param))
  }
  if (parsed.success > whole_units_max * 10n ** BigInt(asset.decimals)) {
    return Effect.fail(
      badRequest("amount_too_large", `amount may be at most ${whole_units_max} ${asset.symbol}.`, param),
    )
  }
  return Effect.succeed(parsed.success)
}

/** The asset of `token` on `chain`, or a 400 naming the tokens that chain carries. */
export const tokenOn = (chain: string, token: string, param = "token"): Effect.Effect<Asset, ApiError> => {
  if (!isWalletChain(chain)) {
    return Effect.fail(
      badRequest("unknown_token", `No tokens are carried on ${JSON.stringify(chain)}.`, param),
    )
  }
  const asset = isTokenSymbol(token) ? chainTokenAsset(chain, token) : null
  if (asset !== null) return Effect.succeed(asset)
  const carried = chainTokens(chain).map((candidate) => candidate.symbol)
  return Effect.fail(
    badRequest(
      "unknown_token",
      `Unknown token ${JSON.stringify(token)} on ${chain}; one of ${carried.join(", ")}.`,
      param,
    ),
  )
}

/** 403 outside the sandbox. */
export const requireSandbox = (caller: Caller): Effect.Effect<void, ApiError> =>
  caller.environment === "sandbox"
    ? Effect.void
    : Effect.fail(
        new ApiError({
          status: 403,
          code: "sandbox_only",
          message: "This endpoint exists only in the sandbox; production keys cannot use it.",
        }),
      )

/**
 * Characters (Unicode code points) in `text`: an emoji is one, though JavaScript's `length` counts
 * its two UTF-16 units. Limits the API documents in characters are checked with this.
 * @example characterCount("a😀") // 2
 */
export const characterCount = (text: string): number => {
  let count = text.length
  for (let index = 0; index < text.length - 1; index++) {
    const unit = text.charCodeAt(index)
    if (unit < 0xd800 || unit > 0xdbff) continue
    const next = text.charCodeAt(index + 1)
    if (next >= 0xdc00 && next <= 0xdfff) {
      count -= 1
      index += 1
    }
  }
  return count
}

/** Whether `text` has more than `max` characters (code points); cheap when it plainly has not. */
export const longerThan = (text: string, max: number): boolean =>
  text.length > max && characterCount(text) > max

/** A trimmed one-line string within `bounds` (printable: see `unprintable`), or a 400 for `param`. */
export const text = (value: string, param: string, bounds: LengthBounds): Effect.Effect<string, ApiError> => {
  const { min, max } = bounds
  const trimmed = value.trim()
  if (trimmed.length < min || longerThan(trimmed, max))
    return Effect.fail(
      badRequest("invalid_parameter", `${param} must be ${min} to ${max} characters.`, param),
    )
  // Names and labels are one line shown to people: control characters (line breaks, BEL...) and
  // bidirectional overrides (which make "\u202Eevil" display reversed) have no place in them.
  return unprintable.test(trimmed)
    ? Effect.fail(
        badRequest(
          "invalid_parameter",
          `${param} must be one line of printable text: no control characters or bidirectional overrides.`,
          param,
        ),
      )
    : Effect.succeed(trimmed)
}

/** Control characters (C0, DEL, C1) and the bidirectional embedding, override and isolate marks. */
export const unprintable = /[\p{Cc}\u202A-\u202E\u2066-\u2069]/u

/** Answers a handler's `ApiError` with its error response (handlers declare no error schemas). */
export const respond = <A, R>(
  effect: Effect.Effect<A, ApiError, R>,
): Effect.Effect<A | HttpServerResponse.HttpServerResponse, never, R> =>
  Effect.catch(effect, (error) =>
    Effect.gen(function* () {
      return errorResponse(error, yield* CurrentRequestId)
    }),
  )

/** A payment's or transfer's `metadata`: at most 50 keys of 1-40 characters, values up to 500. */
export const checkMetadata = (metadata: Readonly<Record<string, string>>): Effect.Effect<void, ApiError> => {
  const entries = Object.entries(metadata)
  if (entries.length > metadata_keys_max) {
    return Effect.fail(
      badRequest("invalid_metadata", `metadata holds at most ${metadata_keys_max} keys.`, "metadata"),
    )
  }
  for (const [key, value] of entries) {
    if (key.includes("\u0000")) {
      return Effect.fail(
        badRequest(
          "invalid_metadata",
          "metadata keys must not contain the NUL character (U+0000).",
          `metadata.${key.replaceAll("\u0000", "\\u0000")}`,
        ),
      )
    }
    if (key.length < textLengths.metadata_key.min || longerThan(key, textLengths.metadata_key.max)) {
      return Effect.fail(
        badRequest(
          "invalid_metadata",
          `metadata keys are ${textLengths.metadata_key.min} to ${textLengths.metadata_key.max} characters.`,
          `metadata.${key}`,
        ),
      )
    }
    if (longerThan(value, textLengths.metadata_value.max)) {
      return Effect.fail(
        badRequest(
          "invalid_metadata",
          `metadata values are at most ${textLengths.metadata_value.max} characters.`,
          `metadata.${key}`,
        ),
      )
    }
  }
  return Effect.void
}
