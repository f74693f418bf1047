/**
 * API benchmark (`npm run bench:api`): social payments over HTTP, as tenants' integrations make them.
 *
 * It starts the platform (`src/main.ts`) as a child process on its embedded PostgreSQL in a fresh
 * temporary DATA_DIR (LOG_LEVEL=warn, no local chains), sets up over the HTTP API 10 tenants on the
 * enterprise plan, each with a second API key (the per-key limit is half the per-tenant one), 4
 * ethereum wallets funded from the sandbox faucet and an e-mail identifier linked to each wallet,
 * then loads `POST /api/social-payments/pay` from a second process, wrk (Debian's package; installed
 * when missing and run as root; see bench/wrk.ts): 64 keep-alive connections on loopback, every
 * request a payment between two linked wallets of one tenant, rotating over every tenant, key,
 * wallet pair and a few amounts. A warm-up of 3 s precedes the timed 30 s.
 *
 * It prints payments/s (2xx answers per second), latency percentiles, errors (non-2xx answers,
 * connection errors and timeouts, and sampled 200s whose status is not "completed", warm-up
 * included), the server's peak RSS (VmHWM), where the CPU went (server, PostgreSQL, the load
 * generator with this process, the rest of the machine, and the time the hypervisor stole from
 * this virtual machine: other work on a shared host shows there), how long the server's event loop
 * waited for a CPU, the ledger's group-commit batch size, and what PostgreSQL's backends were doing
 * (sampled pg_stat_activity). Then it checks conservation in the read model (per tenant: wallets +
 * fee revenue = faucet issuance, fee revenue = the fees of the completed payments, nothing pending;
 * completed payment records = 2xx answers, plus those still in flight when the load stopped),
 * stops the server with SIGTERM and runs the auditor's `verify` over the ledger. Last line:
 * {"payments_per_s","p50_ms","p99_ms","errors","verify","conservation","rss_peak_mb","cpu_stolen_pct",...}.
 *
 * Environment: BENCH_SECONDS (default 30), BENCH_CONNECTIONS (64), BENCH_WARMUP_SECONDS (3),
 * BENCH_WALLETS (wallets per tenant, 4), BENCH_IDEMPOTENCY=1 (send an Idempotency-Key with every
 * payment), BENCH_NODE_FLAGS (extra flags for the server's node, e.g. V8 heap settings), BENCH_PIN=1
 * (the server's event loop alone on one CPU, everything else on the others; bench/placement.ts). For
 * finding where the time goes: BENCH_PROFILE=1 (run the server under `node --cpu-prof` and print
 * its top self-time areas and functions over the timed phase), BENCH_PG_STATEMENTS=1 (start the
 * embedded server with pg_stat_statements loaded, shared by the platform, and print the statements
 * that took the most time per payment), BENCH_KEEP_DATA=1 (keep DATA_DIR and the profile), BENCH_SERVER_LOG=<file> (everything the server
 * writes, e.g. its GC pauses with BENCH_NODE_FLAGS=--trace-gc). Both
 * instruments cost some throughput.
 */
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import pg from "pg"
import { ensureDatabase, startEmbedded } from "../src/db/embedded.ts"
import { type Placement, place, planPlacement } from "./placement.ts"
import {
  type Credentials,
  call,
  clockTicks,
  cpuSeconds,
  log,
  postgresProcesses,
  root,
  round,
  runBenchmark,
  runVerify,
  sleep,
  startServer,
  stopServer,
} from "./support.ts"
import { findWrk, runWrk, type WrkOutcome, type WrkRequest } from "./wrk.ts"

const seconds = Number(process.env.BENCH_SECONDS ?? 30)
const connections = Number(process.env.BENCH_CONNECTIONS ?? 64)
const warmup_seconds = Number(process.env.BENCH_WARMUP_SECONDS ?? 3)
const wallets_per_tenant = Number(process.env.BENCH_WALLETS ?? 4)
const with_idempotency = process.env.BENCH_IDEMPOTENCY === "1"
const profile = process.env.BENCH_PROFILE === "1"
const keep_data = process.env.BENCH_KEEP_DATA === "1"
/** Pre-start the embedded server with pg_stat_statements loaded (the platform shares it). */
const pg_statements = process.env.BENCH_PG_STATEMENTS === "1"
const tenants_count = 10
/** Enterprise: 2,000/s per tenant, 1,000/s per key; two keys let a tenant reach its own limit. */
const keys_per_tenant = 2
const faucet_calls_per_wallet = 3
/** Whole USDC per faucet call (the most one call may credit). */
const faucet_whole_units = 1_000_000n
const usdc_decimals = 6
/** Payment amounts in cents, rotated (fees 0.3 %, rounded half-even). */
const amounts_cents = [100, 125, 250, 399, 1_000]
/** One 200 answer in this many has its body checked for status "completed". */
const sample_every = 50

interface Tenant {
  readonly tenant_id: string
  readonly keys: ReadonlyArray<string>
  readonly wallets: ReadonlyArray<{ readonly wallet_id: string; readonly email: string }>
}

const setupTenant = async (base: string, index: number, run: string): Promise<Tenant> => {
  const registered = await call<Credentials>(base, "POST", "/api/tenant/register", {
    email: `bench-${run}-${index}@bench.example`,
    password: "bench password 0123456789",
    company_name: `Bench ${index}`,
    plan: "enterprise",
  })
  const owner = { tenant_id: registered.tenant_id, api_key: registered.api_key }
  const keys = [registered.api_key]
  while (keys.length < keys_per_tenant) {
    const created = await call<{ api_key: string }>(
      base,
      "POST",
      "/api/v1/api-keys",
      { environment: "sandbox", scopes: ["payments:write"], name: `bench-${keys.length}` },
      owner,
    )
    keys.push(created.api_key)
  }
  const wallets: { wallet_id: string; email: string }[] = []
  for (let w = 0; w < wallets_per_tenant; w++) {
    const wallet = await call<{ wallet_id: string }>(
      base,
      "POST",
      "/api/v1/wallets",
      { external_id: `w${w}`, label: `Wallet ${w}`, chain: "ethereum" },
      owner,
    )
    for (let f = 0; f < faucet_calls_per_wallet; f++) {
      await call(
        base,
        "POST",
        "/api/v1/sandbox/faucet",
        { wallet_id: wallet.wallet_id, token: "USDC", amount: faucet_whole_units.toString() },
        owner,
      )
    }
    const email = `t${index}.w${w}.${run}@bench.example`
    await call(
      base,
      "POST",
      "/api/v1/identities",
      { wallet_id: wallet.wallet_id, kind: "email", value: email },
      owner,
    )
    wallets.push({ wallet_id: wallet.wallet_id, email })
  }
  return { tenant_id: registered.tenant_id, keys, wallets }
}

interface Spec {
  readonly headers: Readonly<Record<string, string>>
  readonly body: string
}

/**
 * Every (tenant, payer -> payee, key, amount) combination, ordered so that consecutive requests go to
 * different tenants and each tenant cycles through its pairs, keys and amounts.
 */
const requestSpecs = (tenants: ReadonlyArray<Tenant>): Spec[] => {
  const perTenant = tenants.map((tenant) => {
    const pairs: [number, number][] = []
    for (let a = 0; a < tenant.wallets.length; a++)
      for (let b = 0; b < tenant.wallets.length; b++) if (a !== b) pairs.push([a, b])
    const specs: Spec[] = []
    const count = pairs.length * tenant.keys.length * amounts_cents.length
    for (let m = 0; m < count; m++) {
      const [payer, payee] = pairs[m % pairs.length] as [number, number]
      const key = tenant.keys[Math.floor(m / pairs.length) % tenant.keys.length] as string
      const cents =
        amounts_cents[Math.floor(m / (pairs.length * tenant.keys.length)) % amounts_cents.length] ?? 100
      specs.push({
        headers: {
          "content-type": "application/json",
          authorization: `Bearer ${key}`,
          "x-tenant-id": tenant.tenant_id,
        },
        body: JSON.stringify({
          recipient: tenant.wallets[payee]?.email,
          amount: (cents / 100).toFixed(2),
          token: "USDC",
          from_wallet: tenant.wallets[payer]?.wallet_id,
        }),
      })
    }
    return specs
  })
  const longest = Math.max(...perTenant.map((s) => s.length))
  const specs: Spec[] = []
  for (let m = 0; m < longest; m++) for (const tenantSpecs of perTenant) specs.push(tenantSpecs[m] as Spec)
  return specs
}

// --- the load -----------------------------------------------------------------------------------

/** The payment requests as wrk sends them (one rotation over every spec). */
const wrkRequests = (url: string, specs: ReadonlyArray<Spec>): ReadonlyArray<WrkRequest> => {
  const host = new URL(url).host
  return specs.map((spec) => ({
    head:
      `POST /api/social-payments/pay HTTP/1.1\r\nHost: ${host}\r\n` +
      Object.entries(spec.headers)
        .map(([name, value]) => `${name}: ${value}\r\n`)
        .join("") +
      `content-length: ${Buffer.byteLength(spec.body)}\r\n`,
    body: spec.body,
  }))
}

let load_runs = 0

/** One load phase: wrk from a second process, every answer counted, one 200 in `sample_every` checked. */
const runLoad = async (
  wrk: string,
  url: string,
  specs: ReadonlyArray<Spec>,
  duration_s: number,
  dir: string,
  placement: Placement | undefined,
): Promise<WrkOutcome> => {
  load_runs++
  return runWrk(wrk, {
    url: `${url}/api/social-payments/pay`,
    requests: wrkRequests(url, specs),
    connections,
    duration_s,
    timeout_s: 10,
    ...(with_idempotency ? { idempotency_prefix: `bench-${process.pid}-${load_runs}-` } : {}),
    sample_every,
    must_contain: '"status":"completed"',
    dir,
    cpus: placement?.other_cpus,
  })
}

// --- observing the processes --------------------------------------------------------------------

/** The postmaster and its live children (the backends and auxiliary processes), CPU seconds. */
const postgresCpuSeconds = (dataDir: string): number => {
  const processes = postgresProcesses(dataDir)
  if (processes === undefined) return 0
  let total = cpuSeconds(processes.postmaster, true)
  for (const child of processes.children) total += cpuSeconds(child)
  return total
}

/**
 * The machine's CPU seconds from /proc/stat: busy, in all, and stolen (time the hypervisor gave our
 * virtual CPUs' turn to other guests; on a shared host it is CPU this benchmark did not get).
 */
const machineCpuSeconds = (): { busy: number; total: number; stolen: number } => {
  const line = fs.readFileSync("/proc/stat", "utf8").split("\n")[0] ?? ""
  // user nice system idle iowait irq softirq steal
  const v = line.trim().split(/\s+/).slice(1, 9).map(Number)
  const total = v.reduce((a, b) => a + b, 0)
  const idle = (v[3] ?? 0) + (v[4] ?? 0)
  return { busy: (total - idle) / clockTicks, total: total / clockTicks, stolen: (v[7] ?? 0) / clockTicks }
}

interface CpuSnapshot {
  readonly server: number
  readonly postgres: number
  readonly bench: number
  readonly machine: { busy: number; total: number; stolen: number }
  readonly wall: number
}

const cpuSnapshot = (serverPid: number, dataDir: string): CpuSnapshot => {
  return {
    server: cpuSeconds(serverPid),
    postgres: postgresCpuSeconds(dataDir),
    // This process and its finished children: the load generator (wrk) is counted once it exits.
    bench: cpuSeconds(process.pid, true),
    machine: machineCpuSeconds(),
    wall: performance.now() / 1_000,
  }
}

/** VmRSS and VmHWM of a process in MB (0 when it is gone). */
const memory = (pid: number): { rss: number; hwm: number } => {
  try {
    const status = fs.readFileSync(`/proc/${pid}/status`, "utf8")
    const kb = (name: string) => Number(new RegExp(`^${name}:\\s+(\\d+) kB`, "m").exec(status)?.[1] ?? 0)
    return { rss: kb("VmRSS") / 1024, hwm: kb("VmHWM") / 1024 }
  } catch {
    return { rss: 0, hwm: 0 }
  }
}

/**
 * The scheduler's account of a process's main thread (the event loop): seconds on a CPU, seconds
 * runnable but waiting for one, and context switches (voluntary: it blocked; involuntary: preempted).
 */
const schedule = (pid: number) => {
  try {
    const [run_ns, wait_ns] = fs.readFileSync(`/proc/${pid}/schedstat`, "utf8").trim().split(" ").map(Number)
    const status = fs.readFileSync(`/proc/${pid}/status`, "utf8")
    const count = (name: string) => Number(new RegExp(`^${name}:\\s+(\\d+)`, "m").exec(status)?.[1] ?? 0)
    return {
      run_s: (run_ns ?? 0) / 1e9,
      wait_s: (wait_ns ?? 0) / 1e9,
      voluntary: count("voluntary_ctxt_switches"),
      involuntary: count("nonvoluntary_ctxt_switches"),
    }
  } catch {
    return { run_s: 0, wait_s: 0, voluntary: 0, involuntary: 0 }
  }
}

/** Samples pg_stat_activity of the platform's database: what its backends are doing. */
const sampleActivity = (pool: pg.Pool) => {
  const states = new Map<string, number>()
  const active = new Map<string, number>()
  let samples = 0
  let running = true
  const loop = (async () => {
    while (running) {
      try {
        const found = await pool.query<{ state: string | null; wait: string; query: string }>(
          `select state, coalesce(wait_event_type || ':' || wait_event, 'cpu') as wait,
                  left(regexp_replace(query, '\\s+', ' ', 'g'), 70) as query
             from pg_stat_activity
            where datname = current_database() and pid <> pg_backend_pid() and backend_type = 'client backend'`,
        )
        samples++
        for (const row of found.rows) {
          const state = row.state ?? "unknown"
          const key = state === "active" ? `active (${row.wait})` : state
          states.set(key, (states.get(key) ?? 0) + 1)
          // Active: what runs or waits; idle in transaction: the statement last run.
          if (state !== "idle") {
            const what = `${key}: ${row.query}`
            active.set(what, (active.get(what) ?? 0) + 1)
          }
        }
      } catch {
        // The server may be busy or going away; a lost sample is fine.
      }
      await sleep(100)
    }
  })()
  return {
    stop: async () => {
      running = false
      await loop
      return { samples, states, active }
    },
  }
}

const databaseCounters = async (pool: pg.Pool) => {
  const found = await pool.query<Record<string, string>>(
    `select xact_commit::text, xact_rollback::text, tup_inserted::text, tup_updated::text, tup_deleted::text,
            blks_read::text, blks_hit::text, w.wal_records::text, w.wal_fpi::text, w.wal_bytes::text
       from pg_stat_database, pg_stat_wal w where datname = current_database()`,
  )
  const row = found.rows[0] ?? {}
  return Object.fromEntries(Object.entries(row).map(([k, v]) => [k, Number(v)]))
}

/** Ledger appends (transactions) and their events between two instants: the group-commit batches. */
const ledgerBatches = async (pool: pg.Pool, from: Date, to: Date) => {
  const found = await pool.query<{ events: number; transactions: number }>(
    `select count(*)::int as events, count(distinct transaction_id)::int as transactions
       from events where stream_id like 'ledger-%' and recorded_at >= $1 and recorded_at < $2`,
    [from, to],
  )
  return found.rows[0] ?? { events: 0, transactions: 0 }
}

/** The statements that took the most time in PostgreSQL (with BENCH_PG_STATEMENTS=1). */
const reportStatements = async (pool: pg.Pool, payments: number) => {
  const found = await pool.query<{
    calls: string
    exec_ms: number
    plan_ms: number
    rows: string
    query: string
  }>(
    `select calls::text, total_exec_time as exec_ms, total_plan_time as plan_ms, rows::text,
            left(regexp_replace(query, '\\s+', ' ', 'g'), 90) as query
       from pg_stat_statements s join pg_database d on d.oid = s.dbid
      where d.datname = current_database()
      order by total_exec_time + total_plan_time desc limit 25`,
  )
  const total = await pool.query<{ calls: string; ms: number }>(
    `select sum(calls)::text as calls, sum(total_exec_time + total_plan_time) as ms
       from pg_stat_statements s join pg_database d on d.oid = s.dbid where d.datname = current_database()`,
  )
  const all = total.rows[0]
  const p = Math.max(1, payments)
  log(
    `pg_stat_statements over the timed phase: ${all?.calls} statements (${round(Number(all?.calls ?? 0) / p, 2)} per payment), ` +
      `${round((all?.ms ?? 0) / 1_000, 2)} s executing and planning (${round((all?.ms ?? 0) / p, 3)} ms per payment)`,
  )
  const column = (value: number, digits: number, width: number) => value.toFixed(digits).padStart(width)
  log("   calls/payment  ms/payment  of which planning  mean ms  rows/call  statement")
  for (const r of found.rows) {
    const calls = Math.max(1, Number(r.calls))
    const ms = r.exec_ms + r.plan_ms
    const cells = [
      column(Number(r.calls) / p, 3, 16),
      column(ms / p, 4, 10),
      column(r.plan_ms / p, 4, 17),
      column(ms / calls, 3, 7),
      column(Number(r.rows) / calls, 1, 9),
    ]
    log(`${cells.join("  ")}  ${r.query}`)
  }
}

// --- the checks ---------------------------------------------------------------------------------

/** Waits until the ledger projection has applied every ledger stream up to its head. */
const waitForProjection = async (pool: pg.Pool): Promise<boolean> => {
  const deadline = Date.now() + 120_000
  while (Date.now() < deadline) {
    const found = await pool.query<{ behind: number }>(
      `select count(*)::int as behind
         from streams s
         left join read_model.projection_streams p on p.projection = 'ledger' and p.stream_id = s.stream_id
        where s.stream_id like 'ledger-%' and coalesce(p.version, 0) < s.version`,
    )
    if ((found.rows[0]?.behind ?? 1) === 0) return true
    await sleep(100)
  }
  return false
}

interface Conservation {
  readonly ok: boolean
  readonly completed: number
  readonly failed: number
  readonly pending: number
  readonly problems: ReadonlyArray<string>
}

/**
 * Per tenant, from the read model and the payment records (not the events `verify` reads): the
 * faucet account owes exactly what was issued, wallets plus fee revenue hold exactly that, the fee
 * revenue is the sum of the completed payments' fees, nothing is pending.
 */
const checkConservation = async (pool: pg.Pool, tenants: ReadonlyArray<Tenant>): Promise<Conservation> => {
  const issued =
    BigInt(wallets_per_tenant * faucet_calls_per_wallet) * faucet_whole_units * 10n ** BigInt(usdc_decimals)
  const balances = await pool.query<{ tenant: string; kind: string; net: string; pending: string }>(
    `select tenant, kind, sum(credits_posted - debits_posted)::text as net,
            sum(debits_pending + credits_pending)::text as pending
       from read_model.ledger_accounts
      where environment = 'sandbox' and asset_code = 'USDC@ethereum'
      group by tenant, kind`,
  )
  const payments = await pool.query<{ tenant_id: string; status: string; n: number; fees: string }>(
    `select tenant_id, status, count(*)::int as n, coalesce(sum(fee), 0)::text as fees
       from platform.payments group by tenant_id, status`,
  )
  const problems: string[] = []
  let completed = 0
  let failed = 0
  let pending = 0
  for (const row of payments.rows) {
    if (row.status === "completed") completed += row.n
    else if (row.status === "failed") failed += row.n
    else pending += row.n
  }
  for (const tenant of tenants) {
    const net = (kind: string) =>
      BigInt(balances.rows.find((r) => r.tenant === tenant.tenant_id && r.kind === kind)?.net ?? "0")
    const pendingSum = balances.rows
      .filter((r) => r.tenant === tenant.tenant_id)
      .reduce((sum, r) => sum + BigInt(r.pending), 0n)
    const fees = BigInt(
      payments.rows.find((r) => r.tenant_id === tenant.tenant_id && r.status === "completed")?.fees ?? "0",
    )
    const world = net("world")
    const held = net("wallet") + net("fee_revenue") + net("clearing")
    const t = tenant.tenant_id
    if (world !== -issued) problems.push(`${t}: faucet account ${world}, expected ${-issued}`)
    if (held !== issued) problems.push(`${t}: wallets + fees + escrow hold ${held}, issued ${issued}`)
    if (net("fee_revenue") !== fees)
      problems.push(`${t}: fee revenue ${net("fee_revenue")}, fees recorded ${fees}`)
    if (net("wallet") !== issued - fees)
      problems.push(`${t}: wallets hold ${net("wallet")}, expected ${issued - fees}`)
    if (pendingSum !== 0n) problems.push(`${t}: ${pendingSum} pending`)
  }
  return { ok: problems.length === 0, completed, failed, pending, problems }
}

// --- the CPU profile ----------------------------------------------------------------------------

interface CpuProfile {
  readonly nodes: ReadonlyArray<{
    readonly id: number
    readonly callFrame: { readonly functionName: string; readonly url: string; readonly lineNumber: number }
  }>
  readonly samples: ReadonlyArray<number>
  readonly timeDeltas: ReadonlyArray<number>
  readonly startTime: number
}

/** Where a script lives, shortly: `effect/dist/...` for packages, `src/...` for ours. */
const shortUrl = (url: string): string => {
  const file = url.replace(/^file:\/\//, "")
  const modules = file.lastIndexOf("/node_modules/")
  if (modules >= 0) return file.slice(modules + "/node_modules/".length)
  return file.startsWith(root) ? file.slice(root.length + 1) : file
}

/** The package, our top-level directory and subdirectory, or the runtime, that a function belongs to. */
const area = (url: string, name: string): string => {
  if (url === "") return name.startsWith("(") ? name : "(native)"
  if (url.startsWith("node:")) return url
  const short = shortUrl(url)
  if (short !== url.replace(/^file:\/\//, "") && url.includes("/node_modules/")) {
    const parts = short.split("/")
    return parts[0]?.startsWith("@") ? `${parts[0]}/${parts[1]}` : (parts[0] ?? short)
  }
  return short.split("/").slice(0, 2).join("/")
}

/**
 * Self time per function and per area over the samples between `from_us` and `to_us` (the V8
 * profiler's clock is CLOCK_MONOTONIC, the same as process.hrtime in this process).
 */
const summarizeProfile = (file: string, from_us: number, to_us: number) => {
  const profile = JSON.parse(fs.readFileSync(file, "utf8")) as CpuProfile
  const nodes = new Map(profile.nodes.map((n) => [n.id, n.callFrame]))
  const byFunction = new Map<string, number>()
  const byArea = new Map<string, number>()
  let t = profile.startTime
  let total = 0
  let idle = 0
  let writes = 0
  for (let i = 0; i < profile.samples.length; i++) {
    t += profile.timeDeltas[i] ?? 0
    if (t < from_us || t > to_us) continue
    const delta = profile.timeDeltas[i + 1] ?? 0
    const frame = nodes.get(profile.samples[i] as number)
    if (frame === undefined) continue
    if (frame.functionName === "(idle)") {
      idle += delta
      continue
    }
    // Socket writes: on loopback they wake the reader (a PostgreSQL backend, the load generator),
    // which may preempt this thread inside the syscall; the profiler's wall-clock samples then
    // count the time spent waiting for a CPU here. Kept apart from the rest.
    if (frame.functionName === "writev" || frame.functionName === "writeBuffer") {
      writes += delta
      continue
    }
    total += delta
    const where = frame.url === "" ? "" : ` ${shortUrl(frame.url)}:${frame.lineNumber + 1}`
    const key = `${frame.functionName || "(anonymous)"}${where}`
    byFunction.set(key, (byFunction.get(key) ?? 0) + delta)
    const a = area(frame.url, frame.functionName)
    byArea.set(a, (byArea.get(a) ?? 0) + delta)
  }
  const top = (map: Map<string, number>, n: number) =>
    [...map.entries()]
      .sort((a, b) => b[1] - a[1])
      .slice(0, n)
      .map(
        ([key, us]) =>
          `  ${(us / 1_000).toFixed(0).padStart(7)} ms ${((100 * us) / total).toFixed(1).padStart(5)} %  ${key}`,
      )
  log(
    `\nserver CPU profile over the timed phase (wall-clock samples): ${round(total / 1e6, 2)} s running JavaScript ` +
      `and native code, ${round(writes / 1e6, 2)} s in socket writes (writev, writeBuffer: the syscall and any ` +
      `preemption inside it; compare the scheduler's wait above), ${round(idle / 1e6, 2)} s idle in the event loop`,
  )
  log("top self time by area (percent of the time outside socket writes and idle):")
  for (const line of top(byArea, 20)) log(line)
  log("top self time by function:")
  for (const line of top(byFunction, 40)) log(line)
}

// --- reports ------------------------------------------------------------------------------------

const fixed = (value: number, digits: number, width: number) => value.toFixed(digits).padStart(width)

/** The figures of the timed phase; errors include the warm-up's. */
const reportLoad = (load: WrkOutcome, warmup: WrkOutcome | undefined) => {
  const payments_per_s = load.answers_2xx / load.duration_s
  const errorsOf = (outcome: WrkOutcome | undefined) =>
    outcome === undefined ? 0 : outcome.non_2xx + outcome.connection_errors + outcome.bad_samples
  const warmup_errors = errorsOf(warmup)
  const errors = errorsOf(load) + warmup_errors
  const { p50, p90, p99, p999, max } = load.latency_ms
  log(
    `\npayments: ${load.answers_2xx} in ${round(load.duration_s, 2)} s = ${round(payments_per_s)} payments/s ` +
      `(answers ${load.answers})`,
  )
  log(
    `latency (every answer; wrk's histogram): p50 ${round(p50, 2)} ms, p90 ${round(p90, 2)} ms, ` +
      `p99 ${round(p99, 2)} ms, p99.9 ${round(p999, 2)} ms, max ${round(max, 2)} ms`,
  )
  log(
    `errors: ${errors} (non-2xx ${load.non_2xx}, connection errors ${load.connection_errors} of which timeouts ` +
      `${load.timeouts}, sampled 200s not completed ${load.bad_samples}/${load.sampled}, ` +
      `warm-up ${warmup_errors}); status codes ${JSON.stringify(load.status_counts)}`,
  )
  for (const line of [...(warmup?.unexpected ?? []), ...load.unexpected]) log(`  unexpected: ${line}`)
  return { payments_per_s, p50_ms: p50, p99_ms: p99, errors }
}

/** Starts watching the server, PostgreSQL and the machine; `reportObservation` ends it. */
const startObservation = async (pid: number, dataDir: string, pool: pg.Pool) => {
  const counters = await databaseCounters(pool)
  const sched = schedule(pid)
  const from = new Date()
  const activity = sampleActivity(pool)
  const cpu = cpuSnapshot(pid, dataDir)
  return { counters, sched, from, activity, cpu }
}

type Observed = Awaited<ReturnType<typeof startObservation>>

/** What the server, PostgreSQL and the machine did between `before` and now, per payment. */
const reportObservation = async (
  pid: number,
  dataDir: string,
  pool: pg.Pool,
  before: Observed,
  load: WrkOutcome,
) => {
  const cpu = cpuSnapshot(pid, dataDir)
  const sched = schedule(pid)
  const to = new Date()
  const activity = await before.activity.stop()
  const counters = await databaseCounters(pool)
  const payments = Math.max(1, load.answers_2xx)
  const wall = cpu.wall - before.cpu.wall
  const server_s = cpu.server - before.cpu.server
  const postgres_s = cpu.postgres - before.cpu.postgres
  const bench_s = cpu.bench - before.cpu.bench
  const busy_s = cpu.machine.busy - before.cpu.machine.busy
  const stolen_s = cpu.machine.stolen - before.cpu.machine.stolen
  const percent = (s: number) => `${round((100 * s) / wall, 0)} %`
  log(
    `CPU over the timed phase (100 % = one core; the machine has ${os.cpus().length}): server ${percent(server_s)}, ` +
      `PostgreSQL ${percent(postgres_s)}, load generator ${percent(bench_s)}, ` +
      `rest of the machine ${percent(busy_s - stolen_s - server_s - postgres_s - bench_s)}, ` +
      `stolen by the hypervisor ${percent(stolen_s)}; ` +
      `machine busy ${round((100 * busy_s) / (cpu.machine.total - before.cpu.machine.total), 0)} %`,
  )
  log(
    `CPU per payment: server ${round((server_s * 1_000) / payments, 3)} ms, ` +
      `PostgreSQL ${round((postgres_s * 1_000) / payments, 3)} ms`,
  )
  const waited = sched.wait_s - before.sched.wait_s
  const ran = sched.run_s - before.sched.run_s
  log(
    `server event loop thread: on a CPU ${round(ran, 1)} s, runnable but waiting for a CPU ${round(waited, 1)} s ` +
      `(${round((100 * waited) / Math.max(1e-9, ran + waited), 0)} % of its non-blocked time); context switches ` +
      `per payment: ${round((sched.voluntary - before.sched.voluntary) / payments, 2)} voluntary, ` +
      `${round((sched.involuntary - before.sched.involuntary) / payments, 2)} involuntary`,
  )
  const per = (key: string) => round(((counters[key] ?? 0) - (before.counters[key] ?? 0)) / payments, 2)
  log(
    `database per payment: ${per("xact_commit")} commits, ${per("xact_rollback")} rollbacks, ` +
      `${per("tup_inserted")} rows inserted, ${per("tup_updated")} updated, ${per("tup_deleted")} deleted, ` +
      `${per("blks_hit")} buffer hits, ${per("blks_read")} reads (pg_stat_database, approximate); ` +
      `WAL ${round(per("wal_bytes"), 0)} bytes in ${per("wal_records")} records, ${per("wal_fpi")} full-page images ` +
      `(pg_stat_wal, the whole server)`,
  )
  const batches = await ledgerBatches(pool, before.from, to)
  log(
    `ledger appends: ${batches.transactions} transactions for ${batches.events} events = ` +
      `${round(batches.events / 2 / Math.max(1, batches.transactions), 2)} payments per commit, ` +
      `${round(batches.transactions / load.duration_s, 0)} ledger commits/s`,
  )
  if (pg_statements) await reportStatements(pool, load.answers_2xx)
  const n = Math.max(1, activity.samples)
  const byCount = (map: Map<string, number>) => [...map.entries()].sort((a, b) => b[1] - a[1])
  log(`pg_stat_activity, ${activity.samples} samples, mean backends per sample:`)
  for (const [state, count] of byCount(activity.states)) log(`  ${fixed(count / n, 2, 6)}  ${state}`)
  log("  statements of non-idle backends (mean per sample; idle in transaction: the last one run):")
  for (const [query, count] of byCount(activity.active).slice(0, 14))
    log(`  ${fixed(count / n, 2, 6)}  ${query}`)
  return { stolen_pct: round((100 * stolen_s) / wall, 0) }
}

// --- main ---------------------------------------------------------------------------------------

/** The embedded server with pg_stat_statements loaded, started by this process (BENCH_PG_STATEMENTS=1). */
const startInstrumentedDatabase = (dataDir: string) =>
  startEmbedded({
    dataDir,
    postgresFlags: [
      "-c",
      "shared_preload_libraries=pg_stat_statements",
      "-c",
      "pg_stat_statements.track=all",
      "-c",
      "pg_stat_statements.track_planning=on",
    ],
  })

/** Everything but the data directory; `defer` registers what to undo, run in reverse order. */
const benchmark = async (dataDir: string, defer: (undo: () => unknown) => void) => {
  const profileDir = profile ? path.join(dataDir, "profile") : undefined
  const options = `${with_idempotency ? ", idempotency keys" : ""}${profile ? ", CPU profile" : ""}${pg_statements ? ", pg_stat_statements" : ""}`
  log(
    `bench:api: ${tenants_count} tenants x ${wallets_per_tenant} wallets, ${connections} connections, ` +
      `${warmup_seconds} s warm-up + ${seconds} s${options}`,
  )
  const load_average = os.loadavg().map((l) => round(l, 2))
  log(`machine: ${os.cpus().length} cores, load average ${load_average.join(" ")}`)
  log(`data: ${dataDir}`)
  const wrk = findWrk()
  const started = performance.now()
  // With BENCH_PG_STATEMENTS=1 this process starts (and at the end stops) the embedded server; the
  // platform and the CLI share it, as they would share one the platform started.
  const own = pg_statements ? await startInstrumentedDatabase(dataDir) : undefined
  if (own !== undefined) defer(() => own.stop())
  const server = await startServer({
    dataDir,
    profileDir,
    nodeFlags: (process.env.BENCH_NODE_FLAGS ?? "").split(" ").filter(Boolean),
    // Social payments touch no chain: no local chains, so their block production takes no CPU.
    env: {
      SANDBOX_EVM_CHAINS: process.env.SANDBOX_EVM_CHAINS ?? "",
      SANDBOX_SOLANA: process.env.SANDBOX_SOLANA ?? "false",
      SANDBOX_TON: process.env.SANDBOX_TON ?? "false",
    },
  })
  defer(() => (server.child.exitCode === null ? stopServer(server) : undefined))
  const pid = server.child.pid as number
  log(`server: pid ${pid}, ${server.url}, healthy after ${round((performance.now() - started) / 1_000, 1)} s`)
  let peak_rss_mb = 0
  const memoryTimer = setInterval(() => {
    peak_rss_mb = Math.max(peak_rss_mb, memory(pid).rss)
  }, 250)
  defer(() => clearInterval(memoryTimer))
  // The platform's database, in the server it runs (or ours), shared until the end: the auditor's
  // `verify` below finds it still running after the platform stopped. The last process of ours to
  // leave it stops it, so no server outlives the benchmark (with BENCH_KEEP_DATA=1 it would run on).
  const shared = own ?? (await startEmbedded({ dataDir }))
  if (own === undefined) defer(() => shared.stop())
  const databaseUrl = await ensureDatabase(shared.url, "platform")
  const pool = new pg.Pool({ connectionString: databaseUrl, max: 3 })
  pool.on("error", () => {})
  let poolOpen = true
  defer(() => (poolOpen ? pool.end() : undefined))
  const run = Date.now().toString(36)
  const setupStarted = performance.now()
  const tenants = await Promise.all(
    Array.from({ length: tenants_count }, (_, i) => setupTenant(server.url, i, run)),
  )
  const specs = requestSpecs(tenants)
  log(
    `setup: ${tenants_count} tenants, ${tenants_count * keys_per_tenant} keys, ` +
      `${tenants_count * wallets_per_tenant} wallets funded and linked in ` +
      `${round((performance.now() - setupStarted) / 1_000, 1)} s; ${specs.length} distinct payment requests`,
  )
  // One payment by hand: the shape of a good answer.
  const first = specs[0] as Spec
  const smoke = await fetch(`${server.url}/api/social-payments/pay`, {
    method: "POST",
    headers: first.headers,
    body: first.body,
  })
  const smokeBody = (await smoke.json()) as { status?: string }
  if (smoke.status !== 200 || smokeBody.status !== "completed")
    throw new Error(`a first payment failed: ${smoke.status} ${JSON.stringify(smokeBody)}`)

  const planned = planPlacement()
  if ("skipped" in planned) log(`placement: left to the scheduler (${planned.skipped})`)
  else {
    const placed = place(planned, pid, dataDir)
    log(
      `placement: the server's event loop on CPU ${planned.loop_cpu}; its ${placed.threads - 1} other threads, ` +
        `PostgreSQL (${placed.postgres} processes) and wrk on CPU ${planned.other_cpus} (BENCH_PIN=1)`,
    )
  }
  const placement = "skipped" in planned ? undefined : planned

  let warmup: WrkOutcome | undefined
  if (warmup_seconds > 0) {
    log(`\nwarm-up: ${warmup_seconds} s`)
    warmup = await runLoad(wrk, server.url, specs, warmup_seconds, dataDir, placement)
    log(
      `  ${round(warmup.answers_2xx / warmup.duration_s, 0)} payments/s, ` +
        `non-2xx ${warmup.non_2xx}, connection errors ${warmup.connection_errors}`,
    )
  }

  log(`\nload: ${seconds} s, ${connections} connections`)
  if (pg_statements) {
    await pool.query("create extension if not exists pg_stat_statements")
    await pool.query("select pg_stat_statements_reset()")
  }
  // Threads and backends started since (they inherit their creator's CPUs) are placed too.
  if (placement !== undefined) place(placement, pid, dataDir)
  const before = await startObservation(pid, dataDir, pool)
  const from_us = Number(process.hrtime.bigint() / 1_000n)
  const load = await runLoad(wrk, server.url, specs, seconds, dataDir, placement)
  const to_us = Number(process.hrtime.bigint() / 1_000n)
  const figures = reportLoad(load, warmup)
  const observed = await reportObservation(pid, dataDir, pool, before, load)

  // Answers still in flight when the load stopped may complete after it: let them.
  await sleep(1_000)
  const conservation = (await waitForProjection(pool))
    ? await checkConservation(pool, tenants)
    : {
        ok: false,
        completed: 0,
        failed: 0,
        pending: 0,
        problems: ["the projection did not catch up in 120 s"],
      }
  const answered = 1 + load.answers_2xx + (warmup?.answers_2xx ?? 0)
  const unanswered = conservation.completed - answered
  const recordsMatch = unanswered >= 0 && unanswered <= connections * (warmup === undefined ? 1 : 2)
  log(
    `\nconservation (read model, per tenant): ${conservation.ok ? "ok" : "FAILED"}; payments recorded: ` +
      `${conservation.completed} completed, ${conservation.failed} failed, ${conservation.pending} pending; ` +
      `2xx answers ${answered} (${unanswered} completed unanswered at the stop: ${recordsMatch ? "ok" : "MISMATCH"})`,
  )
  for (const problem of conservation.problems.slice(0, 10)) log(`  ${problem}`)

  peak_rss_mb = Math.max(peak_rss_mb, memory(pid).hwm)
  log(`server peak RSS: ${round(peak_rss_mb)} MB (VmHWM)`)
  const warnings = server.warnings()
  log(`server log lines at warn or above: ${warnings.length}`)
  for (const line of warnings.slice(0, 5)) log(`  ${line.slice(0, 300)}`)

  clearInterval(memoryTimer)
  poolOpen = false
  await pool.end()
  const stopStarted = performance.now()
  const code = await stopServer(server)
  log(`server stopped (exit ${code}) in ${round((performance.now() - stopStarted) / 1_000, 1)} s`)

  const verify = runVerify(dataDir)
  log(`\n${verify.output}`)

  if (profileDir !== undefined) {
    const files = fs.existsSync(profileDir)
      ? fs.readdirSync(profileDir).filter((f) => f.endsWith(".cpuprofile"))
      : []
    if (files[0] === undefined) log("no CPU profile was written")
    else {
      summarizeProfile(path.join(profileDir, files[0]), from_us, to_us)
      log(
        `profile: ${path.join(profileDir, files[0])}${keep_data ? "" : " (deleted; BENCH_KEEP_DATA=1 keeps it)"}`,
      )
    }
  }

  const summary = {
    payments_per_s: round(figures.payments_per_s),
    p50_ms: round(figures.p50_ms, 2),
    p99_ms: round(figures.p99_ms, 2),
    errors: figures.errors,
    verify: verify.ok ? "ok" : "failed",
    conservation: conservation.ok && recordsMatch ? "ok" : "failed",
    rss_peak_mb: round(peak_rss_mb),
    cpu_stolen_pct: observed.stolen_pct,
    pinned: placement !== undefined,
    connections,
    seconds,
  }
  process.stdout.write(`${JSON.stringify(summary)}\n`)
}

await runBenchmark("bench-api-", keep_data, benchmark)
