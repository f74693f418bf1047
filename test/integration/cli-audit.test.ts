// The auditor CLI against what a mutation review found untested: a stream exported across its
// 1,000-event pages, `verify` refusing a well-chained ledger that breaks a ledger rule and a stream
// whose last event was replaced (the head's hash put back), and a production ledger exported by
// `--ledger <tenant>:production`.
import { spawn } from "node:child_process"
import * as path from "node:path"
import { Effect } from "effect"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import {
  makePostgresEventStore,
  type PostgresEventStore,
} from "../../adapters/eventstore/postgres/event-store.ts"
import { uuidv7 } from "../../src/ids.ts"
import { freshDatabase, type TestDatabase } from "../support/db.ts"
import { syntheticLedger } from "../support/projections-fixture.ts"
import { newEvents } from "./event-store-contract.ts"

const cli = path.resolve(import.meta.dirname, "../../src/cli/main.ts")

let db: TestDatabase
let store: PostgresEventStore
beforeAll(async () => {
  db = await freshDatabase()
  store = makePostgresEventStore(db.pool)
})
afterAll(async () => {
  await Effect.runPromise(store.close)
  await db.drop()
})

const runCli = (args: ReadonlyArray<string>, url: string) =>
  new Promise<{ code: number | null; stdout: string; stderr: string }>((resolve, reject) => {
    const child = spawn(process.execPath, [cli, ...args], {
      env: { ...process.env, DATABASE_URL: url },
      stdio: ["ignore", "pipe", "pipe"],
    })
    let stdout = ""
    let stderr = ""
    child.stdout.setEncoding("utf8").on("data", (c: string) => {
      stdout += c
    })
    child.stderr.setEncoding("utf8").on("data", (c: string) => {
      stderr += c
    })
    child.on("error", reject)
    child.on("close", (code) => resolve({ code, stdout, stderr }))
  })

describe("the ledger CLI", () => {
  it("exports a stream of more than one page (1,000 events) whole, each event once", async () => {
    const stream_id = "big-stream"
    const events = newEvents("big", 2_100)
    for (let from = 0; from < events.length; from += 500) {
      await Effect.runPromise(store.append(stream_id, "any", events.slice(from, from + 500)))
    }
    const result = await runCli(["export", "--stream", stream_id], db.url)
    expect(result.code).toBe(0)
    const versions = result.stdout
      .trimEnd()
      .split("\n")
      .map((line) => (JSON.parse(line) as { stream_version: number }).stream_version)
    expect(versions).toEqual(Array.from({ length: 2_100 }, (_, i) => i + 1))
  }, 120_000)

  it("verify fails a ledger whose hash chain is intact but which breaks a ledger rule (an overdraft)", async () => {
    const own = await freshDatabase()
    const ownStore = makePostgresEventStore(own.pool)
    try {
      const ledger = syntheticLedger({
        tenant: "forged",
        environment: "sandbox",
        seed: 5,
        operation_count: 20,
      })
      await Effect.runPromise(ownStore.append(ledger.stream_id, "no_stream", ledger.events))
      expect((await runCli(["verify"], own.url)).code).toBe(0)
      // A credit from the world to a wallet, turned around and made huge: the wallet is overdrawn.
      const credit = ledger.events.find(
        (e) =>
          e.event_type === "TransferCreated" &&
          ledger.accounts.get(String(e.data.credit_account_id))?.kind === "wallet" &&
          ledger.accounts.get(String(e.data.debit_account_id))?.kind === "world",
      )
      if (credit === undefined) throw new Error("no world -> wallet transfer")
      const forged = {
        ...credit,
        event_id: uuidv7(),
        data: {
          ...credit.data,
          transfer_id: uuidv7(),
          debit_account_id: credit.data.credit_account_id,
          credit_account_id: credit.data.debit_account_id,
          amount: "1000000000000000000000",
          created_at: "2030-01-01T00:00:00.000Z",
        },
      }
      // Appended through the store: hashed and chained like any event.
      await Effect.runPromise(ownStore.append(ledger.stream_id, "any", [forged]))
      const result = await runCli(["verify"], own.url)
      expect(result.code).toBe(1)
      expect(result.stdout).toMatch(/ledger rule broken/)
    } finally {
      await Effect.runPromise(ownStore.close)
      await own.drop()
    }
  }, 120_000)

  it("verify fails a stream whose last event was replaced by another (the chain intact, the head's hash not)", async () => {
    const own = await freshDatabase()
    const ownStore = makePostgresEventStore(own.pool)
    try {
      await Effect.runPromise(ownStore.append("probe", "no_stream", newEvents("r", 2)))
      expect((await runCli(["verify"], own.url)).code).toBe(0)
      const client = await own.pool.connect()
      try {
        const head = await client.query<{ last_hash: Buffer }>(
          "select last_hash from streams where stream_id = 'probe'",
        )
        await client.query("alter table events disable trigger events_append_only")
        await client.query("delete from events where stream_id = 'probe' and stream_version = 2")
        await client.query(
          `update streams set version = 1,
             last_hash = (select hash from events where stream_id = 'probe' and stream_version = 1)
           where stream_id = 'probe'`,
        )
        await client.query("alter table events enable trigger events_append_only")
        await Effect.runPromise(ownStore.append("probe", 1, newEvents("other", 1)))
        // Whoever replaced it put the head's hash back as it was.
        await client.query("update streams set last_hash = $1 where stream_id = 'probe'", [
          head.rows[0]?.last_hash,
        ])
      } finally {
        client.release()
      }
      const result = await runCli(["verify"], own.url)
      expect(result.code).toBe(1)
      expect(result.stdout).toMatch(/the events were replaced/)
    } finally {
      await Effect.runPromise(ownStore.close)
      await own.drop()
    }
  }, 120_000)

  it("exports a production ledger by --ledger <tenant>:production", async () => {
    const ledger = syntheticLedger({ tenant: "acme", environment: "production", seed: 3, operation_count: 5 })
    await Effect.runPromise(store.append(ledger.stream_id, "no_stream", ledger.events))
    const result = await runCli(["export", "--ledger", "acme:production"], db.url)
    expect(result.code).toBe(0)
    expect(result.stdout.trimEnd().split("\n")).toHaveLength(ledger.events.length)
  }, 60_000)
})
