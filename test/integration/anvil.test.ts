// Proves the anvil harness: it starts a real node on a free port with the asked chain id, funds the
// mnemonic's accounts, honours a block time, sets balances, and stops for good (twice is harmless).

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
})
