/**
 * A transfer worker in its own process, for the crash tests: it composes the flow like the tests
 * (support/transfers.ts), runs the worker, and right after its first successful broadcast prints
 * `{"broadcast":"<tx hash>"}` and stops working (it never reaches the confirmation), so the test
 * can SIGKILL it at exactly that point. It sends on the test's anvil (`rpc_url`, as the sandbox's
 * ethereum), or on the test's LiteSVM or @ton/sandbox reached over the transport bridge
 * (`solana_transport_url`, `ton_transport_url`, as the sandbox's solana or ton; see
 * transport-bridge.ts).
 *
 *   node test/support/transfer-worker-process.ts '{"database_url":"...","rpc_url":"..."}'
 *   node test/support/transfer-worker-process.ts '{"database_url":"...","solana_transport_url":"..."}'
 *   node test/support/transfer-worker-process.ts '{"database_url":"...","ton_transport_url":"..."}'
 */
import pg from "pg"
import { makeSolanaAdapter } from "../../adapters/chains/solana/adapter.ts"
import { makeTonAdapter } from "../../adapters/chains/ton/adapter.ts"
import { solana_sandbox_finality_confirmations } from "../../src/chains/solana-sandbox.ts"
import { chainRoutes } from "../../src/transfers/routes.ts"
import { startTransferWorker } from "../../src/transfers/worker.ts"
import { bridgedSolanaTransport } from "./solana-bridge.ts"
import { bridgedTonTransport } from "./ton-bridge.ts"
import { composeTransferFlow, composeTransfers, type TransferFlow } from "./transfers.ts"

interface Target {
  readonly rpc_url?: string
  readonly solana_transport_url?: string
  readonly ton_transport_url?: string
}

const compose = (pool: pg.Pool, target: Target) => {
  if (target.rpc_url !== undefined) return composeTransfers(pool, target.rpc_url)
  if (target.ton_transport_url !== undefined) {
    const adapter = makeTonAdapter(bridgedTonTransport(target.ton_transport_url))
    return composeTransferFlow(pool, chainRoutes({ sandbox: new Map([["ton", adapter]]) }))
  }
  if (target.solana_transport_url === undefined) throw new Error("no chain to send on")
  const adapter = makeSolanaAdapter(bridgedSolanaTransport(target.solana_transport_url), {
    finality_confirmations: solana_sandbox_finality_confirmations,
  })
  return composeTransferFlow(pool, chainRoutes({ sandbox: new Map([["solana", adapter]]) }))
}

const main = async () => {
  const { database_url, ...target } = JSON.parse(process.argv[2] ?? "{}") as Target & {
    readonly database_url: string
  }
  const pool = new pg.Pool({ connectionString: database_url, max: 8 })
  const flow: TransferFlow = await compose(pool, target)
  await startTransferWorker(
    {
      pool,
      boss: flow.boss,
      writer: flow.writer,
      routes: flow.routes,
      signingKey: flow.signingKey,
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
