// Proves the README's start command (`npm start`): the platform starts on its embedded defaults
// (PostgreSQL in DATA_DIR), answers its health check, stops cleanly on a SIGTERM sent to npm (the
// embedded server too), and a restart keeps all data.
import { type ChildProcess, execFileSync, spawn } from "node:child_process"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { Effect, Result } from "effect"
import pg from "pg"
import { afterAll, describe, expect, it } from "vitest"
import { makePostgresEventStore } from "../../adapters/eventstore/postgres/event-store.ts"
import { ledgerStreamId } from "../../domain/ledger/index.ts"
import { freePort } from "../../src/db/embedded.ts"
import { makeLedgerWriter } from "../../src/ledger/writer.ts"
import { openAccount } from "../support/ledger-fixtures.ts"

const root = path.join(import.meta.dirname, "../..")
const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), "platform-e2e-"))
afterAll(() => fs.rmSync(dataDir, { recursive: true, force: true }))

const startPlatform = async (port: number, extra: NodeJS.ProcessEnv = {}): Promise<ChildProcess> => {
  const env: NodeJS.ProcessEnv = {
    ...process.env,
    DATA_DIR: dataDir,
    PORT: String(port),
    LOG_LEVEL: "info",
    ...extra,
  }
  delete env.DATABASE_URL
  // Exactly the README's command, so that a SIGTERM goes to npm as a process manager's would.
  const child = spawn("npm", ["start", "--silent"], { cwd: root, env, stdio: ["ignore", "pipe", "pipe"] })
  let output = ""
  child.stdout?.on("data", (chunk) => (output += chunk))
  child.stderr?.on("data", (chunk) => (output += chunk))
  outputs.set(child, () => output)
  const deadline = Date.now() + 60_000
  while (Date.now() < deadline) {
    if (child.exitCode !== null) throw new Error(`platform exited ${child.exitCode}: ${output}`)
    const healthy = await fetch(`http://127.0.0.1:${port}/health`)
      .then((r) => r.ok)
      .catch(() => false)
    if (healthy) return child
    await new Promise((r) => setTimeout(r, 200))
  }
  child.kill("SIGKILL")
  throw new Error(`platform did not become healthy: ${output}`)
}

const outputs = new Map<ChildProcess, () => string>()

/** Sends SIGTERM and returns the exit code; prints the platform's output if it was not 0. */
const stopPlatform = (child: ChildProcess): Promise<number | null> =>
  new Promise((resolve) => {
    child.on("exit", (code) => {
      if (code !== 0) process.stderr.write(outputs.get(child)?.() ?? "")
      resolve(code)
    })
    child.kill("SIGTERM")
  })

/**
 * The embedded server's connection string, from PostgreSQL's own lock file in DATA_DIR: through its
 * socket there, the only way in.
 */
const embeddedUrl = (): string => {
  const lines = fs.readFileSync(path.join(dataDir, "pg", "postmaster.pid"), "utf8").split("\n")
  return `postgres://postgres:postgres@${encodeURIComponent(path.join(dataDir, "pg"))}:${lines[3]}/platform`
}

const isAlive = (pid: number) => {
  try {
    process.kill(pid, 0)
    return true
  } catch {
    return false
  }
}

describe("npm start", () => {
  it("starts on embedded defaults, serves health and OpenAPI, stops cleanly and keeps data across restarts", async () => {
    const port = await freePort()
    const first = await startPlatform(port)
    expect(await fetch(`http://127.0.0.1:${port}/api/health`).then((r) => r.json())).toEqual({
      status: "healthy",
    })
    const openapi = (await fetch(`http://127.0.0.1:${port}/openapi.json`).then((r) => r.json())) as {
      paths: object
    }
    expect(Object.keys(openapi.paths)).toContain("/health")
    // Numbers are finite: no schema offers "Infinity" or "NaN" as a string stand-in.
    expect(JSON.stringify(openapi)).not.toMatch(/"(-?Infinity|NaN)"/)

    // Write to the ledger through the running platform's database.
    const postmasterPid = Number(
      fs.readFileSync(path.join(dataDir, "pg", "postmaster.pid"), "utf8").split("\n")[0],
    )
    const pool = new pg.Pool({ connectionString: embeddedUrl() })
    const ledger = { tenant: "e2e", environment: "sandbox" }
    const opened = await Effect.runPromise(
      Effect.result(
        makeLedgerWriter(makePostgresEventStore(pool)).execute(
          ledger,
          openAccount("kept", "wallet", Date.now()),
          { actor: "t", correlation_id: "c" },
        ),
      ),
    )
    expect(Result.isSuccess(opened)).toBe(true)
    await pool.end()

    expect(await stopPlatform(first)).toBe(0)
    expect(isAlive(postmasterPid)).toBe(false)

    const second = await startPlatform(port)
    const again = new pg.Pool({ connectionString: embeddedUrl() })
    const events = await Effect.runPromise(makePostgresEventStore(again).readStream(ledgerStreamId(ledger)))
    expect(events.map((e) => e.event_type)).toEqual(["AccountOpened"])
    await again.end()
    expect(await stopPlatform(second)).toBe(0)
  }, 180_000)

  it("starts its embedded server again when it dies under it, and stops cleanly after", async () => {
    const port = await freePort()
    const child = await startPlatform(port)
    const base = `http://127.0.0.1:${port}`
    const postmaster = Number(
      fs.readFileSync(path.join(dataDir, "pg", "postmaster.pid"), "utf8").split("\n")[0],
    )
    process.kill(postmaster, "SIGKILL")
    const healthStatus = () =>
      fetch(`${base}/health`).then(
        (response) => response.status,
        () => 0, // a kept-alive connection the server closed meanwhile
      )
    let down = await healthStatus()
    for (let tries = 0; down !== 503 && tries < 50; tries++) {
      await new Promise((resolve) => setTimeout(resolve, 100))
      down = await healthStatus()
    }
    expect(down).toBe(503)
    // It ran on without a database for ever: every request 503 until someone restarted it. The
    // server is started again (once its old children are gone), and the pool reconnects.
    const deadline = Date.now() + 60_000
    while ((await healthStatus()) !== 200 && Date.now() < deadline) {
      await new Promise((resolve) => setTimeout(resolve, 200))
    }
    expect(await healthStatus()).toBe(200)
    expect(outputs.get(child)?.()).toContain(
      "the embedded PostgreSQL server stopped unexpectedly: starting it again",
    )
    const registered = await fetch(`${base}/api/tenant/register`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({
        email: `restarted-${Date.now()}@example.com`,
        password: "correct horse battery",
        company_name: "Restarted Co",
        plan: "basic",
      }),
    })
    expect(registered.status).toBe(201)
    const again = Number(fs.readFileSync(path.join(dataDir, "pg", "postmaster.pid"), "utf8").split("\n")[0])
    expect(again).not.toBe(postmaster)
    expect(await stopPlatform(child)).toBe(0)
    // The server it started again stopped with it.
    for (let tries = 0; isAlive(again) && tries < 100; tries++) {
      await new Promise((resolve) => setTimeout(resolve, 100))
    }
    expect(isAlive(again)).toBe(false)
  }, 120_000)

  it("answers health and every request 503 while its database does not answer, and serves again after", async () => {
    const port = await freePort()
    // Statements and connections give up on the database after 2 s (30 s by default).
    const child = await startPlatform(port, { DATABASE_QUERY_TIMEOUT_SECONDS: "2" })
    const base = `http://127.0.0.1:${port}`
    const health = async () => {
      const response = await fetch(`${base}/health`)
      return { status: response.status, body: (await response.json()) as Record<string, unknown> }
    }
    expect(await health()).toEqual({ status: 200, body: { status: "healthy" } })
    const registered = await fetch(`${base}/api/tenant/register`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({
        email: `frozen-${Date.now()}@example.com`,
        password: "correct horse battery",
        company_name: "Frozen Co",
        plan: "basic",
      }),
    })
    expect(registered.status).toBe(201)
    const { tenant_id, api_key } = (await registered.json()) as { tenant_id: string; api_key: string }
    const call = (method: string, route: string, body?: object) =>
      fetch(`${base}${route}`, {
        method,
        headers: {
          authorization: `Bearer ${api_key}`,
          "x-tenant-id": tenant_id,
          ...(body === undefined ? {} : { "content-type": "application/json" }),
        },
        ...(body === undefined ? {} : { body: JSON.stringify(body) }),
      })
    const wallet = { external_id: "frozen", label: "Frozen", chain: "ethereum" }
    expect((await call("POST", "/api/v1/wallets", wallet)).status).toBe(201)
    // Every process of the embedded server stopped: connections stay open, nothing answers.
    const postmaster = Number(
      fs.readFileSync(path.join(dataDir, "pg", "postmaster.pid"), "utf8").split("\n")[0],
    )
    const children = execFileSync("pgrep", ["-P", String(postmaster)], { encoding: "utf8" })
      .split("\n")
      .filter((line) => line !== "")
      .map(Number)
    const processes = [postmaster, ...children]
    for (const pid of processes) process.kill(pid, "SIGSTOP")
    try {
      const down = await health()
      expect(down.status).toBe(503)
      expect(down.body).toEqual({ status: "unhealthy", database: "no answer within 2000 ms" })
      // A read and a write that need it are answered too, a retryable 503, instead of held.
      for (const [method, route, body] of [
        ["GET", "/api/v1/wallets", undefined],
        ["POST", "/api/v1/wallets", { ...wallet, external_id: "frozen-2" }],
      ] as const) {
        const answer = await call(method, route, body)
        expect(answer.status, `${method} ${route}`).toBe(503)
        expect(answer.headers.get("retry-after")).toBe("1")
        expect(((await answer.json()) as { error: { code: string } }).error.code).toBe("database_unavailable")
      }
    } finally {
      for (const pid of processes) process.kill(pid, "SIGCONT")
    }
    let up = await health()
    for (let tries = 0; up.status !== 200 && tries < 300; tries++) {
      await new Promise((resolve) => setTimeout(resolve, 100))
      up = await health()
    }
    expect(up).toEqual({ status: 200, body: { status: "healthy" } })
    let listed = await call("GET", "/api/v1/wallets")
    for (let tries = 0; listed.status !== 200 && tries < 100; tries++) {
      await new Promise((resolve) => setTimeout(resolve, 100))
      listed = await call("GET", "/api/v1/wallets")
    }
    expect(listed.status).toBe(200)
    expect(await stopPlatform(child)).toBe(0)
  }, 180_000)
})
