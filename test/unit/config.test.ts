// Proves that the platform's and the CLI's configuration refuses what it cannot use and reads an
// empty variable as unset.
import * as path from "node:path"
import { describe, expect, it } from "vitest"
import { ConfigError, readConfig } from "../../src/config.ts"

describe("readConfig", () => {
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
