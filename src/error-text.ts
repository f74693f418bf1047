/**
 * What went wrong, as one line for a log or a health report, for any thrown value: an Error's
 * message (with its code, and its cause's message when it wraps one, as Effect's UnknownError
 * does), an object's `message`, else its JSON. `String(error)` gave "[object Object]" for pg-boss's
 * plain-object errors and "UnknownError: An error occurred in Effect.tryPromise" for wrapped ones.
 * @example errorText(new Error("connect ENOENT /data/pg/.s.PGSQL.5432")) // "connect ENOENT /data/pg/.s.PGSQL.5432"
 */
export const errorText = (error: unknown, depth = 0): string => {
  if (error instanceof Error) {
    const code = (error as { readonly code?: unknown }).code
    const own = `${error.message}${typeof code === "string" && !error.message.includes(code) ? ` (${code})` : ""}`
    const cause: unknown = error.cause
    if (cause === undefined || depth >= 3) return own || error.name
    const inner = errorText(cause, depth + 1)
    return own === "" || /An error occurred in Effect\./.test(own) ? inner : `${own}: ${inner}`
  }
  if (typeof error === "object" && error !== null) {
    const message = (error as { readonly message?: unknown }).message
    if (typeof message === "string") return message
    try {
      return JSON.stringify(error)
    } catch {
      return Object.prototype.toString.call(error)
    }
  }
  return String(error)
}
