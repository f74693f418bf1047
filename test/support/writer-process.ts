/**
 * A separate writer process for tests: opens its own pool and LedgerWriter on DATABASE_URL and runs
 * the commands it is given, printing one JSON line per acknowledged command. Used to prove the
 * ledger's invariants under two concurrent processes and under `kill -9`.
 *
 *   node test/support/writer-process.ts '<json Program>'
 */
import { Effect, Result } from "effect"
import pg from "pg"
import { makePostgresEventStore } from "../../adapters/eventstore/postgres/event-store.ts"
import type { LedgerCommand } from "../../domain/ledger/commands.ts"
import { makeLedgerWriter } from "../../src/ledger/writer.ts"

export interface ProgramStep {
  /** A command in JSON form: bigint amounts as decimal strings under `amount`. */
  readonly command: Record<string, unknown>
  readonly idempotency_key?: string
  /** The step's ledger, when not the program's. */
  readonly tenant?: string
}

export interface Program {
  readonly database_url: string
  readonly tenant: string
  readonly environment: string
  /** Commit the batches of several ledgers in one transaction (the platform's configuration). */
  readonly group_commit?: boolean
  /** Steps are sent `concurrency` at a time, in order. */
  readonly concurrency: number
  readonly steps?: ReadonlyArray<ProgramStep>
  /** Instead of steps: pay random amounts between these accounts until killed. */
  readonly load?: {
    readonly accounts: ReadonlyArray<string>
    readonly fee_account: string
    readonly amount_max: number
  }
}

const reviveAmounts = (command: Record<string, unknown>): LedgerCommand =>
  JSON.parse(JSON.stringify(command), (key, value) =>
    key === "amount" && typeof value === "string" ? BigInt(value) : value,
  ) as LedgerCommand

const main = async () => {
  const program = JSON.parse(process.argv[2] ?? "{}") as Program
  const pool = new pg.Pool({ connectionString: program.database_url, max: 4 })
  const store = makePostgresEventStore(pool)
  const writer = makeLedgerWriter(
    store,
    program.group_commit
      ? { transaction: { appendStreams: store.appendStreamsInTransaction, hook: async () => {} } }
      : {},
  )
  const run = async (step: ProgramStep, index: number) => {
    const command = reviveAmounts(step.command)
    const outcome = await Effect.runPromise(
      Effect.result(
        writer.execute({ tenant: step.tenant ?? program.tenant, environment: program.environment }, command, {
          actor: `process-${process.pid}`,
          correlation_id: `step-${index}`,
          idempotency_key: step.idempotency_key ?? null,
        }),
      ),
    )
    const line = Result.isSuccess(outcome)
      ? { index, ok: true, version: outcome.success.stream_version, events: outcome.success.events.length }
      : { index, ok: false, error: outcome.failure._tag }
    process.stdout.write(`${JSON.stringify(line)}\n`)
  }
  if (program.steps !== undefined) {
    const steps = program.steps
    let next = 0
    const worker = async () => {
      while (next < steps.length) {
        const index = next++
        const step = steps[index]
        if (step !== undefined) await run(step, index)
      }
    }
    await Promise.all(Array.from({ length: program.concurrency }, worker))
  } else if (program.load !== undefined) {
    const { accounts, fee_account, amount_max } = program.load
    let counter = 0
    const worker = async () => {
      for (;;) {
        const index = counter++
        const payer = accounts[index % accounts.length] ?? ""
        const payee = accounts[(index + 1) % accounts.length] ?? ""
        const amount = BigInt(1 + (index % amount_max))
        const id = `${process.pid}-${index}`
        await run(
          {
            command: {
              type: "CreateTransfers",
              group_id: `g-${id}`,
              now_ms: Date.now(),
              transfers: [
                {
                  transfer_id: `p-${id}`,
                  debit_account_id: payer,
                  credit_account_id: payee,
                  amount: String(amount),
                  code: 1,
                  user_data: null,
                },
                {
                  transfer_id: `f-${id}`,
                  debit_account_id: payer,
                  credit_account_id: fee_account,
                  amount: "1",
                  code: 2,
                  user_data: null,
                },
              ],
            },
          },
          index,
        )
      }
    }
    await Promise.all(Array.from({ length: program.concurrency }, worker))
  }
  await pool.end()
}

await main()
