/**
 * Starts and stops a real anvil (Foundry's local EVM node, from the npm package @foundry-rs/anvil)
 * for tests and the sandbox. Each node listens on a free loopback port chosen by anvil itself
 * (`--port 0`), so parallel test files never collide.
 */
import { type ChildProcess, spawn } from "node:child_process"
import * as fs from "node:fs"
import { createRequire } from "node:module"
import * as path from "node:path"
import { createInterface } from "node:readline"

export interface AnvilOptions {
  readonly chain_id: number
  /** Seconds between blocks; without it every transaction is mined at once (instant mining). */
  readonly block_time_seconds?: number
  /** The dev accounts' BIP-39 mnemonic (anvil derives m/44'/60'/0'/0/i); anvil's default otherwise. */
  readonly mnemonic?: string
  /** How many dev accounts to fund; anvil's default (10) otherwise. */
  readonly account_count?: number
  /** Each dev account's balance in ether; anvil's default (10,000) otherwise. */
  readonly balance_ether?: number
}

export interface AnvilNode {
  readonly rpc_url: string
  readonly chain_id: number
  /** Sends one JSON-RPC request, for the anvil_* and evm_* test methods; throws on an RPC error. */
  readonly rpc: (method: string, params?: ReadonlyArray<unknown>) => Promise<unknown>
  /** Sets an address's native balance, in wei. */
  readonly setBalance: (address: string, wei: bigint) => Promise<void>
  /** Stops the node and waits for its exit; safe to call twice. */
  readonly stop: () => Promise<void>
}

const startup_timeout_ms = 15_000
const stop_timeout_ms = 5_000

/**
 * The anvil binary shipped for this platform. npm skips the package's postinstall script, so the
 * binary is found in the platform package directly rather than through the wrapper.
 * @example anvilBinary() // ".../node_modules/@foundry-rs/anvil-linux-amd64/bin/anvil"
 */
export function anvilBinary(): string {
  const require = createRequire(import.meta.url)
  const platform_package = `@foundry-rs/anvil-${process.platform}-${process.arch === "x64" ? "amd64" : process.arch}`
  return path.join(path.dirname(require.resolve(`${platform_package}/package.json`)), "bin", "anvil")
}

/**
 * Starts anvil and resolves once it accepts requests.
 * @example const node = await startAnvil({ chain_id: 31337 }); ...; await node.stop()
 */
export async function startAnvil(options: AnvilOptions): Promise<AnvilNode> {
  const [command, ...args] = diesWithParent([anvilBinary(), ...anvilArguments(options)])
  const child = spawn(command as string, args, { stdio: ["ignore", "pipe", "pipe"] })
  const port = await listeningPort(child)
  const rpc_url = `http://127.0.0.1:${port}`
  let request_id = 0
  const rpc = async (method: string, params: ReadonlyArray<unknown> = []): Promise<unknown> => {
    request_id += 1
    const response = await fetch(rpc_url, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ jsonrpc: "2.0", id: request_id, method, params }),
    })
    const body = (await response.json()) as { result?: unknown; error?: { message: string } }
    if (body.error !== undefined) throw new Error(`anvil ${method}: ${body.error.message}`)
    return body.result
  }
  return {
    rpc_url,
    chain_id: options.chain_id,
    rpc,
    setBalance: async (address, wei) => {
      await rpc("anvil_setBalance", [address, `0x${wei.toString(16)}`])
    },
    stop: () => stopProcess(child),
  }
}

/** util-linux's setpriv, where this machine has it (it sets the parent-death signal, then execs). */
const setpriv = ["/usr/bin/setpriv", "/bin/setpriv"].find((candidate) => fs.existsSync(candidate))

/**
 * The command line, run so that the node is killed when its parent process dies: a platform or
 * test process that crashes or is killed (SIGKILL) would otherwise leave its anvils running. On
 * Linux with setpriv the kernel does it (PR_SET_PDEATHSIG); elsewhere a clean stop still stops them.
 */
function diesWithParent(command: ReadonlyArray<string>): ReadonlyArray<string> {
  return process.platform === "linux" && setpriv !== undefined
    ? [setpriv, "--pdeathsig", "KILL", ...command]
    : command
}

function anvilArguments(options: AnvilOptions): Array<string> {
  const args = ["--host", "127.0.0.1", "--port", "0", "--chain-id", String(options.chain_id)]
  if (options.block_time_seconds !== undefined) args.push("--block-time", String(options.block_time_seconds))
  if (options.mnemonic !== undefined) args.push("--mnemonic", options.mnemonic)
  if (options.account_count !== undefined) args.push("--accounts", String(options.account_count))
  if (options.balance_ether !== undefined) args.push("--balance", String(options.balance_ether))
  return args
}

/** Reads anvil's banner until "Listening on host:port"; keeps draining its output afterwards. */
function listeningPort(child: ChildProcess): Promise<number> {
  return new Promise((resolve, reject) => {
    const output: Array<string> = []
    const timer = setTimeout(() => fail(new Error("anvil did not start in time")), startup_timeout_ms)
    const fail = (error: Error) => {
      clearTimeout(timer)
      child.kill("SIGKILL")
      reject(new Error(`${error.message}\n${output.slice(-20).join("\n")}`))
    }
    child.stderr?.on("data", (chunk: Buffer) => output.push(chunk.toString()))
    child.once("error", fail)
    child.once("exit", (code) => fail(new Error(`anvil exited with code ${String(code)} before listening`)))
    const lines = createInterface({ input: child.stdout as NodeJS.ReadableStream })
    lines.on("line", (line) => {
      output.push(line)
      const match = /Listening on [\d.]+:(\d+)/.exec(line)
      if (match?.[1] === undefined) return
      clearTimeout(timer)
      child.removeAllListeners("exit")
      // anvil logs every request; the stream must keep flowing or its pipe fills and it stalls.
      lines.removeAllListeners("line")
      lines.on("line", () => {})
      resolve(Number(match[1]))
    })
  })
}

async function stopProcess(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return
  const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()))
  child.kill("SIGTERM")
  const timer = setTimeout(() => child.kill("SIGKILL"), stop_timeout_ms)
  await exited
  clearTimeout(timer)
}
