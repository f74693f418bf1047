// Proves the custody vault on a real PostgreSQL: a master seed is created once per environment and
// survives reloads, environments never share keys, a wrong or swapped key fails loudly, racing
// first uses agree on one seed, no plaintext reaches the table, and the KEK resolves from the
// environment or a private development file.
import { randomBytes } from "node:crypto"
import * as fs from "node:fs/promises"
import * as os from "node:os"
import * as path from "node:path"
import { mnemonicToEntropy } from "@scure/bip39"
import { wordlist } from "@scure/bip39/wordlists/english.js"
import pg from "pg"
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from "vitest"
import { isValidAddress } from "../../domain/custody/derive.ts"
import { ConfigError } from "../../src/config.ts"
import {
  CustodyKekMismatch,
  custodyMigrations,
  loadOrCreateMasterMnemonic,
  loadOrCreateMasterSeed,
  makeCustody,
  resolveKek,
} from "../../src/custody/vault.ts"
import { runMigrations } from "../../src/db/migrate.ts"
import { freshDatabase, type TestDatabase } from "../support/db.ts"

let db: TestDatabase
beforeAll(async () => {
  db = await freshDatabase()
  await runMigrations(db.pool, custodyMigrations)
})
afterAll(async () => {
  await db.drop()
})
beforeEach(async () => {
  await db.pool.query("delete from platform_custody.master_seeds")
})

const newKek = (): Uint8Array => Uint8Array.from(randomBytes(32))
const rowCount = async (): Promise<number> => {
  const { rows } = await db.pool.query<{ n: number }>(
    "select count(*)::int as n from platform_custody.master_seeds",
  )
  return rows[0]?.n ?? -1
}

const racer_count = 8

/** Polls until `count` master seed inserts wait on a lock; bounded at about twenty seconds. */
const waitForBlockedInserts = async (count: number): Promise<void> => {
  for (let attempt = 0; attempt < 800; attempt++) {
    const { rows } = await db.pool.query<{ n: number }>(
      `select count(*)::int as n from pg_stat_activity
        where datname = current_database() and wait_event_type = 'Lock'
          and query like 'insert into platform_custody.master_seeds%'`,
    )
    if (rows[0]?.n === count) return
    await new Promise((resolve) => setTimeout(resolve, 25))
  }
  throw new Error(`fewer than ${count} inserts ever waited on the lock`)
}

describe("loadOrCreateMasterSeed", () => {
  it("creates a 64-byte seed on first use and returns the same seed on every later load", async () => {
    const kek = newKek()
    const first = await loadOrCreateMasterSeed(db.pool, "sandbox", kek)
    const second = await loadOrCreateMasterSeed(db.pool, "sandbox", kek)
    expect(first.length).toBe(64)
    expect(Buffer.from(second).equals(Buffer.from(first))).toBe(true)
    expect(await rowCount()).toBe(1)
  })

  it("gives sandbox and production different seeds and therefore different addresses", async () => {
    const custody = makeCustody(db.pool, newKek())
    for (const chain of ["ethereum", "tron", "solana"] as const) {
      const sandbox = await custody.addressFor("sandbox", chain, 0, 0)
      const production = await custody.addressFor("production", chain, 0, 0)
      expect(isValidAddress(chain, sandbox)).toBe(true)
      expect(isValidAddress(chain, production)).toBe(true)
      expect(production).not.toBe(sandbox)
    }
    expect(await rowCount()).toBe(2)
  })

  it("rejects a KEK that did not seal the stored seed, with a clear error", async () => {
    await loadOrCreateMasterSeed(db.pool, "production", newKek())
    const attempt = loadOrCreateMasterSeed(db.pool, "production", newKek())
    await expect(attempt).rejects.toBeInstanceOf(CustodyKekMismatch)
    await expect(attempt).rejects.toThrow(
      /^CUSTODY_KEK does not decrypt the stored master seed \(production\)/,
    )
    expect(await rowCount()).toBe(1)
  })

  it("refuses a sandbox ciphertext copied into the production row (the environment is bound)", async () => {
    const kek = newKek()
    await loadOrCreateMasterSeed(db.pool, "sandbox", kek)
    await loadOrCreateMasterSeed(db.pool, "production", kek)
    await db.pool.query(
      `update platform_custody.master_seeds as p
          set ciphertext = s.ciphertext, iv = s.iv, auth_tag = s.auth_tag
         from platform_custody.master_seeds as s
        where p.environment = 'production' and s.environment = 'sandbox'`,
    )
    await expect(loadOrCreateMasterSeed(db.pool, "production", kek)).rejects.toThrow(
      /does not decrypt the stored master seed \(production\): .*altered or moved/,
    )
  })

  it("creates exactly one seed when processes race on first use", async () => {
    const kek = newKek()
    const other = new pg.Pool({ connectionString: db.url, max: 10 })
    // A SHARE lock lets the loaders read (and find no row) but holds every insert, so all of them
    // generate a seed and try to store it before any insert lands: the race, made certain.
    const blocker = await db.pool.connect()
    try {
      await blocker.query("begin")
      await blocker.query("lock table platform_custody.master_seeds in share mode")
      const pools = [db.pool, other]
      const loading = Promise.all(
        Array.from({ length: racer_count }, (_, i) =>
          loadOrCreateMasterSeed(pools[i % 2] ?? db.pool, "sandbox", kek),
        ),
      )
      await waitForBlockedInserts(racer_count)
      await blocker.query("commit")
      const seeds = await loading
      const distinct = new Set(seeds.map((seed) => Buffer.from(seed).toString("hex")))
      expect(distinct.size).toBe(1)
      expect(await rowCount()).toBe(1)
    } finally {
      blocker.release()
      await other.end()
    }
  })

  it("stores neither the mnemonic, its entropy nor the seed in plaintext", async () => {
    const kek = newKek()
    const mnemonic = await loadOrCreateMasterMnemonic(db.pool, "production", kek)
    const seed = await loadOrCreateMasterSeed(db.pool, "production", kek)
    const entropy = mnemonicToEntropy(mnemonic, wordlist)
    expect(mnemonic.split(" ")).toHaveLength(24)
    const { rows } = await db.pool.query<{ ciphertext: Buffer; whole: string }>(
      `select ciphertext, row_to_json(m)::text as whole from platform_custody.master_seeds m
        where environment = 'production'`,
    )
    const row = rows[0]
    if (row === undefined) throw new Error("no production row")
    expect(row.ciphertext).toHaveLength(32)
    expect(row.ciphertext.equals(Buffer.from(entropy))).toBe(false)
    for (const secret of [Buffer.from(entropy), Buffer.from(seed), Buffer.from(mnemonic, "utf8")]) {
      expect(row.ciphertext.includes(secret)).toBe(false)
      expect(row.whole).not.toContain(secret.toString("hex"))
    }
    expect(row.whole).not.toContain(mnemonic.split(" ").slice(0, 3).join(" "))
    expect(row.whole).not.toContain(Buffer.from(kek).toString("hex"))
  })
})

describe("makeCustody", () => {
  it("derives the same address after a restart (a new custody over the same table)", async () => {
    const kek = newKek()
    const before = await makeCustody(db.pool, kek).addressFor("sandbox", "solana", 4, 9)
    const after = await makeCustody(db.pool, kek).addressFor("sandbox", "solana", 4, 9)
    expect(after).toBe(before)
  })

  it("keeps the decrypted seed in memory after its first use", async () => {
    const custody = makeCustody(db.pool, newKek())
    const first = await custody.addressFor("production", "ethereum", 1, 2)
    // With the row gone, only the cached seed can give the same address back.
    await db.pool.query("delete from platform_custody.master_seeds")
    expect(await custody.addressFor("production", "ethereum", 1, 2)).toBe(first)
    expect(await custody.addressFor("production", "polygon", 1, 2)).toBe(first)
    expect(await rowCount()).toBe(0)
  })

  it("retries a failed load instead of caching the failure", async () => {
    const kek = newKek()
    await loadOrCreateMasterSeed(db.pool, "sandbox", newKek())
    const custody = makeCustody(db.pool, kek)
    await expect(custody.addressFor("sandbox", "tron", 0, 0)).rejects.toBeInstanceOf(CustodyKekMismatch)
    await db.pool.query("delete from platform_custody.master_seeds")
    expect(isValidAddress("tron", await custody.addressFor("sandbox", "tron", 0, 0))).toBe(true)
  })
})

describe("resolveKek", () => {
  let dataDir: string
  beforeEach(async () => {
    dataDir = await fs.mkdtemp(path.join(os.tmpdir(), "custody-kek-"))
  })
  afterEach(async () => {
    await fs.rm(dataDir, { recursive: true, force: true })
  })

  const key = Buffer.from("000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f", "hex")

  it("reads CUSTODY_KEK as 64 hex characters or as base64 of 32 bytes", async () => {
    for (const value of [key.toString("hex"), key.toString("hex").toUpperCase(), key.toString("base64")]) {
      const resolved = await resolveKek({ env: { CUSTODY_KEK: value }, dataDir })
      expect(resolved.source).toBe("env")
      expect(Buffer.from(resolved.kek).equals(key)).toBe(true)
    }
    expect(await fs.readdir(dataDir)).toEqual([])
  })

  const badValues: ReadonlyArray<{ why: string; value: string }> = [
    { why: "too short", value: "abc" },
    { why: "63 hex characters", value: key.toString("hex").slice(1) },
    { why: "not hex", value: `${key.toString("hex").slice(2)}zz` },
    { why: "base64 of 31 bytes", value: key.subarray(1).toString("base64") },
    { why: "base64 with junk", value: `${key.toString("base64")}!` },
  ]
  for (const { why, value } of badValues) {
    it(`rejects a CUSTODY_KEK that is ${why}, naming the variable but not the value`, async () => {
      const attempt = resolveKek({ env: { CUSTODY_KEK: value }, dataDir })
      await expect(attempt).rejects.toBeInstanceOf(ConfigError)
      await expect(attempt).rejects.toThrow(
        /^CUSTODY_KEK must be 64 hex characters or the base64 of 32 bytes/,
      )
      await expect(attempt).rejects.not.toThrow(value)
    })
  }

  it("generates a private key file when CUSTODY_KEK is unset, and reuses it", async () => {
    const first = await resolveKek({ env: {}, dataDir })
    const second = await resolveKek({ env: { CUSTODY_KEK: "" }, dataDir })
    expect(first.source).toBe("file")
    expect(first.kek).toHaveLength(32)
    expect(Buffer.from(second.kek).equals(Buffer.from(first.kek))).toBe(true)
    const stat = await fs.stat(path.join(dataDir, "custody.kek"))
    expect(stat.mode & 0o777).toBe(0o600)
    expect(await fs.readdir(dataDir)).toEqual(["custody.kek"])
  })

  it("agrees on one key file when processes race to create it", async () => {
    const nested = path.join(dataDir, "not", "yet", "there")
    const resolved = await Promise.all(
      Array.from({ length: 8 }, () => resolveKek({ env: {}, dataDir: nested })),
    )
    expect(new Set(resolved.map((r) => Buffer.from(r.kek).toString("hex"))).size).toBe(1)
    expect(await fs.readdir(nested)).toEqual(["custody.kek"])
  })

  it("rejects a corrupt key file, naming the file", async () => {
    const file = path.join(dataDir, "custody.kek")
    await fs.writeFile(file, "not a key\n", { mode: 0o600 })
    await expect(resolveKek({ env: {}, dataDir })).rejects.toThrow(`${file} must be 64 hex characters`)
  })
})
