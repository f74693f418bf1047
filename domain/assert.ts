/**
 * Assertions for programmer errors. A broken assertion means the code is wrong, not the input, so it
 * crashes instead of returning a typed error: carrying on would write or trust a corrupt ledger.
 * Operating errors (bad input, insufficient funds) are typed results, never assertions.
 */

/** Thrown only by `assert`; never caught by domain code. */
export class AssertionFailed extends Error {
  override readonly name = "AssertionFailed"
}

/**
 * Crashes with `message` unless `condition` holds. Pass a constant message on hot paths: a template
 * string would be built on every call, even when the assertion holds.
 * @example assert(amount > 0n, "a transfer amount is positive")
 */
export function assert(condition: boolean, message: string): asserts condition {
  if (!condition) throw new AssertionFailed(message)
}

/** Closes a switch over a union: the compiler proves it unreachable, the runtime crashes if not. */
export function assertNever(value: never): never {
  const text = JSON.stringify(value, (_key, item: unknown) =>
    typeof item === "bigint" ? item.toString() : item,
  )
  throw new AssertionFailed(`unexpected value: ${text}`)
}
