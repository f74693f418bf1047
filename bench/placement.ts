/**
 * CPU placement for bench:api, with BENCH_PIN=1 (by default every thread is left to the scheduler,
 * as `npm start` leaves them): the server's event-loop thread alone on the first CPU this process
 * may use; the server's other threads (V8's GC helpers, libuv's pool), PostgreSQL's processes and
 * wrk on the others.
 *
 * Why: the event loop is the platform's bottleneck, and on a small machine shared with its database
 * the scheduler keeps preempting it for PostgreSQL's backends, which it wakes itself with every
 * statement it sends: it then waits for a CPU 15-20 % of its time while the machine is not fully
 * busy. Placed apart, it waits 2-5 %. It is the placement one would deploy on such a machine
 * (`taskset`, or CPU sets in a container); on a larger one the database has its own host.
 *
 * Linux only, with util-linux's `taskset`. Threads and backends started after `place` inherit the
 * placement of their creator: new backends the postmaster's, new server threads the event loop's
 * (so `place` runs again just before the timed phase).
 */
import { spawnSync } from "node:child_process"
import * as fs from "node:fs"
import * as path from "node:path"
import { postgresProcesses } from "./support.ts"

export interface Placement {
  /** The CPU of the server's event-loop thread. */
  readonly loop_cpu: number
  /** Every other CPU this process may use, as a `taskset` list ("1", "1-3"). */
  readonly other_cpus: string
}

/** The CPUs this process may run on (`Cpus_allowed_list` of /proc/self/status), ascending. */
export const allowedCpus = (status: string): ReadonlyArray<number> => {
  const line = /^Cpus_allowed_list:\s*(.+)$/m.exec(status)?.[1]?.trim()
  if (line === undefined || line === "") return []
  const cpus = new Set<number>()
  for (const part of line.split(",")) {
    const [from, to] = part.split("-").map(Number)
    if (from === undefined || !Number.isInteger(from)) continue
    const last = to === undefined ? from : to
    if (!Number.isInteger(last)) continue
    for (let cpu = from; cpu <= last; cpu++) cpus.add(cpu)
  }
  return [...cpus].sort((a, b) => a - b)
}

/** A `taskset` CPU list for ascending CPUs, ranges folded: [1, 2, 3, 5] -> "1-3,5". */
export const cpuList = (cpus: ReadonlyArray<number>): string => {
  const parts: Array<string> = []
  let index = 0
  while (index < cpus.length) {
    const start = cpus[index] as number
    let end = start
    while (cpus[index + 1] === end + 1) {
      index++
      end++
    }
    parts.push(end === start ? String(start) : `${start}-${end}`)
    index++
  }
  return parts.join(",")
}

/** The placement to use, or why there is none. */
export const planPlacement = (): Placement | { readonly skipped: string } => {
  if (process.env.BENCH_PIN !== "1") return { skipped: "BENCH_PIN=1 places the threads" }
  if (process.platform !== "linux") return { skipped: "not Linux" }
  const cpus = allowedCpus(fs.readFileSync("/proc/self/status", "utf8"))
  if (cpus.length < 2) return { skipped: `${cpus.length} CPU allowed` }
  if (spawnSync("sh", ["-c", "command -v taskset"]).status !== 0) return { skipped: "no taskset" }
  return { loop_cpu: cpus[0] as number, other_cpus: cpuList(cpus.slice(1)) }
}

const setAffinity = (id: number, cpus: string): boolean =>
  spawnSync("taskset", ["-pc", cpus, String(id)], { stdio: "ignore" }).status === 0

/**
 * Places the server's threads and the embedded PostgreSQL of `dataDir` (its postmaster and every
 * backend). Answers what it placed.
 */
export const place = (
  placement: Placement,
  server_pid: number,
  dataDir: string,
): { readonly threads: number; readonly postgres: number } => {
  let threads = 0
  for (const entry of fs.readdirSync(path.join("/proc", String(server_pid), "task"))) {
    const tid = Number(entry)
    const cpus = tid === server_pid ? String(placement.loop_cpu) : placement.other_cpus
    if (setAffinity(tid, cpus)) threads++
  }
  const processes = postgresProcesses(dataDir)
  let postgres = 0
  for (const id of processes === undefined ? [] : [processes.postmaster, ...processes.children]) {
    if (setAffinity(id, placement.other_cpus)) postgres++
  }
  return { threads, postgres }
}
