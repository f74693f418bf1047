// A request that fails because the database is out of reach is answered 503 database_unavailable;
// one that fails because a chain's node is out of reach (an HTTP client's error wrapping the same
// refused connection) is not the database's doing and must not be reported as it.
import { HttpRequestError } from "viem"
import { describe, expect, it } from "vitest"
import { databaseUnreachable } from "../../src/http/request.ts"

const refused = () =>
  Object.assign(new Error("connect ECONNREFUSED 127.0.0.1:8545"), {
    code: "ECONNREFUSED",
    syscall: "connect",
  })

describe("databaseUnreachable", () => {
  it("names a refused connection, a broken one and PostgreSQL's shutdown codes", () => {
    expect(databaseUnreachable(refused())).toContain("ECONNREFUSED")
    expect(databaseUnreachable(new Error("wrapped", { cause: refused() }))).toContain("ECONNREFUSED")
    expect(databaseUnreachable(new Error("Connection terminated unexpectedly"))).toBeDefined()
    expect(
      databaseUnreachable(Object.assign(new Error("terminating connection"), { code: "57P01" })),
    ).toBeDefined()
  })

  it("leaves a chain node's refused connection alone (fetch, viem, axios)", () => {
    const fetchFailed = new TypeError("fetch failed", { cause: refused() })
    expect(databaseUnreachable(fetchFailed)).toBeUndefined()
    expect(
      databaseUnreachable(new HttpRequestError({ url: "http://127.0.0.1:8545", cause: fetchFailed })),
    ).toBeUndefined()
    expect(databaseUnreachable(new Error("effect defect", { cause: fetchFailed }))).toBeUndefined()
    expect(
      databaseUnreachable(
        Object.assign(new Error("Request failed"), { isAxiosError: true, cause: refused() }),
      ),
    ).toBeUndefined()
    expect(databaseUnreachable(new Error("other"))).toBeUndefined()
  })
})
