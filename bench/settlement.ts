/**
 * Settlement benchmark (`npm run bench:settlement`): how long an on-chain transfer takes from the
 * API call to its `payment.completed` webhook, per chain family, on the sandbox's local chains
 * (1 s block time).
 *
 * It starts the platform (`src/main.ts`) as a child process on its embedded PostgreSQL in a fresh
 * DATA_DIR with one local chain per family (BENCH_CHAINS, default `ethereum,solana,ton`; a chain
 * the platform does not run is reported as skipped), a webhook receiver in this process that
 * verifies every signature, and one tenant subscribed to `payment.completed` and `payment.failed`.
 * Per chain it creates BENCH_WALLETS sending wallets (default 30) funded by the sandbox faucet (on
 * chain) and two recipient wallets (30 because a TON wallet takes its transfers one seqno at a time,
 * each after the previous has landed: one wallet sends at most about one transfer per block, so at
 * 10/s with 1 s blocks 10 wallets would queue; spread over 30, each sends one every 3 s), then sends BENCH_TRANSFERS transfers (default 200) at
 * BENCH_RATE per second (default 10), round-robin over the senders, one chain after the other
 * (each family measured on the machine's whole capacity; BENCH_PARALLEL=1 loads all at once).
 * The latency of a transfer is the time from just before its `POST /api/v2/transfers` to the moment
 * its webhook arrived. Every transfer must complete: a `payment.failed`, a non-2xx answer or a
 * webhook missing after BENCH_WAIT_SECONDS (default 120) counts as an error.
 *
 * The platform process's CPU time over the load (a figure the machine's noise disturbs less than
 * latency). Where the time went, per chain: the median and p95 of each stage as the platform recorded it
 * (request -> signed, signed -> broadcast, broadcast -> settled in the ledger, settled -> the webhook
 * event dispatched to a delivery job, dispatched -> the delivery attempt started). Afterwards it stops the server and runs the auditor's `verify` over the ledger.
 * Last line:
 * {"p50_ms","p95_ms","by_chain":{"<chain>":{"family","p50_ms","p95_ms","max_ms","completed","errors"}},
 *  "errors","verify","target_p95_ms":3000,"target_met"}.
 */

import { createServer } from "node:http"
import type { AddressInfo } from "node:net"
import * as os from "node:os"
import * as path from "node:path"
import pg from "pg"
import { verifySignature } from "../domain/webhooks/signature.ts"
import { ensureDatabase, startEmbedded } from "../src/db/embedded.ts"
import {
  type Credentials,
  call,
  cpuSeconds,
  log,
  percentile,
  round,
  runBenchmark,
  runVerify,
  sleep,
  startServer,
  stopServer,
} from "./support.ts"

const chains_wanted = (process.env.BENCH_CHAINS ?? "ethereum,solana,ton").split(",").map((c) => c.trim())
const transfers_per_chain = Number(process.env.BENCH_TRANSFERS ?? 200)
const wallets_per_chain = Number(process.env.BENCH_WALLETS ?? 30)
const rate_per_s = Number(process.env.BENCH_RATE ?? 10)
const wait_seconds = Number(process.env.BENCH_WAIT_SECONDS ?? 120)
const keep_data = process.env.BENCH_KEEP_DATA === "1"
const parallel = process.env.BENCH_PARALLEL === "1"
const target_p95_ms = 3_000
const secret = "whsec_bench_settlement"
/** Whole token units per sending wallet: far more than its transfers spend. */
const faucet_whole_units = 10_000
/** Amounts in whole units, rotated. */
const amounts = ["1", "2.5", "0.75", "10", "3.1"]

interface ChainView {
  readonly chain: string
  readonly family: string
  readonly gas_status: string
  readonly tokens: ReadonlyArray<{ readonly token: string; readonly contract_address: string | null }>
}

interface Arrival {
  readonly at: number
  readonly event_type: string
}

/** The tenant's endpoint: verifies each signature, answers 200, keeps when each transfer's event came. */
const startReceiver = async () => {
  const arrivals = new Map<string, Arrival>()
  let bad_signatures = 0
  const server = createServer((request, response) => {
    const chunks: Array<Buffer> = []
    request.on("data", (chunk: Buffer) => chunks.push(chunk))
    request.on("end", () => {
      const at = performance.now()
      const raw = Buffer.concat(chunks)
      const header = request.headers["x-service-signature"]
      const verified = verifySignature({
        header: typeof header === "string" ? header : "",
        body: raw,
        secret,
        now_s: Math.floor(Date.now() / 1000),
      })
      if (!verified.ok) {
        bad_signatures += 1
        response.writeHead(401).end()
        return
      }
      const body = JSON.parse(raw.toString("utf8")) as {
        event_type: string
        data: { transaction_id?: string }
      }
      const id = body.data.transaction_id
      if (id !== undefined && !arrivals.has(id)) arrivals.set(id, { at, event_type: body.event_type })
      response.writeHead(200).end()
    })
  })
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve))
  const { port } = server.address() as AddressInfo
  return {
    url: `http://127.0.0.1:${port}/hooks`,
    arrivals,
    badSignatures: () => bad_signatures,
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  }
}

interface Sent {
  readonly chain: string
  readonly started: number
  readonly transaction_id: string | null
  readonly error: string | null
}

interface ChainPlan {
  readonly chain: string
  readonly family: string
  readonly token: string
  readonly senders: ReadonlyArray<string>
  readonly recipients: ReadonlyArray<string>
}

const prepareChain = async (
  base: string,
  owner: Credentials,
  view: ChainView,
): Promise<ChainPlan | string> => {
  if (view.gas_status !== "live") return "the platform runs no local node for it"
  const token = view.tokens.find((candidate) => candidate.contract_address !== null)?.token
  if (token === undefined) return "no sandbox token is deployed on it"
  const wallet = async (external_id: string) =>
    call<{ wallet_id: string; address: string }>(
      base,
      "POST",
      "/api/v1/wallets",
      { external_id, label: external_id, chain: view.chain },
      owner,
    )
  const senders: Array<string> = []
  for (let i = 0; i < wallets_per_chain; i++) {
    const sender = await wallet(`${view.chain}-sender-${i}`)
    await call(
      base,
      "POST",
      "/api/v1/sandbox/faucet",
      { wallet_id: sender.wallet_id, token, amount: String(faucet_whole_units) },
      owner,
    )
    senders.push(sender.wallet_id)
  }
  const recipients = [
    (await wallet(`${view.chain}-recipient-0`)).address,
    (await wallet(`${view.chain}-recipient-1`)).address,
  ]
  return { chain: view.chain, family: view.family, token, senders, recipients }
}

/** Sends the chain's transfers at the configured rate; answers when every request was answered. */
const sendTransfers = async (base: string, owner: Credentials, plan: ChainPlan): Promise<Array<Sent>> => {
  const requests: Array<Promise<Sent>> = []
  const interval_ms = 1_000 / rate_per_s
  const begin = performance.now()
  for (let i = 0; i < transfers_per_chain; i++) {
    const due = begin + i * interval_ms
    const wait = due - performance.now()
    if (wait > 0) await sleep(wait)
    const started = performance.now()
    const body = {
      from_wallet: plan.senders[i % plan.senders.length],
      to_address: plan.recipients[i % plan.recipients.length],
      amount: amounts[i % amounts.length],
      token: plan.token,
      chain: plan.chain,
    }
    requests.push(
      call<{ transaction_id: string }>(base, "POST", "/api/v2/transfers", body, owner).then(
        (answer) => ({ chain: plan.chain, started, transaction_id: answer.transaction_id, error: null }),
        (error: unknown) => ({
          chain: plan.chain,
          started,
          transaction_id: null,
          error: error instanceof Error ? error.message : String(error),
        }),
      ),
    )
  }
  return Promise.all(requests)
}

interface ChainFigures {
  readonly family: string
  readonly p50_ms: number
  readonly p95_ms: number
  readonly max_ms: number
  readonly completed: number
  readonly errors: number
}

/** Median and p95 (ms) of each stage of the settled transfers, per chain, from the platform's records. */
const reportStages = async (dataDir: string) => {
  // The platform's own embedded server, shared while the platform runs: leaving it hands it back,
  // and only the last process of ours to leave stops it.
  const shared = await startEmbedded({ dataDir })
  const url = await ensureDatabase(shared.url, "platform")
  const pool = new pg.Pool({ connectionString: url, max: 1 })
  pool.on("error", () => {})
  try {
    const stages = await pool.query<{ chain: string; stage: string; p50: number; p95: number }>(
      `with transfer as (
         select t.chain, t.created_at, t.signed_at, t.broadcast_at, coalesce(t.completed_at, t.failed_at) as settled_at,
                (select min(e.dispatched_at) from platform.webhook_events e
                  where e.data->>'transaction_id' = t.transfer_id) as dispatched_at,
                (select min(a.started_at) from platform.webhook_events e
                   join platform.webhook_deliveries d on d.event_id = e.event_id
                   join platform.webhook_attempts a on a.delivery_id = d.delivery_id
                  where e.data->>'transaction_id' = t.transfer_id) as webhook_at
           from platform.chain_transfers t),
       stage as (
         select chain, '1 request -> signed' as stage, signed_at - created_at as took from transfer
         union all select chain, '2 signed -> broadcast', broadcast_at - signed_at from transfer
         union all select chain, '3 broadcast -> settled', settled_at - broadcast_at from transfer
         union all select chain, '4 settled -> event dispatched', dispatched_at - settled_at from transfer
         union all select chain, '5 dispatched -> webhook sent', webhook_at - dispatched_at from transfer)
       select chain, stage,
              round(extract(epoch from percentile_cont(0.5) within group (order by took)) * 1000)::int as p50,
              round(extract(epoch from percentile_cont(0.95) within group (order by took)) * 1000)::int as p95
         from stage where took is not null group by chain, stage order by chain, stage`,
    )
    for (const row of stages.rows)
      log(`  ${row.chain} ${row.stage.padEnd(28)} p50 ${row.p50} ms, p95 ${row.p95} ms`)
  } finally {
    await pool.end()
    await shared.stop()
  }
}

const benchmark = async (dataDir: string, defer: (undo: () => unknown) => void) => {
  log(
    `machine: ${os.cpus().length} cores, load average ${os
      .loadavg()
      .map((l) => l.toFixed(2))
      .join(" ")}`,
  )
  const evm = chains_wanted.filter((chain) => !["solana", "ton", "tron"].includes(chain))
  const receiver = await startReceiver()
  defer(() => receiver.close())
  const server = await startServer({
    dataDir,
    profileDir: process.env.BENCH_PROFILE === "1" ? path.join(dataDir, "profile") : undefined,
    env: {
      SANDBOX_EVM_CHAINS: evm.join(","),
      SANDBOX_SOLANA: String(chains_wanted.includes("solana")),
      SANDBOX_TON: String(chains_wanted.includes("ton")),
    },
  })
  defer(() => (server.child.exitCode === null ? stopServer(server) : undefined))
  log(`server: ${server.url}; chains wanted: ${chains_wanted.join(", ")}`)
  const run = Date.now().toString(36)
  const registered = await call<Credentials>(server.url, "POST", "/api/tenant/register", {
    email: `bench-settlement-${run}@bench.example`,
    password: "bench password 0123456789",
    company_name: "Bench settlement",
    plan: "enterprise",
  })
  const owner = { tenant_id: registered.tenant_id, api_key: registered.api_key }
  await call(
    server.url,
    "POST",
    "/api/v1/webhooks",
    { url: receiver.url, events: ["payment.completed", "payment.failed"], secret },
    owner,
  )
  const listed = await call<{ data: ReadonlyArray<ChainView> }>(
    server.url,
    "GET",
    "/api/v2/chains",
    undefined,
    owner,
  )
  const plans: Array<ChainPlan> = []
  const skipped: Record<string, string> = {}
  for (const chain of chains_wanted) {
    const view = listed.data.find((candidate) => candidate.chain === chain)
    const plan = view === undefined ? `unknown chain` : await prepareChain(server.url, owner, view)
    if (typeof plan === "string") {
      skipped[chain] = plan
      log(`${chain}: skipped (${plan})`)
    } else {
      plans.push(plan)
      log(`${chain}: ${plan.senders.length} senders funded with ${faucet_whole_units} ${plan.token} each`)
    }
  }

  log(
    `sending ${transfers_per_chain} transfers per chain at ${rate_per_s}/s, ` +
      (parallel ? "all chains at once" : "one chain after the other"),
  )
  const pid = server.child.pid ?? 0
  const cpu_before = cpuSeconds(pid)
  const load_started = performance.now()
  const settleAll = async (entries: ReadonlyArray<Sent>) => {
    const deadline = performance.now() + wait_seconds * 1_000
    const accepted = entries.filter((entry) => entry.transaction_id !== null)
    while (
      performance.now() < deadline &&
      accepted.some((entry) => !receiver.arrivals.has(entry.transaction_id ?? ""))
    )
      await sleep(100)
  }
  const sent: Array<Sent> = []
  if (parallel) {
    sent.push(...(await Promise.all(plans.map((plan) => sendTransfers(server.url, owner, plan)))).flat())
    await settleAll(sent)
  } else {
    for (const plan of plans) {
      const entries = await sendTransfers(server.url, owner, plan)
      await settleAll(entries)
      sent.push(...entries)
    }
  }

  const by_chain: Record<string, ChainFigures> = {}
  const all: Array<number> = []
  let errors = 0
  for (const plan of plans) {
    const latencies: Array<number> = []
    let chain_errors = 0
    for (const entry of sent.filter((candidate) => candidate.chain === plan.chain)) {
      const arrival = entry.transaction_id === null ? undefined : receiver.arrivals.get(entry.transaction_id)
      if (arrival?.event_type === "payment.completed") latencies.push(arrival.at - entry.started)
      else {
        chain_errors += 1
        if (chain_errors <= 3)
          log(
            `  ${plan.chain}: ${entry.error ?? (arrival === undefined ? `${entry.transaction_id}: no webhook` : `${entry.transaction_id}: ${arrival.event_type}`)}`,
          )
      }
    }
    latencies.sort((a, b) => a - b)
    all.push(...latencies)
    errors += chain_errors
    by_chain[plan.chain] = {
      family: plan.family,
      p50_ms: round(percentile(latencies, 50), 0),
      p95_ms: round(percentile(latencies, 95), 0),
      max_ms: round(latencies.at(-1) ?? 0, 0),
      completed: latencies.length,
      errors: chain_errors,
    }
    const figures = by_chain[plan.chain]
    log(
      `${plan.chain} (${plan.family}): ${figures?.completed} completed, ${chain_errors} errors; ` +
        `p50 ${figures?.p50_ms} ms, p95 ${figures?.p95_ms} ms, max ${figures?.max_ms} ms`,
    )
  }
  all.sort((a, b) => a - b)
  const cpu_s = cpuSeconds(pid) - cpu_before
  const wall_s = (performance.now() - load_started) / 1_000
  log(
    `platform process: ${round(cpu_s, 1)} CPU s over ${round(wall_s, 1)} s ` +
      `(${round((cpu_s / wall_s) * 100, 0)} % of one core; ${round((cpu_s * 1_000) / Math.max(1, sent.length), 1)} ms per transfer, ` +
      "its in-process LiteSVM and TON emulator included, anvil and PostgreSQL not)",
  )
  await reportStages(dataDir)
  if (receiver.badSignatures() > 0) log(`webhooks with a bad signature: ${receiver.badSignatures()}`)
  const warnings = server.warnings()
  log(`server log lines at warn or above: ${warnings.length}`)
  for (const line of warnings.slice(0, 5)) log(`  ${line.slice(0, 300)}`)

  const code = await stopServer(server)
  log(`server stopped (exit ${code})`)
  const verify = runVerify(dataDir)
  log(`\n${verify.output}`)
  const p95_by_chain = Object.values(by_chain).map((figures) => figures.p95_ms)
  const summary = {
    p50_ms: round(percentile(all, 50), 0),
    p95_ms: round(percentile(all, 95), 0),
    by_chain,
    skipped,
    errors,
    platform_cpu_ms_per_transfer: round((cpu_s * 1_000) / Math.max(1, sent.length), 1),
    verify: verify.ok ? "ok" : "failed",
    target_p95_ms: target_p95_ms,
    target_met:
      plans.length > 0 && errors === 0 && verify.ok && p95_by_chain.every((p95) => p95 < target_p95_ms),
  }
  process.stdout.write(`${JSON.stringify(summary)}\n`)
}

await runBenchmark("bench-settlement-", keep_data, benchmark)
