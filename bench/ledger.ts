/**
 * Ledger benchmark (`npm run bench:ledger`), on a fresh embedded PostgreSQL with fsync and
 * synchronous_commit on (the server defaults):
 *   1. pgbench's TPC-B (`pgbench -i -s 10`, 16 clients, 20 s) as the baseline of this server;
 *   2. the ledger accepting payment commands (payment + fee linked pair, balance checks, hash chain,
 *      idempotency keys) from 16 concurrent callers for 20 s;
 *   3. replay: rebuilding the projections from zero over 1M events.
 * Prints the figures, then one JSON line:
 *   {"ledger_tps","pgbench_tps","ratio","p99_ms","replay_events_per_s","peak_rss_mb"}
 * Environment: BENCH_SECONDS (default 20), BENCH_REPLAY_EVENTS (default 1000000), BENCH_PHASES
 * (default "pgbench,ledger,replay").
 */
import { execFileSync } from "node:child_process"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { Effect, Result } from "effect"
import pg from "pg"
import { makePostgresEventStore } from "../adapters/eventstore/postgres/event-store.ts"
import type { LedgerCommand } from "../domain/ledger/commands.ts"
import {
  compactTransfersWhenDue,
  decideAndEvolve,
  initialState,
  type LedgerId,
  type LedgerState,
  ledgerEventSchemaVersion,
  ledgerStreamId,
  paymentTransfers,
} from "../domain/ledger/index.ts"
import { ensureDatabase, startEmbedded } from "../src/db/embedded.ts"
import { runMigrations } from "../src/db/migrate.ts"
import { platformMigrations } from "../src/db/migrations.ts"
import { uuidv7 } from "../src/ids.ts"
import { makeLedgerWriter } from "../src/ledger/writer.ts"
import type { NewEvent } from "../src/ports/event-store.ts"
import { rebuildProjection } from "../src/projections/rebuild.ts"
import { findOrInstall, log, percentile, round } from "./support.ts"

const seconds = Number(process.env.BENCH_SECONDS ?? 20)
/** For profiling one part: a comma list of pgbench, ledger, replay (default all three). */
const phases = new Set((process.env.BENCH_PHASES ?? "pgbench,ledger,replay").split(","))
const replay_events_target = Number(process.env.BENCH_REPLAY_EVENTS ?? 1_000_000)
const callers = 16
const ledgers_count = 1
const wallets_per_ledger = 64
const usdc = { code: "USDC@ethereum", symbol: "USDC", chain: "ethereum", decimals: 6 }

/** The accounts of a benchmark ledger: the world (money from outside), fee revenue and wallets. */
const openCommand = (
  account_id: string,
  kind: "world" | "wallet" | "fee_revenue",
  now_ms: number,
): LedgerCommand => ({
  type: "OpenAccount",
  account_id,
  asset: usdc,
  kind,
  flags: { debits_must_not_exceed_credits: kind !== "world", credits_must_not_exceed_debits: false },
  code: 1,
  user_data: null,
  now_ms,
})

/** Funds wallet `w<index>` from the world with more than any run can spend. */
const fundCommand = (index: number, now_ms: number): LedgerCommand => ({
  type: "CreateTransfers",
  group_id: null,
  transfers: [
    {
      transfer_id: `fund${index}`,
      debit_account_id: "world",
      credit_account_id: `w${index}`,
      amount: 10n ** 15n,
      code: 1,
      user_data: null,
    },
  ],
  now_ms,
})

/** pgbench ships with Debian's postgresql-client. */
const findPgbench = (): string | undefined => findOrInstall("pgbench", "postgresql-client")

const runPgbench = (socketDir: string, port: number, serverUrl: string): number | null => {
  const pgbench = findPgbench()
  if (pgbench === undefined) {
    log("pgbench unavailable: baseline skipped")
    return null
  }
  const env = { ...process.env, PGPASSWORD: new URL(serverUrl).password }
  const common = ["-h", socketDir, "-p", String(port), "-U", "postgres"]
  execFileSync(pgbench, ["-i", "-s", "10", "-q", ...common, "pgbench"], {
    env,
    stdio: ["ignore", "ignore", "pipe"],
  })
  const output = execFileSync(pgbench, ["-c", "16", "-j", "2", "-T", String(seconds), ...common, "pgbench"], {
    env,
    encoding: "utf8",
    stdio: ["ignore", "pipe", "pipe"],
  })
  const tps = /tps = ([\d.]+) \(without initial connection time\)/.exec(output)?.[1]
  log(
    output
      .split("\n")
      .filter((l) => /latency average|tps =/.test(l))
      .join("\n"),
  )
  return tps === undefined ? null : Number(tps)
}

const benchLedger = async (pool: pg.Pool) => {
  const store = makePostgresEventStore(pool)
  const writer = makeLedgerWriter(store)
  const ledgers: LedgerId[] = Array.from({ length: ledgers_count }, (_, i) => ({
    tenant: `bench${i}`,
    environment: "sandbox",
  }))
  const ctx = { actor: "bench", correlation_id: "bench" }
  const must = async (ledger: LedgerId, command: LedgerCommand) => {
    const result = await Effect.runPromise(Effect.result(writer.execute(ledger, command, ctx)))
    if (Result.isFailure(result)) throw new Error(`setup failed: ${result.failure._tag}`)
  }
  const now = Date.now()
  for (const ledger of ledgers) {
    await must(ledger, openCommand("world", "world", now))
    await must(ledger, openCommand("fees", "fee_revenue", now))
    for (let w = 0; w < wallets_per_ledger; w++) {
      await must(ledger, openCommand(`w${w}`, "wallet", now))
      await must(ledger, fundCommand(w, now))
    }
  }
  const latencies: number[] = []
  let transfers = 0
  let refused = 0
  const deadline = performance.now() + seconds * 1_000
  const caller = async (index: number) => {
    const ledger = ledgers[index % ledgers_count] as LedgerId
    let n = 0
    while (performance.now() < deadline) {
      const id = `${index}-${n++}`
      const payer = (index * 7 + n) % wallets_per_ledger
      const payee = (payer + 1 + (n % (wallets_per_ledger - 1))) % wallets_per_ledger
      const command = paymentTransfers({
        group_id: `g${id}`,
        payment_transfer_id: `p${id}`,
        fee_transfer_id: `f${id}`,
        payer_account_id: `w${payer}`,
        payee_account_id: `w${payee}`,
        fee_account_id: "fees",
        amount: BigInt(1_000_000 + n),
        code: 1,
        user_data: null,
        now_ms: Date.now(),
      })
      const started = performance.now()
      const result = await Effect.runPromise(
        Effect.result(writer.execute(ledger, command, { ...ctx, idempotency_key: `k${id}` })),
      )
      latencies.push(performance.now() - started)
      if (Result.isSuccess(result)) transfers += result.success.events.length
      else refused++
    }
  }
  const started = performance.now()
  await Promise.all(Array.from({ length: callers }, (_, i) => caller(i)))
  const elapsed_s = (performance.now() - started) / 1_000
  latencies.sort((a, b) => a - b)
  await Effect.runPromise(store.close)
  return {
    ledger_tps: transfers / elapsed_s,
    payments: latencies.length,
    refused,
    p50_ms: percentile(latencies, 50),
    p99_ms: percentile(latencies, 99),
  }
}

/** Fills a ledger stream with valid payment events (decided by the domain) up to `target` events in all. */
const fillForReplay = async (pool: pg.Pool, target: number) => {
  const store = makePostgresEventStore(pool)
  const existing = Number(
    (await pool.query<{ n: string }>("select count(*)::text as n from events")).rows[0]?.n ?? 0,
  )
  const ledger: LedgerId = { tenant: "replay", environment: "sandbox" }
  const stream_id = ledgerStreamId(ledger)
  const metadata = {
    tenant: "replay",
    environment: "sandbox",
    actor: "bench",
    correlation_id: "fill",
    causation_id: null,
    idempotency_key: null,
  }
  let state: LedgerState = initialState
  let version = 0
  let pending: NewEvent[] = []
  const now = Date.now()
  const decideInto = (command: LedgerCommand) => {
    const result = decideAndEvolve(command, state)
    if (Result.isFailure(result)) throw new Error(`fill: ${result.failure._tag}`)
    // Compacted as it goes, as the platform's writer does: 1M events need little memory.
    state = compactTransfersWhenDue(result.success.state)
    for (const event of result.success.events) {
      pending.push({
        event_id: uuidv7(now),
        event_type: event.type,
        schema_version: ledgerEventSchemaVersion,
        data: event.data as unknown as Record<string, unknown>,
        metadata,
      })
    }
  }
  const flush = async () => {
    const appended = await Effect.runPromise(
      store.append(stream_id, version === 0 ? "no_stream" : version, pending),
    )
    version = appended.next_expected_version
    pending = []
  }
  const wallets = 1_000
  decideInto(openCommand("world", "world", now))
  decideInto(openCommand("fees", "fee_revenue", now))
  for (let i = 0; i < wallets; i++) decideInto(openCommand(`w${i}`, "wallet", now))
  for (let i = 0; i < wallets; i++) decideInto(fundCommand(i, now))
  let written = existing
  for (let n = 0; written + pending.length < target; n++) {
    decideInto(
      paymentTransfers({
        group_id: `g${n}`,
        payment_transfer_id: `p${n}`,
        fee_transfer_id: `f${n}`,
        payer_account_id: `w${n % wallets}`,
        payee_account_id: `w${(n + 1 + ((n * 7) % (wallets - 1))) % wallets}`,
        fee_account_id: "fees",
        amount: BigInt(1_000 + (n % 1_000_000)),
        code: 1,
        user_data: null,
        now_ms: now,
      }),
    )
    if (pending.length >= 5_000) {
      written += pending.length
      await flush()
      if (n % 50_000 === 0) log(`  filled ${written} events`)
    }
  }
  if (pending.length > 0) await flush()
  await Effect.runPromise(store.close)
}

const main = async () => {
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), "bench-ledger-"))
  const server = await startEmbedded({ dataDir })
  try {
    const settings = new pg.Client({ connectionString: server.url })
    await settings.connect()
    const shown = await settings.query(
      "select current_setting('fsync') as fsync, current_setting('synchronous_commit') as sc",
    )
    await settings.end()
    log(
      `server: PostgreSQL on its socket (port ${server.port}), fsync=${shown.rows[0]?.fsync}, synchronous_commit=${shown.rows[0]?.sc}`,
    )

    log(`\n[1/3] pgbench TPC-B, scale 10, 16 clients, ${seconds} s`)
    const pgbench_tps = phases.has("pgbench")
      ? runPgbench(path.join(dataDir, "pg"), server.port, await ensureDatabase(server.url, "pgbench"))
      : null

    log(
      `\n[2/3] ledger: payment + fee pairs from ${callers} callers over ${ledgers_count} ledgers, ${seconds} s`,
    )
    const pool = new pg.Pool({ connectionString: await ensureDatabase(server.url, "ledger"), max: 20 })
    pool.on("error", () => {})
    await runMigrations(pool, platformMigrations)
    const ledger = phases.has("ledger")
      ? await benchLedger(pool)
      : { ledger_tps: 0, payments: 0, refused: 0, p50_ms: 0, p99_ms: 0 }
    log(
      `  transfers/s: ${round(ledger.ledger_tps)}  payments: ${ledger.payments}  refused: ${ledger.refused}`,
    )
    log(`  commit latency p50: ${round(ledger.p50_ms, 2)} ms  p99: ${round(ledger.p99_ms, 2)} ms`)

    log(`\n[3/3] replay: rebuilding projections over ${replay_events_target} events`)
    if (phases.has("replay")) await fillForReplay(pool, replay_events_target)
    let lastPrint = 0
    const replay = await rebuildProjection(pool, makePostgresEventStore(pool), {
      onProgress: (p) => {
        if (p.elapsed_ms - lastPrint >= 2_000) {
          lastPrint = p.elapsed_ms
          log(
            `  ${p.event_count}/${p.event_count_total} events, ${round(p.event_count / (p.elapsed_ms / 1_000), 0)} events/s`,
          )
        }
      },
    })
    const replay_events_per_s = replay.event_count / (replay.elapsed_ms / 1_000)
    log(
      `  replayed ${replay.event_count} events in ${round(replay.elapsed_ms / 1_000, 2)} s: ${round(replay_events_per_s, 0)} events/s`,
    )
    await pool.end()

    const peak_rss_mb = process.resourceUsage().maxRSS / 1024
    log(`\npeak RSS: ${round(peak_rss_mb)} MB`)
    const result = {
      ledger_tps: round(ledger.ledger_tps),
      pgbench_tps: pgbench_tps === null ? null : round(pgbench_tps),
      ratio: pgbench_tps === null ? null : round(ledger.ledger_tps / pgbench_tps, 2),
      p99_ms: round(ledger.p99_ms, 2),
      replay_events_per_s: round(replay_events_per_s, 0),
      peak_rss_mb: round(peak_rss_mb),
    }
    process.stdout.write(`${JSON.stringify(result)}\n`)
  } finally {
    await server.stop()
    fs.rmSync(dataDir, { recursive: true, force: true })
  }
}

await main()
