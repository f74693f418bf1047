/**
 * Proves the ledger command line as an operator runs it: a child process against a real database
 * (DATABASE_URL), `verify` passing on an intact store and naming the one tampered event otherwise,
 * `replay` reporting progress and leaving the same tables, `export` round-tripping in both formats,
 * and bad arguments failing with exit code 2.
 */
import { spawn } from "node:child_process"
import * as fs from "node:fs"
import * as net from "node:net"
import * as os from "node:os"
import * as path from "node:path"
import { Effect } from "effect"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { eventHash } from "../../adapters/eventstore/hash.ts"
import {
  makePostgresEventStore,
  type PostgresEventStore,
} from "../../adapters/eventstore/postgres/event-store.ts"
import { live_schema, projectionTablesSql } from "../../projections/schema.ts"
import { export_columns } from "../../src/cli/export.ts"
import { progressLine } from "../../src/cli/replay.ts"
import { ensureDatabase } from "../../src/db/embedded.ts"
import { uuidv7 } from "../../src/ids.ts"
import { waitForStreamHead } from "../../src/ledger/queries.ts"
import type { RecordedEvent } from "../../src/ports/event-store.ts"
import { compareSchemas } from "../../src/projections/rebuild.ts"
import { startProjection } from "../../src/projections/runner.ts"
import { freshDatabase, type TestDatabase } from "../support/db.ts"
import { syntheticLedger } from "../support/projections-fixture.ts"
import { newEvents } from "./event-store-contract.ts"

const cli = path.resolve(import.meta.dirname, "../../src/cli/main.ts")

interface CliResult {
  readonly code: number | null
  readonly stdout: string
  readonly stderr: string
}

/** Waits until `count` sessions of `db` wait for the log to settle (settled.ts's polling query). */
const waitingForSettledEnd = async (db: TestDatabase, count: number) => {
  const deadline = Date.now() + 60_000
  for (;;) {
    const waiting = await db.pool.query<{ n: number }>(
      `select count(*)::int as n from pg_stat_activity
        where datname = current_database() and query like '%pg_snapshot_xip%'
          and query not like '%pg_stat_activity%'`,
    )
    if ((waiting.rows[0]?.n ?? 0) >= count || Date.now() > deadline) return
    await new Promise((resolve) => setTimeout(resolve, 50))
  }
}

const runCli = (args: ReadonlyArray<string>, env: Record<string, string> = {}): Promise<CliResult> =>
  new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [cli, ...args], {
      env: { ...process.env, DATABASE_URL: db.url, ...env },
      stdio: ["ignore", "pipe", "pipe"],
    })
    let stdout = ""
    let stderr = ""
    child.stdout.setEncoding("utf8").on("data", (chunk: string) => {
      stdout += chunk
    })
    child.stderr.setEncoding("utf8").on("data", (chunk: string) => {
      stderr += chunk
    })
    child.on("error", reject)
    child.on("close", (code) => resolve({ code, stdout, stderr }))
  })

let db: TestDatabase
let store: PostgresEventStore
let tmp: string
const sandbox = syntheticLedger({ tenant: "acme", environment: "sandbox", seed: 11, operation_count: 400 })
const production = syntheticLedger({
  tenant: "acme",
  environment: "production",
  seed: 12,
  operation_count: 200,
})

beforeAll(async () => {
  db = await freshDatabase()
  store = makePostgresEventStore(db.pool)
  tmp = fs.mkdtempSync(path.join(os.tmpdir(), "ledger-cli-"))
  for (const ledger of [sandbox, production]) {
    for (let from = 0; from < ledger.events.length; from += 50) {
      await Effect.runPromise(store.append(ledger.stream_id, "any", ledger.events.slice(from, from + 50)))
    }
  }
  // A stream that is not a ledger: verify checks its chain, the projection ignores it.
  await Effect.runPromise(
    store.append("tenant-acme", "no_stream", [
      {
        event_id: uuidv7(),
        event_type: "TenantRegistered",
        schema_version: 1,
        data: { company_name: 'Acme, "Widgets"\nand more', plan: "professional" },
        metadata: {
          tenant: "acme",
          environment: "sandbox",
          actor: "test",
          correlation_id: uuidv7(),
          causation_id: null,
          idempotency_key: null,
        },
      },
    ]),
  )
  const runner = startProjection(db.pool, store, { batch_size: 200 })
  for (const ledger of [sandbox, production]) await waitForStreamHead(db.pool, ledger.stream_id, 30_000)
  await runner.stop()
})

afterAll(async () => {
  await Effect.runPromise(store.close)
  await db.drop()
  fs.rmSync(tmp, { recursive: true, force: true })
})

const allEvents = async (): Promise<ReadonlyArray<RecordedEvent>> => Effect.runPromise(store.readAll({}))

/** An event as the export writes it, for comparison. */
const exported = (e: RecordedEvent) => ({
  global_position: e.global_position.toString(),
  stream_id: e.stream_id,
  stream_version: e.stream_version,
  event_id: e.event_id,
  event_type: e.event_type,
  schema_version: e.schema_version,
  recorded_at: e.recorded_at,
  hash: e.hash,
  prev_hash: e.prev_hash,
  data: e.data,
  metadata: e.metadata,
})

/** RFC 4180 rows: quoted fields may hold commas, doubled quotes and line breaks. */
const parseCsv = (text: string): string[][] => {
  const rows: string[][] = []
  let row: string[] = []
  let field = ""
  let quoted = false
  for (let i = 0; i < text.length; i += 1) {
    const c = text[i]
    if (quoted) {
      if (c === '"' && text[i + 1] === '"') {
        field += '"'
        i += 1
      } else if (c === '"') quoted = false
      else field += c
    } else if (c === '"') quoted = true
    else if (c === ",") {
      row.push(field)
      field = ""
    } else if (c === "\r" && text[i + 1] === "\n") {
      row.push(field)
      rows.push(row)
      row = []
      field = ""
      i += 1
    } else field += c
  }
  return rows
}

describe("ledger CLI", () => {
  it("prints help and exits 0", async () => {
    const result = await runCli(["--help"])
    expect(result.code).toBe(0)
    expect(result.stdout).toMatch(/Usage: npm run -s ledger -- <command>/)
    expect(result.stdout).toMatch(/verify/)
  })

  it.each([
    { args: [], message: /no command given: verify, replay or export/ },
    { args: ["frobnicate"], message: /unknown command "frobnicate"/ },
    { args: ["export", "--format", "xml"], message: /--format must be ndjson or csv/ },
    {
      args: ["export", "--stream", "a", "--ledger", "acme:sandbox"],
      message: /--stream or --ledger, not both/,
    },
    { args: ["export", "--ledger", "acme"], message: /<tenant id>:sandbox or <tenant id>:production/ },
    { args: ["export", "--ledger", "acme:prod"], message: /<tenant id>:sandbox or <tenant id>:production/ },
    { args: ["export", "--from", "yesterday"], message: /--from must be an RFC 3339 time/ },
    { args: ["export", "--from", "2026-11-31T00:00:00Z"], message: /--from must be an RFC 3339 time/ },
    { args: ["export", "--to", "2026-11-24T06:07:03"], message: /--to must be an RFC 3339 time/ },
    {
      args: ["export", "--from", "2025-02-01T00:00:00Z", "--to", "2025-01-01T00:00:00Z"],
      message: /--from must be before --to/,
    },
    { args: ["verify", "--fast"], message: /Unknown option '--fast'/ },
    { args: ["replay", "--batch-size", "0"], message: /--batch-size must be an integer/ },
    { args: ["export", "--output", ""], message: /--output must name a file/ },
    {
      args: ["export", "--ledger", "acme:sandbox", "--ledger", "acme:production"],
      message: /--ledger is given more than once/,
    },
    { args: ["export", "--format", "csv", "--format=ndjson"], message: /--format is given more than once/ },
    {
      args: ["replay", "--batch-size", "5", "--batch-size", "6"],
      message: /--batch-size is given more than once/,
    },
  ])("rejects $args with exit code 2", async ({ args, message }) => {
    const result = await runCli(args)
    expect(result.code).toBe(2)
    expect(result.stderr).toMatch(message)
  })

  it.each(["notaurl", "mysql://a@b/c", "postgres://"])(
    "rejects DATABASE_URL=%s as configuration with exit code 2, before connecting",
    async (url) => {
      const result = await runCli(["verify"], { DATABASE_URL: url })
      expect(result.code).toBe(2)
      expect(result.stderr).toMatch(/DATABASE_URL must be a PostgreSQL URL/)
    },
  )

  it("refuses with exit 1 a DATA_DIR or a database where the platform never ran, creating nothing", async () => {
    const missing = path.join(tmp, "no-such-data-dir")
    for (const command of ["verify", "export", "replay"]) {
      const result = await runCli([command], { DATABASE_URL: "", DATA_DIR: missing })
      expect(result.code).toBe(1)
      expect(result.stdout).toBe("")
      expect(result.stderr).toContain(`no platform database in DATA_DIR ${missing}`)
      expect(fs.existsSync(missing)).toBe(false)
    }
    // A pg directory without a server's data in it says just that.
    const bare = path.join(tmp, "bare-data-dir")
    fs.mkdirSync(path.join(bare, "pg"), { recursive: true })
    const bare_result = await runCli(["verify"], { DATABASE_URL: "", DATA_DIR: bare })
    expect(bare_result.code).toBe(1)
    expect(bare_result.stderr).toContain(`no PostgreSQL data directory at ${bare}/pg`)
    const empty = await freshDatabase({ migrate: false })
    try {
      const result = await runCli(["verify"], { DATABASE_URL: empty.url })
      expect(result.code).toBe(1)
      expect(result.stderr).toMatch(/holds no event store: the platform never ran on it/)
      // Nothing was migrated into it either.
      const tables = await empty.pool.query(
        "select count(*)::int as n from pg_tables where schemaname = 'public'",
      )
      expect(tables.rows[0]?.n).toBe(0)
    } finally {
      await empty.drop()
    }
  })

  it("gives up with exit 1 on a server that takes the connection but never answers", async () => {
    const silent = net.createServer(() => {})
    await new Promise<void>((resolve) => silent.listen(0, "127.0.0.1", resolve))
    const { port } = silent.address() as net.AddressInfo
    try {
      const started = Date.now()
      const result = await runCli(["verify"], { DATABASE_URL: `postgres://u:p@127.0.0.1:${port}/db` })
      expect(result.code).toBe(1)
      expect(result.stderr).toMatch(/^ledger: .*timeout/i)
      expect(Date.now() - started).toBeLessThan(60_000)
    } finally {
      silent.close()
    }
  }, 90_000)

  it("gives up on the embedded server's database check when the server takes the connection but never answers (DATA_DIR)", async () => {
    // The embedded path asks the server for its database before any pool exists: a frozen server
    // held the tools there without end.
    const silent = net.createServer(() => {})
    await new Promise<void>((resolve) => silent.listen(0, "127.0.0.1", resolve))
    const { port } = silent.address() as net.AddressInfo
    try {
      await expect(
        ensureDatabase(`postgres://u:p@127.0.0.1:${port}/postgres`, "platform", {
          create: false,
          connect_timeout_ms: 300,
        }),
      ).rejects.toThrow(/timeout/i)
    } finally {
      silent.close()
    }
  })

  it("verify passes when a stream is created while it runs (its head read after the events)", async () => {
    const own = await freshDatabase()
    const ownStore = makePostgresEventStore(own.pool)
    await Effect.runPromise(ownStore.append("probe-old", "no_stream", newEvents("old-1", 1)))
    const held = await own.pool.connect()
    try {
      await held.query("begin")
      await Effect.runPromise(
        ownStore.appendWithClient(held, "probe-new", "no_stream", newEvents("new-1", 1)),
      )
      // An event committed above it: the log's settled end is past the held one.
      await Effect.runPromise(ownStore.append("probe-old", 1, newEvents("old-2", 1)))
      // verify reads the heads (no probe-new yet), then waits for the held transaction.
      const verifying = runCli(["verify"], { DATABASE_URL: own.url })
      await waitingForSettledEnd(own, 1)
      await held.query("commit")
      const verified = await verifying
      expect(verified.stderr).toBe("")
      expect(verified.stdout).toContain("verify: OK: 3 events in 2 streams")
      expect(verified.code).toBe(0)
      // Events whose stream has no head, at the start or the end, are still found.
      await own.pool.query("delete from streams where stream_id = 'probe-new'")
      const headless = await runCli(["verify"], { DATABASE_URL: own.url })
      expect(headless.code).toBe(1)
      expect(headless.stdout).toContain("the stream has events but no head")
    } finally {
      held.release()
      await Effect.runPromise(ownStore.close)
      await own.drop()
    }
  }, 60_000)

  it("verify and export wait for an event that commits late below events already committed, and leave nothing out", async () => {
    // A transaction holds probe-late v2 at a position below probe-other v1, which commits first:
    // a reader paging by position passed v2 before it committed (verify then saw v3 follow v1, an
    // export had a hole). Both now read up to the log's settled end once that transaction ended.
    // A database of its own: the file's other tests count the shared one's events.
    const own = await freshDatabase()
    const ownStore = makePostgresEventStore(own.pool)
    const env = { DATABASE_URL: own.url }
    await Effect.runPromise(ownStore.append("probe-late", "no_stream", newEvents("late-1", 1)))
    const held = await own.pool.connect()
    try {
      await held.query("begin")
      const v2 = await Effect.runPromise(
        ownStore.appendWithClient(held, "probe-late", 1, newEvents("late-2", 1)),
      )
      const other = await Effect.runPromise(
        ownStore.append("probe-other", "no_stream", newEvents("other-1", 1)),
      )
      expect(other.last_position).toBeGreaterThan(v2.last_position)
      const exported = path.join(tmp, "late.ndjson")
      const verifying = runCli(["verify"], env)
      const exporting = runCli(["export", "--output", exported], env)
      // Both read the log's end and now wait for the held transaction (however long their start
      // took on a busy host).
      await waitingForSettledEnd(own, 2)
      await held.query("commit")
      await Effect.runPromise(ownStore.append("probe-late", 2, newEvents("late-3", 1)))
      const [verified, export_result] = await Promise.all([verifying, exporting])

      const settled = await own.pool.query<{ n: number }>(
        "select count(*)::int as n from events where global_position <= $1",
        [other.last_position.toString()],
      )
      const count = settled.rows[0]?.n ?? 0
      expect(verified.code).toBe(0)
      expect(verified.stdout).toContain(`verify: OK: ${count} events`)
      expect(export_result.code).toBe(0)
      const lines = fs.readFileSync(exported, "utf8").trimEnd().split("\n")
      expect(lines).toHaveLength(count)
      const late = lines
        .map((line) => JSON.parse(line) as { stream_id: string; stream_version: number })
        .filter((e) => e.stream_id === "probe-late")
      expect(late.map((e) => e.stream_version)).toEqual([1, 2])
    } finally {
      held.release()
      await Effect.runPromise(ownStore.close)
      await own.drop()
    }
  }, 60_000)

  it("exports to standard output with --output -", async () => {
    const result = await runCli(["export", "--ledger", "acme:sandbox", "--output", "-"])
    expect(result.code).toBe(0)
    expect(result.stdout.trimEnd().split("\n")).toHaveLength(sandbox.events.length)
    expect(fs.existsSync(path.join(process.cwd(), "-"))).toBe(false)
  })

  it("verify passes on an intact store", async () => {
    const result = await runCli(["verify"])
    expect(result.stderr).toBe("")
    expect(result.code).toBe(0)
    const count = sandbox.events.length + production.events.length + 1
    expect(result.stdout).toMatch(
      new RegExp(`verify: OK: ${count} events in 3 streams \\(2 ledgers, 32 accounts\\)`),
    )
  })

  it("replay rebuilds from zero with progress and leaves identical tables", async () => {
    await db.pool.query("create schema before_replay")
    await db.pool.query(projectionTablesSql("before_replay"))
    for (const table of [
      "ledger_accounts",
      "ledger_transfers",
      "projection_checkpoints",
      "projection_streams",
    ]) {
      await db.pool.query(`insert into before_replay.${table} select * from ${live_schema}.${table}`)
    }
    const result = await runCli(["replay", "--batch-size", "100"])
    expect(result.code).toBe(0)
    expect(result.stderr).toMatch(/\[#+ *\] +\d+\.\d% {2}[\d,]+\/[\d,]+ events {2}[\d,]+ events\/s/)
    expect(result.stderr).toMatch(/100\.0%/)
    const count = sandbox.events.length + production.events.length + 1
    expect(result.stdout).toMatch(
      new RegExp(`^replayed ${count} events in [\\d.]+ s \\(\\d+ events/s\\)\\n$`),
    )
    expect(await compareSchemas(db.pool, "before_replay", live_schema)).toEqual([])
    // Events appended while it runs are replayed too: the count never passes its total.
    expect(
      progressLine({ phase: "build", event_count: 120, event_count_total: 100, elapsed_ms: 1_000 }),
    ).toBe(`[${"#".repeat(30)}] 100.0%  120/120 events  120 events/s`)
  })

  it("exports a ledger as NDJSON that round-trips, hashes included", async () => {
    const result = await runCli(["export", "--ledger", "acme:sandbox"])
    expect(result.code).toBe(0)
    const lines = result.stdout.trimEnd().split("\n")
    const expected = (await Effect.runPromise(store.readStream(sandbox.stream_id))).map(exported)
    expect(lines.map((line) => JSON.parse(line))).toEqual(expected)
    for (const record of expected) expect(eventHash(record.prev_hash, record)).toBe(record.hash)
  })

  it("refuses to export a ledger or stream that does not exist: exit 1 and why, not an empty file", async () => {
    for (const args of [
      ["export", "--ledger", "nobody:sandbox"],
      ["export", "--stream", "ledger-acme-staging"],
    ]) {
      const result = await runCli(args)
      expect({ args, code: result.code, stdout: result.stdout }).toEqual({ args, code: 1, stdout: "" })
      expect(result.stderr).toMatch(/no stream "ledger-(nobody-sandbox|acme-staging)"/)
    }
  })

  it("stops quietly with exit 0 when its reader goes away (export | head)", async () => {
    const result = await new Promise<CliResult>((resolve, reject) => {
      const child = spawn(process.execPath, [cli, "export"], {
        env: { ...process.env, DATABASE_URL: db.url },
        stdio: ["ignore", "pipe", "pipe"],
      })
      let stdout = ""
      let stderr = ""
      // Like head -1: read the first line, then close the pipe.
      child.stdout.setEncoding("utf8").on("data", (chunk: string) => {
        stdout += chunk
        if (stdout.includes("\n")) child.stdout.destroy()
      })
      child.stderr.setEncoding("utf8").on("data", (chunk: string) => {
        stderr += chunk
      })
      child.on("error", reject)
      child.on("close", (code) => resolve({ code, stdout, stderr }))
    })
    expect(result.stderr).toBe("")
    expect(result.code).toBe(0)
  })

  it("exports every stream as CSV to a file, quoting what needs it", async () => {
    const file = path.join(tmp, "events.csv")
    const result = await runCli(["export", "--format", "csv", "--output", file])
    expect(result.code).toBe(0)
    expect(result.stdout).toBe("")
    const [header, ...rows] = parseCsv(fs.readFileSync(file, "utf8"))
    expect(header).toEqual([...export_columns])
    const records = rows.map((row) => {
      const value = (column: (typeof export_columns)[number]) => row[export_columns.indexOf(column)] ?? ""
      return {
        global_position: value("global_position"),
        stream_id: value("stream_id"),
        stream_version: Number(value("stream_version")),
        event_id: value("event_id"),
        event_type: value("event_type"),
        schema_version: Number(value("schema_version")),
        recorded_at: value("recorded_at"),
        hash: value("hash"),
        prev_hash: value("prev_hash"),
        data: JSON.parse(value("data")) as unknown,
        metadata: JSON.parse(value("metadata")) as unknown,
      }
    })
    expect(records).toEqual((await allEvents()).map(exported))
    expect(records.find((r) => r.stream_id === "tenant-acme")?.data).toMatchObject({
      company_name: 'Acme, "Widgets"\nand more',
    })
  })

  it("exports only the events recorded in a time window", async () => {
    const events = await allEvents()
    const from = events[Math.floor(events.length / 3)]?.recorded_at ?? ""
    const to = events[Math.floor((2 * events.length) / 3)]?.recorded_at ?? ""
    const result = await runCli(["export", "--from", from, "--to", to])
    expect(result.code).toBe(0)
    const inWindow = events.filter((e) => e.recorded_at >= from && e.recorded_at < to).map(exported)
    expect(inWindow.length).toBeGreaterThan(0)
    expect(
      result.stdout
        .trimEnd()
        .split("\n")
        .map((line) => JSON.parse(line)),
    ).toEqual(inWindow)

    // A bound between two milliseconds is exact: just after `from` leaves its events out, just
    // after `to` takes its events in.
    const justAfter = (time: string) => time.replace("Z", "1Z")
    const shifted = await runCli(["export", "--from", justAfter(from), "--to", justAfter(to)])
    expect(shifted.code).toBe(0)
    expect(
      shifted.stdout
        .trimEnd()
        .split("\n")
        .map((line) => JSON.parse(line)),
    ).toEqual(events.filter((e) => e.recorded_at > from && e.recorded_at <= to).map(exported))
    // Two bounds within one millisecond, in order: nothing lies between them (as the API answers).
    const within = await runCli(["export", "--from", justAfter(from), "--to", from.replace("Z", "9Z")])
    expect(within).toMatchObject({ code: 0, stdout: "" })
  })

  it("verify exits 1 when events were deleted from a stream's end, or a whole stream's, the chain left intact", async () => {
    const events = await Effect.runPromise(store.readStream(sandbox.stream_id))
    const last = events.at(-1)
    if (last === undefined) throw new Error("no sandbox events")
    const others = (await allEvents()).filter(
      (e) => e.stream_id !== sandbox.stream_id && e.stream_id !== production.stream_id,
    )
    const lone = others[0]
    if (lone === undefined) throw new Error("no third stream")
    // Deleted and put back on one connection: the CLI, another process, sees the deletion committed.
    const client = await db.pool.connect()
    const deleteAndVerify = async (where: string, values: ReadonlyArray<unknown>) => {
      await client.query("alter table events disable trigger events_append_only")
      await client.query(`create temp table saved as select * from events where ${where}`, [...values])
      await client.query(`delete from events where ${where}`, [...values])
      try {
        return await runCli(["verify"])
      } finally {
        await client.query("insert into events overriding system value select * from saved")
        await client.query("drop table saved")
        await client.query("alter table events enable trigger events_append_only")
      }
    }
    try {
      const truncated = await deleteAndVerify("stream_id = $1 and stream_version >= $2", [
        sandbox.stream_id,
        last.stream_version - 1,
      ])
      expect(truncated.code).toBe(1)
      expect(truncated.stdout).toMatch(/verify: FAILED: 1 problem/)
      expect(truncated.stdout).toContain(`stream ${sandbox.stream_id}, version ${last.stream_version - 2}`)
      expect(truncated.stdout).toMatch(
        new RegExp(
          `head is version ${last.stream_version}, but its last event is version ${last.stream_version - 2}: the events after it were deleted`,
        ),
      )
      const emptied = await deleteAndVerify("stream_id = $1", [lone.stream_id])
      expect(emptied.code).toBe(1)
      expect(emptied.stdout).toContain(`stream ${lone.stream_id}`)
      expect(emptied.stdout).toMatch(/the stream has no events: they were deleted/)
    } finally {
      client.release()
    }
    // Put back, the store verifies again.
    expect((await runCli(["verify"])).code).toBe(0)
  })

  it("verify exits 1 for an event that is no ledger event in a ledger's stream", async () => {
    const own = await freshDatabase()
    const ownStore = makePostgresEventStore(own.pool)
    try {
      // Hash-chained like any append: only its type is out of place.
      await Effect.runPromise(ownStore.append("ledger-intruded-sandbox", "no_stream", newEvents("odd", 1)))
      const result = await runCli(["verify"], { DATABASE_URL: own.url })
      expect(result.code).toBe(1)
      expect(result.stdout).toMatch(/is not a ledger event, in a ledger's stream/)
    } finally {
      await Effect.runPromise(ownStore.close)
      await own.drop()
    }
  })

  it("verify exits 1 and names the one event whose data was tampered with", async () => {
    const victim = (await Effect.runPromise(store.readStream(production.stream_id))).find(
      (e) => e.event_type === "TransferCreated" && e.stream_version > 40,
    )
    if (victim === undefined) throw new Error("no transfer to tamper with")
    await db.pool.query("alter table events disable trigger events_append_only")
    await db.pool.query(
      `update events set data = jsonb_set(data, '{amount}', to_jsonb((((data->>'amount')::numeric) + 1)::text))
        where global_position = $1`,
      [victim.global_position.toString()],
    )
    await db.pool.query("alter table events enable trigger events_append_only")
    const result = await runCli(["verify"])
    expect(result.code).toBe(1)
    expect(result.stdout).toMatch(/verify: FAILED/)
    const first = result.stdout.split("\n").find((line) => line.startsWith("first bad event:")) ?? ""
    expect(first).toContain(`global position ${victim.global_position}`)
    expect(first).toContain(`stream ${production.stream_id}`)
    expect(first).toContain(`version ${victim.stream_version}`)
    expect(first).toContain(`event ${victim.event_id}`)
    expect(first).toMatch(/was altered/)
  })
})
