/**
 * What the benchmarks share: starting the platform (`src/main.ts`) as a child process on its
 * embedded PostgreSQL, stopping it, calling its HTTP API, running the auditor's `verify`, and the
 * small numeric helpers their reports use. Progress goes to stderr; a benchmark's last stdout line
 * is its JSON summary.
 */
import { type ChildProcess, execFileSync, spawn, spawnSync } from "node:child_process"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { freePort } from "../src/db/embedded.ts"

export const root = path.join(import.meta.dirname, "..")
export const log = (line: string) => process.stderr.write(`${line}\n`)
export const round = (value: number, digits = 1): number => Math.round(value * 10 ** digits) / 10 ** digits
export const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms))

/** The value at `p` percent of an ascending array (nearest rank below). */
export const percentile = (sorted: ArrayLike<number>, p: number): number =>
  sorted.length === 0 ? 0 : (sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))] ?? 0)

// --- the platform under test --------------------------------------------------------------------

export interface Server {
  readonly child: ChildProcess
  readonly url: string
  readonly output: () => string
  /** Server log lines at warn level or above (JSON lines on stdout). */
  readonly warnings: () => ReadonlyArray<string>
}

export interface ServerOptions {
  readonly dataDir: string
  /** Variables added to this process's environment (DATABASE_URL is always removed). */
  readonly env?: Readonly<Record<string, string>>
  /** Flags for the server's node (before the script), e.g. V8 heap settings. */
  readonly nodeFlags?: ReadonlyArray<string>
  /** Run under `node --cpu-prof`, writing the profile here. */
  readonly profileDir?: string | undefined
}

export const startServer = async (options: ServerOptions): Promise<Server> => {
  const port = await freePort()
  const env: NodeJS.ProcessEnv = {
    ...process.env,
    DATA_DIR: options.dataDir,
    PORT: String(port),
    LOG_LEVEL: "warn",
    ...options.env,
  }
  delete env.DATABASE_URL
  const flags = [
    ...(options.nodeFlags ?? []),
    ...(options.profileDir === undefined ? [] : ["--cpu-prof", `--cpu-prof-dir=${options.profileDir}`]),
  ]
  const child = spawn(process.execPath, [...flags, path.join(root, "src/main.ts")], {
    env,
    stdio: ["ignore", "pipe", "pipe"],
  })
  let output = ""
  const warnings: string[] = []
  // BENCH_SERVER_LOG=<file>: every line the server writes (with BENCH_NODE_FLAGS=--trace-gc, its pauses).
  const server_log = process.env.BENCH_SERVER_LOG
  const keep = (chunk: Buffer) => {
    const text = chunk.toString()
    if (server_log !== undefined && server_log !== "") fs.appendFileSync(server_log, text)
    output = (output + text).slice(-65_536)
    for (const line of text.split("\n")) if (/"level":"(WARN|ERROR|FATAL)"/i.test(line)) warnings.push(line)
  }
  child.stdout?.on("data", keep)
  child.stderr?.on("data", keep)
  const url = `http://127.0.0.1:${port}`
  // The first start runs initdb: allow it a while.
  const deadline = Date.now() + 180_000
  for (;;) {
    if (child.exitCode !== null) throw new Error(`platform exited ${child.exitCode}: ${output}`)
    const healthy = await fetch(`${url}/health`).then(
      (r) => r.ok,
      () => false,
    )
    if (healthy) break
    if (Date.now() > deadline) {
      child.kill("SIGKILL")
      throw new Error(`platform did not become healthy: ${output}`)
    }
    await sleep(100)
  }
  return { child, url, output: () => output, warnings: () => warnings }
}

export const stopServer = async (server: Server): Promise<number | null> => {
  const { child } = server
  if (child.exitCode !== null) return child.exitCode
  const exited = new Promise<number | null>((resolve) => child.once("exit", (code) => resolve(code)))
  child.kill("SIGTERM")
  let timer: NodeJS.Timeout | undefined
  const timeout = new Promise<"timeout">((resolve) => {
    timer = setTimeout(() => resolve("timeout"), 60_000)
  })
  const outcome = await Promise.race([exited, timeout])
  clearTimeout(timer)
  if (outcome === "timeout") {
    log("server did not exit within 60 s of SIGTERM: killing it")
    child.kill("SIGKILL")
    return exited
  }
  return outcome
}

// --- the HTTP API -------------------------------------------------------------------------------

export interface Credentials {
  readonly tenant_id: string
  readonly api_key: string
}

/** One API call; a non-2xx answer throws with its body. */
export const call = async <T>(
  base: string,
  method: string,
  route: string,
  body: unknown,
  credentials?: Credentials,
): Promise<T> => {
  const response = await fetch(`${base}${route}`, {
    method,
    headers: {
      "content-type": "application/json",
      ...(credentials === undefined
        ? {}
        : { authorization: `Bearer ${credentials.api_key}`, "x-tenant-id": credentials.tenant_id }),
    },
    ...(method === "GET" ? {} : { body: JSON.stringify(body) }),
  })
  const text = await response.text()
  if (!response.ok) throw new Error(`${method} ${route}: ${response.status} ${text}`)
  return JSON.parse(text) as T
}

// --- tools from Debian's packages ----------------------------------------------------------------

/**
 * The path of `command`; when it is missing and we may (root), Debian's `debianPackage` is installed
 * first. Undefined when it cannot be had.
 * @example findOrInstall("pgbench", "postgresql-client")
 */
export const findOrInstall = (command: string, debianPackage: string): string | undefined => {
  const which = () => spawnSync("sh", ["-c", `command -v ${command}`], { encoding: "utf8" })
  const found = which()
  if (found.status === 0) return found.stdout.trim()
  if (process.getuid?.() !== 0) return undefined
  log(`${command} not found: installing Debian's ${debianPackage}`)
  spawnSync("sh", ["-c", `apt-get update -qq && apt-get install -y -qq ${debianPackage}`], {
    stdio: "inherit",
  })
  const again = which()
  return again.status === 0 ? again.stdout.trim() : undefined
}

// --- the auditor --------------------------------------------------------------------------------

/** Runs `ledger verify` over the stopped platform's DATA_DIR. */
export const runVerify = (dataDir: string): { ok: boolean; output: string } => {
  const env: NodeJS.ProcessEnv = { ...process.env, DATA_DIR: dataDir, LOG_LEVEL: "warn" }
  delete env.DATABASE_URL
  const run = spawnSync(
    "sh",
    [path.join(root, "scripts/node.sh"), path.join(root, "src/cli/main.ts"), "verify"],
    {
      env,
      encoding: "utf8",
      timeout: 600_000,
    },
  )
  return { ok: run.status === 0, output: `${run.stdout ?? ""}${run.stderr ?? ""}`.trim() }
}

// --- where the CPU went ---------------------------------------------------------------------------

export const clockTicks = (() => {
  try {
    return Number(execFileSync("getconf", ["CLK_TCK"], { encoding: "utf8" }).trim()) || 100
  } catch {
    return 100
  }
})()

/** Fields of /proc/<pid>/stat after the command name: [state, ppid, ...]; undefined if gone. */
const procStat = (pid: number): string[] | undefined => {
  try {
    const text = fs.readFileSync(`/proc/${pid}/stat`, "utf8")
    return text.slice(text.lastIndexOf(")") + 2).split(" ")
  } catch {
    return undefined
  }
}

/**
 * The embedded PostgreSQL of `dataDir` (its lock file names the postmaster) and the postmaster's
 * live children (backends and auxiliary processes); undefined when it is not running.
 */
export const postgresProcesses = (
  dataDir: string,
): { readonly postmaster: number; readonly children: ReadonlyArray<number> } | undefined => {
  let postmaster: number
  try {
    postmaster = Number(fs.readFileSync(path.join(dataDir, "pg", "postmaster.pid"), "utf8").split("\n")[0])
  } catch {
    return undefined
  }
  const children: Array<number> = []
  for (const entry of fs.readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue
    // After "(comm) ": index 1 is the parent's pid.
    if (Number(procStat(Number(entry))?.[1]) === postmaster) children.push(Number(entry))
  }
  return { postmaster, children }
}

/** CPU seconds of a process (utime + stime; with its waited-for children's when `children`). */
export const cpuSeconds = (pid: number, children = false): number => {
  const f = procStat(pid)
  if (f === undefined) return 0
  // After "(comm) ": index 11 utime, 12 stime, 13 cutime, 14 cstime.
  const own = Number(f[11]) + Number(f[12])
  return (children ? own + Number(f[13]) + Number(f[14]) : own) / clockTicks
}

// --- running one ----------------------------------------------------------------------------------

/**
 * Runs `benchmark` in a fresh temporary DATA_DIR; afterwards undoes what it deferred (last first, a
 * failing step logged, not thrown) and removes the directory unless `keep_data`.
 */
export const runBenchmark = async (
  prefix: string,
  keep_data: boolean,
  benchmark: (dataDir: string, defer: (undo: () => unknown) => void) => Promise<void>,
): Promise<void> => {
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), prefix))
  const undo: Array<() => unknown> = []
  try {
    await benchmark(dataDir, (step) => undo.push(step))
  } finally {
    for (const step of undo.reverse()) {
      try {
        await step()
      } catch (error) {
        log(`cleanup: ${error instanceof Error ? error.message : String(error)}`)
      }
    }
    if (keep_data) log(`kept ${dataDir}`)
    else fs.rmSync(dataDir, { recursive: true, force: true })
  }
}
