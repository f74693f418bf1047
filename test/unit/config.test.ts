// Proves that the platform's and the CLI's configuration refuses what it cannot use and reads an
// empty variable as unset.
import * as path from "node:path"
import { describe, expect, it } from "vitest"
import { ConfigError, readConfig } from "../../src/config.ts"

describe("readConfig", () => {
  it("reads TRUSTED_PROXY_HOPS as 0 to 10 proxies, 0 when unset", () => {
    expect(readConfig({}).trustedProxyHops).toBe(0)
    expect(readConfig({ TRUSTED_PROXY_HOPS: "0" }).trustedProxyHops).toBe(0)
    expect(readConfig({ TRUSTED_PROXY_HOPS: "2" }).trustedProxyHops).toBe(2)
    for (const bad of ["11", "-1", "one", "1.5"]) {
      expect(() => readConfig({ TRUSTED_PROXY_HOPS: bad })).toThrow(ConfigError)
    }
  })

  it("reads an empty DATA_DIR or DATABASE_URL as unset", () => {
    const config = readConfig({ DATA_DIR: "", DATABASE_URL: "" })
    expect(config.dataDir).toBe(path.resolve("./.data"))
    expect(config.databaseUrl).toBeUndefined()
  })

  it("takes a postgres:// or postgresql:// URL with a host, a Unix socket's directory included", () => {
    for (const url of [
      "postgres://u:p@db.internal:5432/platform",
      "postgresql://u@localhost/platform?sslmode=require",
      `postgres://u:p@${encodeURIComponent("/data/pg")}:5432/postgres`,
    ]) {
      expect(readConfig({ DATABASE_URL: url }).databaseUrl).toBe(url)
    }
  })

  it.each(["notaurl", "mysql://a@b/c", "postgres://", "http://db:5432/x"])(
    "refuses DATABASE_URL=%s, naming the variable",
    (url) => {
      expect(() => readConfig({ DATABASE_URL: url })).toThrow(ConfigError)
      expect(() => readConfig({ DATABASE_URL: url })).toThrow(/DATABASE_URL must be a PostgreSQL URL/)
    },
  )
})
