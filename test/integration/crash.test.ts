// Proves durability under `kill -9`: a writer process killed mid-load leaves a log whose hash chains
// and double-entry invariants verify, holds every transfer it acknowledged, and holds no half of a
// linked payment; a new writer then carries on from it.
import { type ChildProcess, spawn, spawnSync } from "node:child_process"
import * as path from "node:path"
import { Effect, Result } from "effect"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { makePostgresEventStore } from "../../adapters/eventstore/postgres/event-store.ts"
import { ledgerStreamId } from "../../domain/ledger/index.ts"
import { makeLedgerWriter } from "../../src/ledger/writer.ts"
import { freshDatabase, type TestDatabase } from "../support/db.ts"
import { createTransfers, openAccount, transfer } from "../support/ledger-fixtures.ts"
import type { Program } from "../support/writer-process.ts"

let db: TestDatabase
beforeAll(async () => {
  db = await freshDatabase()
})
afterAll(async () => {
  await db.drop()
})

const root = path.join(import.meta.dirname, "../..")
const ledger = { tenant: "crash", environment: "sandbox" }
const wallets = Array.from({ length: 8 }, (_, i) => `w${i}`)
const acks_before_kill = 300

const startLoad = (): { child: ChildProcess; acked: Promise<number[]> } => {
  const program: Program = {
    database_url: db.url,
    tenant: ledger.tenant,
    environment: ledger.environment,
    concurrency: 16,
    load: { accounts: wallets, fee_account: "fees", amount_max: 1_000 },
  }
  const child = spawn(
    process.execPath,
    [path.join(root, "test/support/writer-process.ts"), JSON.stringify(program)],
    {
      stdio: ["ignore", "pipe", "inherit"],
    },
  )
  const acked = new Promise<number[]>((resolve) => {
    const indexes: number[] = []
    let buffered = ""
    child.stdout?.on("data", (chunk: Buffer) => {
      buffered += chunk.toString("utf8")
      const lines = buffered.split("\n")
      buffered = lines.pop() ?? ""
      for (const line of lines) {
        const ack = JSON.parse(line) as { index: number; ok: boolean }
        if (ack.ok) indexes.push(ack.index)
        // Kill while commands are still in flight: some appends are mid-way when the process dies.
        if (indexes.length === acks_before_kill) child.kill("SIGKILL")
      }
    })
    child.on("close", () => resolve(indexes))
  })
  return { child, acked }
}

describe("kill -9 of a writer under load", () => {
  it("keeps every acknowledged transfer, nothing half-applied, and verifies", async () => {
    const store = makePostgresEventStore(db.pool)
    const setup = makeLedgerWriter(store)
    const now = Date.now()
    for (const command of [
      openAccount("world", "world", now),
      openAccount("fees", "fee_revenue", now),
      ...wallets.map((w) => openAccount(w, "wallet", now)),
      ...wallets.map((w, i) => createTransfers([transfer(`fund${i}`, "world", w, 10n ** 12n)], now)),
    ]) {
      expect(
        Result.isSuccess(
          await Effect.runPromise(
            Effect.result(setup.execute(ledger, command, { actor: "t", correlation_id: "c" })),
          ),
        ),
      ).toBe(true)
    }

    const { child, acked } = startLoad()
    const indexes = await acked
    expect(child.signalCode).toBe("SIGKILL")
    expect(indexes.length).toBeGreaterThanOrEqual(acks_before_kill)

    // Every acknowledged payment is in the log, with its fee; no payment lacks its fee or vice versa.
    const events = await Effect.runPromise(store.readStream(ledgerStreamId(ledger)))
    const transferIds = new Set(events.map((e) => String(e.data.transfer_id)))
    const pid = child.pid
    for (const index of indexes) {
      expect(transferIds.has(`p-${pid}-${index}`)).toBe(true)
      expect(transferIds.has(`f-${pid}-${index}`)).toBe(true)
    }
    for (const id of transferIds) {
      if (id.startsWith("p-")) expect(transferIds.has(`f-${id.slice(2)}`)).toBe(true)
      if (id.startsWith("f-")) expect(transferIds.has(`p-${id.slice(2)}`)).toBe(true)
    }

    // The auditor's verify: hash chains and double-entry invariants replayed from the log.
    const verify = spawnSync(process.execPath, [path.join(root, "src/cli/main.ts"), "verify"], {
      env: { ...process.env, DATABASE_URL: db.url },
      encoding: "utf8",
    })
    expect(verify.stderr + verify.stdout).not.toMatch(/FAIL|first bad event/i)
    expect(verify.status).toBe(0)

    // A fresh writer (the restarted process) loads the log and carries on.
    const restarted = makeLedgerWriter(makePostgresEventStore(db.pool))
    const after = await Effect.runPromise(
      Effect.result(
        restarted.execute(ledger, createTransfers([transfer("after-restart", "w0", "w1", 5n)], Date.now()), {
          actor: "t",
          correlation_id: "c",
        }),
      ),
    )
    expect(Result.isSuccess(after)).toBe(true)
    await Effect.runPromise(store.close)
  })
})
