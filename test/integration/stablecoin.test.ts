// Proves the platform stablecoin's rules on a real EVM node (anvil): the committed bytecode is what
// the source compiles to; a blocked address can neither send, receive, approve nor spend; a frozen
// one cannot send but can receive; allowances move and shrink exactly; only the issuer mints, burns
// and blocks; and the total supply always equals the sum of balances and mints minus burns.

import * as fs from "node:fs"
import type { Address } from "viem"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { artifactPath, compileContract } from "../../scripts/compile-contracts.ts"
import { type AnvilNode, startAnvil } from "../../src/chains/anvil.ts"
import { deployStablecoin } from "../../src/chains/stablecoin.ts"
import { callStablecoin, Reverted, readStablecoin, test_mnemonic, testWallet } from "../support/evm.ts"

const issuer = testWallet(0)
const alice = testWallet(1)
const bob = testWallet(2)
const carol = testWallet(3)
const holders = [issuer, alice, bob, carol]

let node: AnvilNode
let token: Address
let minted = 0n
let burnt = 0n

const send = (from: { key: typeof issuer.key }, fn: string, args: ReadonlyArray<unknown>) =>
  callStablecoin(node.rpc_url, token, from.key, fn, args)
const read = (fn: string, args: ReadonlyArray<unknown> = []) => readStablecoin(node.rpc_url, token, fn, args)
const balanceOf = async (who: { address: Address }) => (await read("balanceOf", [who.address])) as bigint
const revertOf = async (call: Promise<unknown>): Promise<string> => {
  const outcome = await call.then(
    () => "succeeded",
    (error: unknown) => (error instanceof Reverted ? error.error_name : Promise.reject(error)),
  )
  return outcome
}
const mint = async (to: { address: Address }, amount: bigint) => {
  await send(issuer, "mint", [to.address, amount])
  minted += amount
}

/** Total supply equals mints minus burns, and the sum of every holder's balance. */
const expectSupplyConserved = async () => {
  const supply = (await read("totalSupply")) as bigint
  const balances = await Promise.all(holders.map(balanceOf))
  expect(supply).toBe(minted - burnt)
  expect(balances.reduce((sum, balance) => sum + balance, 0n)).toBe(supply)
}

beforeAll(async () => {
  node = await startAnvil({ chain_id: 31337, mnemonic: test_mnemonic, account_count: 4 })
  token = await deployStablecoin({
    rpc_url: node.rpc_url,
    issuer: issuer.key,
    name: "Platform USD",
    symbol: "USDP",
    decimals: 6,
  })
})
afterAll(async () => {
  await node?.stop()
})

describe("the committed build", () => {
  const compiled = compileContract("PlatformStablecoin")

  it("is byte for byte what the source in the repository compiles to", () => {
    const committed = fs.readFileSync(artifactPath("PlatformStablecoin"), "utf8")
    expect(`${JSON.stringify(compiled, null, 2)}\n`).toBe(committed)
  })

  it("is the code running on chain after deployment", async () => {
    const { deployed_bytecode } = compiled
    const code = await node.rpc("eth_getCode", [token, "latest"])
    expect(code).toBe(deployed_bytecode)
  })
})

describe("the stablecoin", () => {
  it("describes itself and names its issuer", async () => {
    expect(await read("name")).toBe("Platform USD")
    expect(await read("symbol")).toBe("USDP")
    expect(await read("decimals")).toBe(6)
    expect(await read("issuer")).toBe(issuer.address)
  })

  it("lets only the issuer mint, burn, block and freeze", async () => {
    expect(await revertOf(send(alice, "mint", [alice.address, 1n]))).toBe("NotIssuer")
    expect(await revertOf(send(alice, "burn", [1n]))).toBe("NotIssuer")
    expect(await revertOf(send(alice, "blockAccount", [bob.address]))).toBe("NotIssuer")
    expect(await revertOf(send(alice, "freezeAccount", [bob.address]))).toBe("NotIssuer")
    await expectSupplyConserved()
  })

  it("moves balances on transfer and conserves the supply", async () => {
    await mint(alice, 1_000_000n)
    await send(alice, "transfer", [bob.address, 250_000n])
    expect(await balanceOf(alice)).toBe(750_000n)
    expect(await balanceOf(bob)).toBe(250_000n)
    expect(await revertOf(send(bob, "transfer", [alice.address, 250_001n]))).toBe("InsufficientBalance")
    await expectSupplyConserved()
  })

  it("burns only from the issuer's own balance, lowering the supply", async () => {
    await send(alice, "transfer", [issuer.address, 100_000n])
    await send(issuer, "burn", [60_000n])
    burnt += 60_000n
    expect(await balanceOf(issuer)).toBe(40_000n)
    expect(await revertOf(send(issuer, "burn", [40_001n]))).toBe("InsufficientBalance")
    await expectSupplyConserved()
  })

  it("keeps a blocked address from sending, receiving, approving and spending", async () => {
    await send(alice, "approve", [carol.address, 10_000n])
    await send(bob, "approve", [alice.address, 10_000n])
    const receipt = await send(issuer, "blockAccount", [bob.address])
    expect(receipt.logs).toHaveLength(1)
    expect(await read("isBlocked", [bob.address])).toBe(true)

    expect(await revertOf(send(bob, "transfer", [alice.address, 1n]))).toBe("AccountBlocked")
    expect(await revertOf(send(alice, "transfer", [bob.address, 1n]))).toBe("AccountBlocked")
    expect(await revertOf(send(carol, "transferFrom", [alice.address, bob.address, 1n]))).toBe(
      "AccountBlocked",
    )
    expect(await revertOf(send(alice, "transferFrom", [bob.address, alice.address, 1n]))).toBe(
      "AccountBlocked",
    )
    expect(await revertOf(send(bob, "approve", [alice.address, 1n]))).toBe("AccountBlocked")
    expect(await revertOf(send(alice, "approve", [bob.address, 1n]))).toBe("AccountBlocked")
    expect(await revertOf(send(issuer, "mint", [bob.address, 1n]))).toBe("AccountBlocked")

    await send(issuer, "unblockAccount", [bob.address])
    await send(bob, "transfer", [alice.address, 1n])
    expect(await balanceOf(bob)).toBe(250_000n - 1n)
    await expectSupplyConserved()
  })

  it("keeps a frozen address from sending and approving, but lets it receive", async () => {
    await send(issuer, "freezeAccount", [alice.address])
    expect(await revertOf(send(alice, "transfer", [bob.address, 1n]))).toBe("AccountFrozen")
    expect(await revertOf(send(alice, "approve", [bob.address, 1n]))).toBe("AccountFrozen")
    expect(await revertOf(send(carol, "transferFrom", [alice.address, carol.address, 1n]))).toBe(
      "AccountFrozen",
    )
    const before = await balanceOf(alice)
    await send(bob, "transfer", [alice.address, 5n])
    expect(await balanceOf(alice)).toBe(before + 5n)
    await send(issuer, "unfreezeAccount", [alice.address])
    await send(alice, "transfer", [bob.address, 5n])
    await expectSupplyConserved()
  })

  it("spends allowances exactly: transferFrom lowers them, more than allowed reverts", async () => {
    await send(alice, "approve", [carol.address, 300n])
    expect(await read("allowance", [alice.address, carol.address])).toBe(300n)
    await send(carol, "transferFrom", [alice.address, carol.address, 120n])
    expect(await read("allowance", [alice.address, carol.address])).toBe(180n)
    expect(await balanceOf(carol)).toBe(120n)
    expect(await revertOf(send(carol, "transferFrom", [alice.address, carol.address, 181n]))).toBe(
      "InsufficientAllowance",
    )
    expect(await revertOf(send(bob, "transferFrom", [alice.address, bob.address, 1n]))).toBe(
      "InsufficientAllowance",
    )
    await send(carol, "transferFrom", [alice.address, bob.address, 180n])
    expect(await read("allowance", [alice.address, carol.address])).toBe(0n)
    // Approve sets, it does not add.
    await send(alice, "approve", [carol.address, 7n])
    await send(alice, "approve", [carol.address, 3n])
    expect(await read("allowance", [alice.address, carol.address])).toBe(3n)
    await expectSupplyConserved()
  })

  it("conserves the supply across a run of mixed transfers", async () => {
    const moves: ReadonlyArray<readonly [typeof alice, typeof alice, bigint]> = [
      [alice, bob, 17n],
      [bob, carol, 9n],
      [carol, alice, 4n],
      [bob, issuer, 8n],
    ]
    for (const [from, to, amount] of moves) await send(from, "transfer", [to.address, amount])
    await mint(carol, 55n)
    await send(issuer, "burn", [8n])
    burnt += 8n
    await expectSupplyConserved()
  })
})
