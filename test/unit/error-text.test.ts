// Proves that errors reach logs and health reports as what went wrong, whatever was thrown.
import { Effect } from "effect"
import { describe, expect, it } from "vitest"
import { errorText } from "../../src/error-text.ts"

describe("errorText", () => {
  it("says what went wrong for an Error, a wrapped one, a plain object and anything else", async () => {
    const refused = Object.assign(new Error("connect ENOENT /data/pg/.s.PGSQL.5432"), { code: "ENOENT" })
    expect(errorText(refused)).toBe("connect ENOENT /data/pg/.s.PGSQL.5432")
    expect(errorText(Object.assign(new Error("timeout"), { code: "ETIMEDOUT" }))).toBe("timeout (ETIMEDOUT)")
    // Effect.tryPromise without `catch` wraps the rejection: its cause is what happened.
    const wrapped = await Effect.runPromise(
      Effect.flip(Effect.tryPromise(() => Promise.reject(new Error("the database is gone")))),
    )
    expect(String(wrapped)).toMatch(/An error occurred in Effect.tryPromise/)
    expect(errorText(wrapped)).toBe("the database is gone")
    expect(errorText(new Error("outer", { cause: new Error("inner") }))).toBe("outer: inner")
    expect(errorText({ message: "queue missing" })).toBe("queue missing")
    expect(errorText({ code: 42 })).toBe('{"code":42}')
    expect(errorText("plain")).toBe("plain")
    expect(errorText(undefined)).toBe("undefined")
  })
})
