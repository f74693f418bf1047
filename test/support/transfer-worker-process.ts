/**
 * A transfer worker in its own process, for the crash test: it composes the flow like the test
 * (support/transfers.ts), runs the worker, and right after its first successful broadcast prints
 * `{"broadcast":"<tx hash>"}` and stops working (it never reaches the confirmation), so the test
 * can SIGKILL it at exactly that point.
 *
 *   node test/support/transfer-worker-process.ts '{"database_url":"...","rpc_url":"..."}'
 */
import pg from "pg"
import { startTransferWorker } from "../../src/transfers/worker.ts"
import { composeTransfers } from "./transfers.ts"

const main = async () => {
  const { database_url, rpc_url } = JSON.parse(process.argv[2] ?? "{}") as {
    readonly database_url: string
    readonly rpc_url: string
  }
  const pool = new pg.Pool({ connectionString: database_url, max: 8 })
  const harness = await composeTransfers(pool, rpc_url)
  await startTransferWorker(
    {
      pool,
      boss: harness.boss,
      writer: harness.writer,
      routes: harness.routes,
      signingKey: harness.signingKey,
    },
    {
      worker_count: 1,
      job_expire_seconds: 3,
      afterBroadcast: async (row) => {
        process.stdout.write(`${JSON.stringify({ broadcast: row.tx_hash })}\n`)
        // Hold the job here until the test kills the process: the broadcast happened, the
        // confirmation and the ledger post never will in this process.
        await new Promise(() => {})
      },
    },
  )
  process.stdout.write(`${JSON.stringify({ ready: true })}\n`)
}

main().catch((error: unknown) => {
  process.stderr.write(`${String(error)}\n`)
  process.exit(1)
})
