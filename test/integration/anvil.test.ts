// Proves the anvil harness: it starts a real node on a free port with the asked chain id, funds the
// mnemonic's accounts, honours a block time, sets balances, and stops for good (twice is harmless);
// a node whose parent process is killed outright dies with it.

import { spawn } from "node:child_process"
import * as path from "node:path"
import { afterAll, describe, expect, it } from "vitest"
import { type AnvilNode, startAnvil } from "../../src/chains/anvil.ts"
import { test_mnemonic, testWallet } from "../support/evm.ts"

let node: AnvilNode | undefined
afterAll(async () => {
  await node?.stop()
})

describe("startAnvil", () => {
  it("runs a node with the chain id, funded accounts and block time asked for, then stops it", async () => {
    node = await startAnvil({
      chain_id: 4242,
      mnemonic: test_mnemonic,
      account_count: 2,
      balance_ether: 5,
      block_time_seconds: 1,
    })
    expect(node.rpc_url).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/)
    expect(await node.rpc("eth_chainId")).toBe("0x1092")
    const balanceOf = async (address: string) =>
      BigInt((await node?.rpc("eth_getBalance", [address, "latest"])) as string)
    expect(await balanceOf(testWallet(1).address)).toBe(5n * 10n ** 18n)
    expect(await balanceOf(testWallet(2).address)).toBe(0n)
    await node.setBalance(testWallet(2).address, 77n)
    expect(await balanceOf(testWallet(2).address)).toBe(77n)

    // With a one-second block time, blocks come without any transaction.
    const first = BigInt((await node.rpc("eth_blockNumber")) as string)
    await new Promise((resolve) => setTimeout(resolve, 2_200))
    expect(BigInt((await node.rpc("eth_blockNumber")) as string)).toBeGreaterThan(first)

    await node.stop()
    await node.stop()
    await expect(node.rpc("eth_chainId")).rejects.toThrow()
  })

  it("dies with its parent: a process killed with SIGKILL leaves no anvil behind", async () => {
    const module = path.resolve(import.meta.dirname, "../../src/chains/anvil.ts")
    const script =
      `const { startAnvil } = await import(${JSON.stringify(module)});` +
      "const node = await startAnvil({ chain_id: 4343 }); console.log(node.rpc_url); setInterval(() => {}, 1000)"
    const parent = spawn(process.execPath, ["--input-type=module", "-e", script], {
      stdio: ["ignore", "pipe", "inherit"],
    })
    const rpc_url = await new Promise<string>((resolve, reject) => {
      parent.stdout.setEncoding("utf8").once("data", (line: string) => resolve(line.trim()))
      parent.once("exit", (code) =>
        reject(new Error(`the parent exited (${code}) before its anvil listened`)),
      )
    })
    const chainId = () =>
      fetch(rpc_url, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ jsonrpc: "2.0", id: 1, method: "eth_chainId", params: [] }),
      })
    expect((await chainId()).ok).toBe(true)
    parent.kill("SIGKILL")
    const deadline = Date.now() + 10_000
    let alive = true
    while (alive && Date.now() < deadline) {
      await new Promise((resolve) => setTimeout(resolve, 200))
      alive = await chainId().then(
        () => true,
        () => false,
      )
    }
    expect(alive).toBe(false)
  })
})
