// Proves that the embedded PostgreSQL server of a DATA_DIR stays up while any process of ours still
// uses it, whichever started it: the last one to leave stops it. (A CLI run that started the server,
// then a platform that shared it: the CLI's exit used to stop the server under the platform.)
import { type ChildProcess, spawn } from "node:child_process"
import { createHash } from "node:crypto"
import * as fs from "node:fs"
import * as net from "node:net"
import * as os from "node:os"
import * as path from "node:path"
import pg from "pg"
import { afterAll, describe, expect, it } from "vitest"
import { isAlive, startEmbedded } from "../../src/db/embedded.ts"

const script = path.join(import.meta.dirname, "../support/embedded-user.ts")
const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), "pg-share-"))
const children: Array<ChildProcess> = []

/**
 * Starts a user of the server and waits for its URL. `detached`: in a process group of its own, as
 * a platform started from a terminal is (the terminal's Ctrl-C signals that whole group).
 */
const user = (
  options: { detached?: boolean; dir?: string } = {},
): Promise<{ child: ChildProcess; url: string }> =>
  new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [script, options.dir ?? dataDir], {
      stdio: ["ignore", "pipe", "inherit"],
      detached: options.detached ?? false,
    })
    children.push(child)
    let output = ""
    child.stdout?.on("data", (chunk: Buffer) => {
      output += chunk.toString()
      const line = output.split("\n")[0]
      if (output.includes("\n") && line !== undefined)
        resolve({ child, url: (JSON.parse(line) as { url: string }).url })
    })
    child.on("exit", (code) => reject(new Error(`the user exited with ${code} before it was ready`)))
  })

const leave = (child: ChildProcess): Promise<void> =>
  new Promise((resolve) => {
    child.on("exit", () => resolve())
    child.kill("SIGTERM")
  })

const answers = async (url: string): Promise<boolean> => {
  const client = new pg.Client({ connectionString: url })
  try {
    await client.connect()
    await client.query("select 1")
    return true
  } catch {
    return false
  } finally {
    await client.end().catch(() => {})
  }
}

const freshDirs: Array<string> = []

afterAll(async () => {
  for (const child of children) if (child.exitCode === null && child.signalCode === null) await leave(child)
  fs.rmSync(dataDir, { recursive: true, force: true })
  for (const dir of freshDirs) fs.rmSync(dir, { recursive: true, force: true })
})

describe("the embedded server shared by several processes", () => {
  it("keeps running when the process that started it leaves first, and stops when the last one leaves", async () => {
    const first = await user()
    const second = await user()
    expect(second.url).toBe(first.url)
    await leave(first.child)
    expect(await answers(second.url)).toBe(true)
    // A third arrives while the second still uses it: it shares, it does not adopt a second server.
    const third = await user()
    expect(third.url).toBe(first.url)
    await leave(second.child)
    expect(await answers(third.url)).toBe(true)
    const postmaster = Number(
      fs.readFileSync(path.join(dataDir, "pg", "postmaster.pid"), "utf8").split("\n")[0],
    )
    await leave(third.child)
    expect(await answers(third.url)).toBe(false)
    expect(isAlive(postmaster)).toBe(false)
  }, 120_000)

  it("is stopped by the process that started it when it leaves last, and by an adopter after a SIGKILL", async () => {
    const first = await user()
    const second = await user()
    await leave(second.child)
    expect(await answers(first.url)).toBe(true)
    // The starter killed outright: the next user adopts the server and, leaving last, stops it.
    first.child.kill("SIGKILL")
    await new Promise((resolve) => first.child.on("exit", resolve))
    const adopter = await user()
    expect(await answers(adopter.url)).toBe(true)
    await leave(adopter.child)
    expect(await answers(adopter.url)).toBe(false)
  }, 120_000)

  it("is not stopped by a Ctrl-C to its starter's process group: the starter leaves in order, and a sharer keeps it", async () => {
    const starter = await user({ detached: true })
    const sharer = await user()
    expect(sharer.url).toBe(starter.url)
    const postmaster = Number(
      fs.readFileSync(path.join(dataDir, "pg", "postmaster.pid"), "utf8").split("\n")[0],
    )
    // What a terminal's Ctrl-C does: SIGINT to every process of the foreground group.
    const exited = new Promise((resolve) => starter.child.on("exit", resolve))
    process.kill(-(starter.child.pid as number), "SIGINT")
    await exited
    expect(isAlive(postmaster)).toBe(true)
    expect(await answers(sharer.url)).toBe(true)
    await leave(sharer.child)
    expect(isAlive(postmaster)).toBe(false)
  }, 120_000)

  it("is in its starter's process group unless asked to run apart (a test's or benchmark's server dies with its group)", async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), "pg-group-"))
    freshDirs.push(dir)
    /** A process's group, from /proc/<pid>/stat: "pid (comm) state ppid pgrp ...". */
    const groupOf = (pid: number | "self") => {
      const stat = fs.readFileSync(`/proc/${pid}/stat`, "utf8")
      return Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[2])
    }
    const postmasterOf = (data: string) =>
      Number(fs.readFileSync(path.join(data, "pg", "postmaster.pid"), "utf8").split("\n")[0])
    const own = await startEmbedded({ dataDir: dir })
    try {
      expect(groupOf(postmasterOf(dir))).toBe(groupOf("self"))
    } finally {
      await own.stop()
    }
    // The platform's (as the user process starts it): a group of its own.
    const apart = await user({ detached: false })
    expect(groupOf(postmasterOf(dataDir))).not.toBe(groupOf(apart.child.pid as number))
    await leave(apart.child)
  }, 120_000)

  it("names its start lock at random, readable by its owner only: another account cannot hold starts up", async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), "pg-lock-"))
    freshDirs.push(dir)
    // What a lock named after the directory alone would be: anyone could take it first.
    const guessable = net.createServer()
    const digest = createHash("sha256").update(path.resolve(dir)).digest("hex").slice(0, 32)
    await new Promise<void>((resolve) => guessable.listen(`\0platform-embedded-pg-${digest}`, resolve))
    try {
      const started = await user({ dir })
      expect(fs.statSync(path.join(dir, "pg.start-lock")).mode & 0o777).toBe(0o600)
      await leave(started.child)
    } finally {
      guessable.close()
    }
  }, 120_000)

  it("is started once when two processes start at the same moment on a fresh data directory: both share it", async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), "pg-race-"))
    freshDirs.push(dir)
    const [one, two] = await Promise.all([user({ dir }), user({ dir })])
    expect(two.url).toBe(one.url)
    expect(await answers(one.url)).toBe(true)
    await leave(one.child)
    expect(await answers(two.url)).toBe(true)
    await leave(two.child)
    expect(await answers(two.url)).toBe(false)
  }, 180_000)
})
