// Every endpoint behind the Authentication middleware names the scope it needs: the middleware lets
// a request through when an endpoint names none, so an endpoint added without `scoped(...)` would
// be open to every key of the tenant. Walks the whole API, not a sample.
import { Context } from "effect"
import { HttpApi } from "effect/http-api"
import { describe, expect, it } from "vitest"
import { apiScopes } from "../../domain/platform/scopes.ts"
import { Authentication, PlatformApi, RequiredScope } from "../../src/http/api.ts"

describe("the API's endpoints", () => {
  it("name one of the documented scopes wherever a key is required, and only there", () => {
    const unscoped: Array<string> = []
    const scopedOpen: Array<string> = []
    let authenticated = 0
    HttpApi.reflect(PlatformApi, {
      onGroup: () => {},
      onEndpoint: ({ endpoint, middleware }) => {
        const name = `${endpoint.method} ${endpoint.path}`
        const scope = Context.getOrUndefined(endpoint.annotations, RequiredScope)
        if ((middleware as ReadonlySet<unknown>).has(Authentication)) {
          authenticated += 1
          if (scope === undefined || !(apiScopes as ReadonlyArray<string>).includes(scope))
            unscoped.push(name)
        } else if (scope !== undefined) scopedOpen.push(name)
      },
    })
    expect(authenticated).toBeGreaterThan(30)
    expect(unscoped).toEqual([])
    expect(scopedOpen).toEqual([])
  })
})
