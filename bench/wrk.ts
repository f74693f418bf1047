/**
 * HTTP load from a second process: wrk (Debian's package, C with a LuaJIT script), rotating over
 * pre-formatted requests. wrk costs its machine about a quarter of the CPU per request that a
 * Node.js load generator does (measured here: 0.025 ms against autocannon's 0.09 ms), so on a 2-core
 * machine more of the CPU goes to the platform under test and less to the load.
 *
 * The script counts answers by status, checks one 200 body in `sample_every` for `must_contain`, and
 * keeps the first few unexpected answers; wrk's own histogram gives the latency percentiles of every
 * answer (with no errors, every answer is a 2xx).
 */
import { spawn } from "node:child_process"
import * as fs from "node:fs"
import * as path from "node:path"
import { findOrInstall } from "./support.ts"

export interface WrkRequest {
  /** Request line and headers, each line ending in CRLF, without the blank line. */
  readonly head: string
  readonly body: string
}

export interface WrkOptions {
  readonly url: string
  readonly requests: ReadonlyArray<WrkRequest>
  readonly connections: number
  readonly duration_s: number
  readonly timeout_s: number
  /** When set, every request gets `Idempotency-Key: <prefix><n>` with n unique in the run. */
  readonly idempotency_prefix?: string
  /** One 200 answer in this many has its body checked. */
  readonly sample_every: number
  /** What a sampled 200 body must contain. */
  readonly must_contain: string
  /** Where the script and its result go. */
  readonly dir: string
  /** When set, wrk runs on these CPUs only (a `taskset` list, see bench/placement.ts). */
  readonly cpus?: string | undefined
}

export interface WrkOutcome {
  readonly duration_s: number
  readonly answers: number
  readonly answers_2xx: number
  readonly non_2xx: number
  /** Connect, read and write errors, and timeouts. */
  readonly connection_errors: number
  readonly timeouts: number
  readonly status_counts: Readonly<Record<string, number>>
  /** Latency percentiles of every answer, ms. */
  readonly latency_ms: {
    readonly p50: number
    readonly p90: number
    readonly p99: number
    readonly p999: number
    readonly max: number
  }
  readonly sampled: number
  /** Sampled 200s whose body lacked `must_contain`. */
  readonly bad_samples: number
  readonly unexpected: ReadonlyArray<string>
}

/** wrk on PATH, installed from Debian's packages when missing and we may (root). */
export const findWrk = (): string => {
  const wrk = findOrInstall("wrk", "wrk")
  if (wrk === undefined) throw new Error("wrk is missing and cannot be installed here (apt-get install wrk)")
  return wrk
}

/** `text` as a Lua string literal: backslash, quote and control characters escaped (Lua reads UTF-8 as is). */
const luaString = (text: string): string => {
  let literal = '"'
  for (const c of text) {
    const code = c.charCodeAt(0)
    if (c === "\\" || c === '"') literal += `\\${c}`
    else if (code < 0x20 || code === 0x7f) literal += `\\${code.toString().padStart(3, "0")}`
    else literal += c
  }
  return `${literal}"`
}

const script = (options: WrkOptions, output: string): string => `
local heads = {
${options.requests.map((r) => `  ${luaString(r.head)},`).join("\n")}
}
local bodies = {
${options.requests.map((r) => `  ${luaString(r.body)},`).join("\n")}
}
local count = #heads
local idempotency_prefix = ${options.idempotency_prefix === undefined ? "nil" : luaString(options.idempotency_prefix)}
local sample_every = ${options.sample_every}
local must_contain = ${luaString(options.must_contain)}
local full = {}
for k = 1, count do full[k] = heads[k] .. "\\r\\n" .. bodies[k] end

-- Globals: read by done() through thread:get.
statuses = {}
sampled = 0
bad = 0
unexpected = {}
thread_id = 0
local sent = 0
local answered = 0

local threads = {}
function setup(thread)
  table.insert(threads, thread)
  thread:set("thread_id", #threads)
end

function request()
  sent = sent + 1
  local k = (sent - 1) % count + 1
  if idempotency_prefix == nil then return full[k] end
  return heads[k] .. "Idempotency-Key: " .. idempotency_prefix .. thread_id .. "-" .. sent .. "\\r\\n\\r\\n" .. bodies[k]
end

function response(status, headers, body)
  answered = answered + 1
  statuses[status] = (statuses[status] or 0) + 1
  if status < 200 or status > 299 then
    if #unexpected < 5 then table.insert(unexpected, status .. " " .. string.sub(body, 1, 300)) end
    return
  end
  if answered % sample_every ~= 0 then return end
  sampled = sampled + 1
  if not string.find(body, must_contain, 1, true) then
    bad = bad + 1
    if #unexpected < 5 then table.insert(unexpected, status .. " without the expected text: " .. string.sub(body, 1, 300)) end
  end
end

local function json_string(s)
  return '"' .. (string.gsub(s, '[%c"\\\\]', function(c) return string.format("\\\\u%04x", string.byte(c)) end)) .. '"'
end

function done(summary, latency, requests)
  local all_statuses, all_sampled, all_bad, all_unexpected = {}, 0, 0, {}
  for _, thread in ipairs(threads) do
    for status, n in pairs(thread:get("statuses")) do all_statuses[status] = (all_statuses[status] or 0) + n end
    all_sampled = all_sampled + thread:get("sampled")
    all_bad = all_bad + thread:get("bad")
    for _, line in ipairs(thread:get("unexpected")) do
      if #all_unexpected < 5 then table.insert(all_unexpected, json_string(line)) end
    end
  end
  local codes = {}
  for status, n in pairs(all_statuses) do table.insert(codes, '"' .. status .. '":' .. n) end
  local e = summary.errors
  local file = io.open(${luaString(output)}, "w")
  file:write(string.format(
    '{"duration_us":%d,"requests":%d,"connect":%d,"read":%d,"write":%d,"timeout":%d,' ..
    '"p50_us":%d,"p90_us":%d,"p99_us":%d,"p999_us":%d,"max_us":%d,"statuses":{%s},"sampled":%d,"bad":%d,"unexpected":[%s]}',
    summary.duration, summary.requests, e.connect, e.read, e.write, e.timeout,
    latency:percentile(50), latency:percentile(90), latency:percentile(99), latency:percentile(99.9), latency.max,
    table.concat(codes, ","), all_sampled, all_bad, table.concat(all_unexpected, ",")))
  file:close()
end
`

interface WrkResult {
  readonly duration_us: number
  readonly requests: number
  readonly connect: number
  readonly read: number
  readonly write: number
  readonly timeout: number
  readonly p50_us: number
  readonly p90_us: number
  readonly p99_us: number
  readonly p999_us: number
  readonly max_us: number
  readonly statuses: Readonly<Record<string, number>>
  readonly sampled: number
  readonly bad: number
  readonly unexpected: ReadonlyArray<string>
}

/** Runs wrk (one thread, `connections` keep-alive connections) for `duration_s` and reads its result. */
export const runWrk = async (wrk: string, options: WrkOptions): Promise<WrkOutcome> => {
  fs.mkdirSync(options.dir, { recursive: true })
  const output = path.join(options.dir, "wrk-result.json")
  const scriptFile = path.join(options.dir, "wrk-load.lua")
  fs.rmSync(output, { force: true })
  fs.writeFileSync(scriptFile, script(options, output))
  const args = [
    "-t1",
    `-c${options.connections}`,
    `-d${options.duration_s}s`,
    `--timeout`,
    `${options.timeout_s}s`,
    "-s",
    scriptFile,
    options.url,
  ]
  const [command, commandArgs] =
    options.cpus === undefined ? [wrk, args] : ["taskset", ["-c", options.cpus, wrk, ...args]]
  const child = spawn(command, commandArgs, { stdio: ["ignore", "pipe", "pipe"] })
  let printed = ""
  child.stdout.on("data", (chunk: Buffer) => (printed = (printed + chunk.toString()).slice(-4_096)))
  child.stderr.on("data", (chunk: Buffer) => (printed = (printed + chunk.toString()).slice(-4_096)))
  const code = await new Promise<number | null>((resolve) => child.on("close", resolve))
  if (code !== 0 || !fs.existsSync(output)) throw new Error(`wrk exited ${code}: ${printed}`)
  const result = JSON.parse(fs.readFileSync(output, "utf8")) as WrkResult
  let answers_2xx = 0
  for (const [status, n] of Object.entries(result.statuses))
    if (Number(status) >= 200 && Number(status) <= 299) answers_2xx += n
  return {
    duration_s: result.duration_us / 1e6,
    answers: result.requests,
    answers_2xx,
    non_2xx: result.requests - answers_2xx,
    connection_errors: result.connect + result.read + result.write + result.timeout,
    timeouts: result.timeout,
    status_counts: result.statuses,
    latency_ms: {
      p50: result.p50_us / 1_000,
      p90: result.p90_us / 1_000,
      p99: result.p99_us / 1_000,
      p999: result.p999_us / 1_000,
      max: result.max_us / 1_000,
    },
    sampled: result.sampled,
    bad_samples: result.bad,
    unexpected: result.unexpected,
  }
}
