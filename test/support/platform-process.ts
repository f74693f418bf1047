/**
 * Starts the real platform (`src/main.ts`) as a child process on a fresh database of the test
 * run's PostgreSQL server, and gives tests a small HTTP client for it. Everything goes over
 * loopback HTTP, as a tenant's integration would.
 */
import { type ChildProcess, spawn } from "node:child_process"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { freePort } from "../../src/db/embedded.ts"
import { freshDatabase, type TestDatabase } from "./db.ts"

const root = path.join(import.meta.dirname, "../..")

export interface RunningPlatform {
  readonly url: string
  readonly database: TestDatabase
  /** The process's DATA_DIR (custody KEK file, embedded data); removed by `stop`. */
  readonly dataDir: string
  /** Everything the process printed so far. */
  readonly output: () => string
  /** SIGKILL, as a crash: the database and DATA_DIR stay for a platform started on them after. */
  readonly kill: () => Promise<void>
  /** SIGSTOP and SIGCONT: the process (its sweepers among all else) stands still in between. */
  readonly pause: () => void
  readonly resume: () => void
  readonly stop: () => Promise<void>
}

export interface ApiResponse<T = unknown> {
  readonly status: number
  readonly headers: Headers
  readonly body: T
  /** The body as it came, before parsing (a replay must repeat it byte for byte). */
  readonly text: string
}

/**
 * Starts the platform; `env` adds or overrides variables (e.g. WEBHOOK_RETRY_BASE_MS). No local chain
 * runs unless `env` names some in SANDBOX_EVM_CHAINS or sets SANDBOX_SOLANA or SANDBOX_TON to "true": most tests
 * need none and pay for no anvil and no LiteSVM.
 */
export const startPlatform = async (
  env: Readonly<Record<string, string>> = {},
  options: {
    /** Another platform's database (it stays theirs to drop): a restart after a crash, say. */
    readonly database?: TestDatabase
  } = {},
): Promise<RunningPlatform> => {
  const database = options.database ?? (await freshDatabase())
  const port = await freePort()
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), "platform-api-"))
  const child: ChildProcess = spawn(process.execPath, [path.join(root, "src/main.ts")], {
    env: {
      ...process.env,
      DATABASE_URL: database.url,
      PORT: String(port),
      DATA_DIR: dataDir,
      LOG_LEVEL: "warn",
      SANDBOX_EVM_CHAINS: "",
      SANDBOX_SOLANA: "false",
      SANDBOX_TON: "false",
      ...env,
    },
    stdio: ["ignore", "pipe", "pipe"],
  })
  let output = ""
  child.stdout?.on("data", (chunk) => (output += chunk))
  child.stderr?.on("data", (chunk) => (output += chunk))
  const url = `http://127.0.0.1:${port}`
  const deadline = Date.now() + 60_000
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
    await new Promise((resolve) => setTimeout(resolve, 100))
  }
  return {
    url,
    database,
    dataDir,
    output: () => output,
    kill: () => exitOn(child, "SIGKILL"),
    pause: () => {
      child.kill("SIGSTOP")
    },
    resume: () => {
      child.kill("SIGCONT")
    },
    stop: async () => {
      await exitOn(child, "SIGTERM")
      if (options.database === undefined) await database.drop()
      fs.rmSync(dataDir, { recursive: true, force: true })
    },
  }
}

/** Sends `signal` to a running child and waits for its exit. */
const exitOn = async (child: ChildProcess, signal: NodeJS.Signals): Promise<void> => {
  if (child.exitCode !== null || child.signalCode !== null) return
  await new Promise<void>((resolve) => {
    child.once("exit", () => resolve())
    child.kill(signal)
  })
}

export interface Credentials {
  readonly tenant_id: string
  readonly api_key: string
}

/** A client for one platform; `as(credentials)` signs requests as a tenant. */
export const apiClient = (base: string, credentials?: Credentials) => {
  const request = async <T = unknown>(
    method: string,
    route: string,
    body?: unknown,
    headers: Readonly<Record<string, string>> = {},
  ): Promise<ApiResponse<T>> => {
    const response = await fetch(`${base}${route}`, {
      method,
      headers: {
        ...(body === undefined ? {} : { "content-type": "application/json" }),
        ...(credentials === undefined
          ? {}
          : { authorization: `Bearer ${credentials.api_key}`, "x-tenant-id": credentials.tenant_id }),
        ...headers,
      },
      ...(body === undefined ? {} : { body: typeof body === "string" ? body : JSON.stringify(body) }),
    })
    const text = await response.text()
    return {
      status: response.status,
      headers: response.headers,
      body: (text === "" ? null : JSON.parse(text)) as T,
      text,
    }
  }
  return {
    get: <T = unknown>(route: string, headers?: Record<string, string>) =>
      request<T>("GET", route, undefined, headers),
    post: <T = unknown>(route: string, body?: unknown, headers?: Record<string, string>) =>
      request<T>("POST", route, body ?? {}, headers),
    patch: <T = unknown>(route: string, body: unknown) => request<T>("PATCH", route, body),
    delete: <T = unknown>(route: string) => request<T>("DELETE", route),
    as: (next: Credentials) => apiClient(base, next),
  }
}

export type ApiClient = ReturnType<typeof apiClient>

let tenantCounter = 0

/** Registers a new tenant and returns a client signed in as it. */
export const registerTenant = async (base: string, plan = "professional") => {
  tenantCounter += 1
  const registered = await apiClient(base).post<Credentials & { environment: string }>(
    "/api/tenant/register",
    {
      email: `tenant${tenantCounter}-${Date.now()}-${process.pid}@example.com`,
      password: "correct horse battery staple",
      company_name: `Tenant ${tenantCounter}`,
      plan,
    },
  )
  if (registered.status !== 201)
    throw new Error(`register: ${registered.status} ${JSON.stringify(registered.body)}`)
  return { credentials: registered.body, client: apiClient(base, registered.body) }
}
