// Property tests of the ledger as written through the writer on real PostgreSQL: no constrained
// account is ever overdrawn and money is conserved under random interleavings of two writer
// PROCESSES; idempotency keys make retries free of effect; replaying the log is deterministic.
import { spawn } from "node:child_process"
import * as path from "node:path"
import { Effect, Result } from "effect"
import fc from "fast-check"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { makePostgresEventStore } from "../../adapters/eventstore/postgres/event-store.ts"
import type { LedgerCommand } from "../../domain/ledger/commands.ts"
import {
  checkDoubleEntry,
  evolve,
  initialState,
  type LedgerEvent,
  type LedgerState,
  ledgerStreamId,
  withinLimits,
} from "../../domain/ledger/index.ts"
import { makeLedgerWriter } from "../../src/ledger/writer.ts"
import type { EventStore } from "../../src/ports/event-store.ts"
import { freshDatabase, type TestDatabase } from "../support/db.ts"
import { createTransfers, openAccount, transfer } from "../support/ledger-fixtures.ts"
import type { Program, ProgramStep } from "../support/writer-process.ts"

let db: TestDatabase
let store: EventStore["Service"]
beforeAll(async () => {
  db = await freshDatabase()
  store = makePostgresEventStore(db.pool)
})
afterAll(async () => {
  await db.drop()
})

const wallets = ["w0", "w1", "w2", "w3"]
const t0 = 1_700_000_000_000
let ledgerCounter = 0
const ctx = (idempotency_key: string | null = null) => ({
  actor: "property",
  correlation_id: "p",
  idempotency_key,
})

const openLedger = async (funding: bigint) => {
  const ledger = { tenant: `prop${++ledgerCounter}`, environment: "sandbox" }
  const writer = makeLedgerWriter(store)
  const setup: LedgerCommand[] = [
    openAccount("world", "world", t0),
    openAccount("fees", "fee_revenue", t0),
    ...wallets.map((w) => openAccount(w, "wallet", t0)),
    ...wallets.map((w, i) => createTransfers([transfer(`fund-${i}`, "world", w, funding)], t0)),
  ]
  for (const command of setup) {
    const result = await Effect.runPromise(Effect.result(writer.execute(ledger, command, ctx())))
    expect(Result.isSuccess(result)).toBe(true)
  }
  return ledger
}

/** Folds the stream event by event, checking after each one that no constrained account is overdrawn. */
const foldChecked = async (stream_id: string): Promise<LedgerState> => {
  const events = await Effect.runPromise(store.readStream(stream_id))
  let state = initialState
  events.forEach((event, i) => {
    expect(event.stream_version).toBe(i + 1)
    state = evolve(state, { type: event.event_type, data: event.data } as unknown as LedgerEvent)
    for (const account of state.accounts.values()) expect(withinLimits(account)).toBe(true)
  })
  return state
}

const jsonCommand = (command: LedgerCommand): Record<string, unknown> =>
  JSON.parse(JSON.stringify(command, (_k, v) => (typeof v === "bigint" ? v.toString() : v)))

/** One random operation of a process: a payment with fee, a reservation, or the post/void of one. */
const operation = fc.oneof(
  fc.record({
    kind: fc.constant("pay" as const),
    from: fc.nat(3),
    to: fc.nat(2),
    amount: fc.integer({ min: 1, max: 60 }),
  }),
  fc.record({
    kind: fc.constant("reserve" as const),
    from: fc.nat(3),
    to: fc.nat(2),
    amount: fc.integer({ min: 1, max: 60 }),
  }),
  fc.record({
    kind: fc.constant("post" as const),
    target: fc.nat(30),
    amount: fc.integer({ min: 1, max: 60 }),
  }),
  fc.record({ kind: fc.constant("void" as const), target: fc.nat(30) }),
)
type Operation = typeof operation extends fc.Arbitrary<infer T> ? T : never

/** `to` counts the other wallets after `from`, so payer and payee always differ. */
const payee = (from: number, to: number): string => wallets[(from + 1 + to) % wallets.length] ?? "w0"

const toSteps = (processId: string, operations: ReadonlyArray<Operation>): ProgramStep[] =>
  operations.map((op, i): ProgramStep => {
    const id = `${processId}-${i}`
    const now = t0 + 1_000 + i
    switch (op.kind) {
      case "pay":
        return {
          command: jsonCommand(
            createTransfers(
              [
                transfer(`pay-${id}`, wallets[op.from] ?? "w0", payee(op.from, op.to), BigInt(op.amount)),
                transfer(`fee-${id}`, wallets[op.from] ?? "w0", "fees", 1n),
              ],
              now,
              `g-${id}`,
            ),
          ),
          idempotency_key: `k-${id}`,
        }
      case "reserve":
        return {
          command: jsonCommand(
            createTransfers(
              [
                transfer(
                  `res-${processId}-${i}`,
                  wallets[op.from] ?? "w0",
                  payee(op.from, op.to),
                  BigInt(op.amount),
                  { pending: { timeout_ms: 0 } },
                ),
              ],
              now,
            ),
          ),
        }
      case "post":
        return {
          command: jsonCommand({
            type: "PostPendingTransfer",
            transfer_id: `post-${id}`,
            pending_id: `res-${processId}-${op.target}`,
            amount: BigInt(op.amount),
            now_ms: now,
          }),
        }
      case "void":
        return {
          command: jsonCommand({
            type: "VoidPendingTransfer",
            transfer_id: `void-${id}`,
            pending_id: `res-${processId}-${op.target}`,
            now_ms: now,
          }),
        }
      default: {
        const unreachable: never = op
        throw new Error(`unknown operation ${JSON.stringify(unreachable)}`)
      }
    }
  })

interface Ack {
  readonly index: number
  readonly ok: boolean
  readonly error?: string
}

const runProcess = (program: Program): Promise<Ack[]> =>
  new Promise((resolve, reject) => {
    const child = spawn(
      process.execPath,
      [path.join(import.meta.dirname, "../support/writer-process.ts"), JSON.stringify(program)],
      {
        stdio: ["ignore", "pipe", "pipe"],
      },
    )
    let out = ""
    let err = ""
    child.stdout.on("data", (chunk) => (out += chunk))
    child.stderr.on("data", (chunk) => (err += chunk))
    child.on("error", reject)
    child.on("close", (code) => {
      if (code !== 0) reject(new Error(`writer process exited ${code}: ${err}`))
      else
        resolve(
          out
            .trim()
            .split("\n")
            .filter(Boolean)
            .map((line) => JSON.parse(line) as Ack),
        )
    })
  })

describe("ledger through the writer", () => {
  it("two writer processes: never overdrawn, conserved, every acknowledged command recorded once", async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.array(operation, { minLength: 5, maxLength: 40 }),
        fc.array(operation, { minLength: 5, maxLength: 40 }),
        async (opsA, opsB) => {
          const ledger = await openLedger(100n)
          const program = (id: string, ops: ReadonlyArray<Operation>): Program => ({
            database_url: db.url,
            tenant: ledger.tenant,
            environment: ledger.environment,
            concurrency: 4,
            steps: toSteps(id, ops),
          })
          const [acksA, acksB] = await Promise.all([
            runProcess(program("A", opsA)),
            runProcess(program("B", opsB)),
          ])
          const state = await foldChecked(ledgerStreamId(ledger))
          expect(checkDoubleEntry(state.accounts.values()).balanced).toBe(true)
          for (const [acks, steps] of [
            [acksA, program("A", opsA).steps ?? []],
            [acksB, program("B", opsB).steps ?? []],
          ] as const) {
            expect(acks).toHaveLength(steps.length)
            for (const ack of acks) {
              const step = steps[ack.index]
              const command = step?.command as {
                type: string
                transfers?: Array<{ transfer_id: string }>
                transfer_id?: string
              }
              const ids = command.transfers?.map((t) => t.transfer_id) ?? [command.transfer_id ?? ""]
              // Acknowledged: all its transfers are in the ledger; refused: none of them is.
              for (const id of ids) expect(state.transfers.has(id)).toBe(ack.ok)
              if (!ack.ok)
                expect(ack.error).toMatch(
                  /InsufficientFunds|LinkedTransferFailed|PendingTransfer|PostAmountExceedsPending/,
                )
            }
          }
        },
      ),
      { numRuns: 4 },
    )
  }, 300_000)

  it("two writer processes with group commit across three ledgers: per ledger never overdrawn, conserved, every acknowledged command recorded once", async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.array(fc.tuple(fc.nat(2), operation), { minLength: 5, maxLength: 40 }),
        fc.array(fc.tuple(fc.nat(2), operation), { minLength: 5, maxLength: 40 }),
        async (opsA, opsB) => {
          const ledgers = [await openLedger(100n), await openLedger(100n), await openLedger(100n)]
          const program = (id: string, ops: ReadonlyArray<readonly [number, Operation]>): Program => ({
            database_url: db.url,
            tenant: ledgers[0]?.tenant ?? "",
            environment: "sandbox",
            group_commit: true,
            concurrency: 6,
            // Each ledger's operations get their own ids, so a post or void meets its own ledger's
            // reservation; the steps keep the random interleaving across ledgers.
            steps: (() => {
              const perLedger = ledgers.map((_l, index) =>
                toSteps(
                  `${id}${index}`,
                  ops.filter(([ledger]) => ledger === index).map(([, op]) => op),
                ),
              )
              const next = ledgers.map(() => 0)
              return ops.map(([ledger]): ProgramStep => {
                const step = perLedger[ledger]?.[next[ledger] ?? 0] as ProgramStep
                next[ledger] = (next[ledger] ?? 0) + 1
                return { ...step, tenant: ledgers[ledger]?.tenant ?? "" }
              })
            })(),
          })
          const programs = [program("A", opsA), program("B", opsB)]
          const acks = await Promise.all(programs.map(runProcess))
          const states = new Map<string, LedgerState>()
          for (const ledger of ledgers) {
            const state = await foldChecked(ledgerStreamId(ledger))
            expect(checkDoubleEntry(state.accounts.values()).balanced).toBe(true)
            states.set(ledger.tenant, state)
          }
          programs.forEach((prog, p) => {
            const steps = prog.steps ?? []
            expect(acks[p]).toHaveLength(steps.length)
            for (const ack of acks[p] ?? []) {
              const step = steps[ack.index]
              const state = states.get(step?.tenant ?? "")
              const command = step?.command as {
                transfers?: Array<{ transfer_id: string }>
                transfer_id?: string
              }
              const ids = command.transfers?.map((t) => t.transfer_id) ?? [command.transfer_id ?? ""]
              for (const id of ids) expect(state?.transfers.has(id)).toBe(ack.ok)
              if (!ack.ok)
                expect(ack.error).toMatch(
                  /InsufficientFunds|LinkedTransferFailed|PendingTransfer|PostAmountExceedsPending/,
                )
            }
          })
        },
      ),
      { numRuns: 4 },
    )
  }, 300_000)

  it("idempotency: retried commands (same key) change nothing beyond the first execution", async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.array(
          fc.record({
            from: fc.nat(3),
            to: fc.nat(2),
            amount: fc.integer({ min: 1, max: 80 }),
            repeats: fc.integer({ min: 1, max: 3 }),
          }),
          { minLength: 1, maxLength: 25 },
        ),
        async (payments) => {
          const ledger = await openLedger(200n)
          const writer = makeLedgerWriter(store)
          const commands = payments.map((p, i) => ({
            key: `idem-${i}`,
            command: createTransfers(
              [transfer(`ip-${i}`, wallets[p.from] ?? "w0", payee(p.from, p.to), BigInt(p.amount))],
              t0 + 10 + i,
            ),
            repeats: p.repeats,
          }))
          const firstResults = []
          for (const { key, command, repeats } of commands) {
            const runs = await Promise.all(
              Array.from({ length: repeats }, () =>
                Effect.runPromise(Effect.result(writer.execute(ledger, command, ctx(key)))),
              ),
            )
            firstResults.push(runs)
            const tags = new Set(runs.map((r) => (Result.isSuccess(r) ? "ok" : r.failure._tag)))
            expect(tags.size).toBe(1)
          }
          // The same ledger built without any retry has identical balances.
          const single = await openLedger(200n)
          const once = makeLedgerWriter(store)
          for (const { command } of commands)
            await Effect.runPromise(Effect.result(once.execute(single, command, ctx())))
          const [a, b] = await Promise.all([
            foldChecked(ledgerStreamId(ledger)),
            foldChecked(ledgerStreamId(single)),
          ])
          for (const w of wallets) expect(a.accounts.get(w)).toEqual(b.accounts.get(w))
          // Retrying every command that succeeded, later and through a fresh writer, is still free of
          // effect. (A rejected command wrote nothing and consumed no key: its retry decides again.)
          const versionBefore = await Effect.runPromise(store.streamVersion(ledgerStreamId(ledger)))
          const restarted = makeLedgerWriter(store)
          for (const [i, { key, command }] of commands.entries()) {
            if (!firstResults[i]?.every(Result.isSuccess)) continue
            const retry = await Effect.runPromise(Effect.result(restarted.execute(ledger, command, ctx(key))))
            expect(Result.isSuccess(retry) && retry.success.replayed).toBe(true)
          }
          expect(await Effect.runPromise(store.streamVersion(ledgerStreamId(ledger)))).toBe(versionBefore)
        },
      ),
      { numRuns: 8 },
    )
  }, 300_000)

  it("replay determinism: a writer loaded from the log has exactly the live writer's state", async () => {
    await fc.assert(
      fc.asyncProperty(fc.array(operation, { minLength: 1, maxLength: 30 }), async (ops) => {
        const ledger = await openLedger(100n)
        const live = makeLedgerWriter(store)
        for (const step of toSteps("R", ops)) {
          const command = JSON.parse(JSON.stringify(step.command), (k, v) =>
            k === "amount" && typeof v === "string" ? BigInt(v) : v,
          ) as LedgerCommand
          await Effect.runPromise(
            Effect.result(live.execute(ledger, command, ctx(step.idempotency_key ?? null))),
          )
        }
        const liveView = await Effect.runPromise(live.snapshot(ledger))
        const loaded = await Effect.runPromise(makeLedgerWriter(store).snapshot(ledger))
        expect(loaded.version).toBe(liveView.version)
        expect([...loaded.state.accounts.entries()]).toEqual([...liveView.state.accounts.entries()])
        expect([...loaded.state.transfers.entries()]).toEqual([...liveView.state.transfers.entries()])
        expect(loaded.state.clock_ms).toBe(liveView.state.clock_ms)
      }),
      { numRuns: 10 },
    )
  }, 300_000)
})
