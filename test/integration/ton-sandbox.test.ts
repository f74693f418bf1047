/**
 * Goal: the sandbox's TON chain (src/chains/ton-sandbox.ts) is what the platform needs from a
 * `RunningChain`: USDT deployed as the platform jetton with the in-memory issuer as its admin, a
 * `fund` that mints jettons and tops up TON for fees (and refuses, loudly, a frozen owner), and a
 * gas probe whose fee estimate is emulated from a deployed wallet; and a block clock: a transfer is
 * `seen` when sent and lands in a later block, until `stop`.
 */
import { Address } from "@ton/core"
import { Effect } from "effect"
import { afterAll, beforeAll, describe, expect, test } from "vitest"
import { jetton_wallet_code } from "../../adapters/chains/ton/jetton.ts"
import { deriveAddress, deriveSigningKey } from "../../domain/custody/derive.ts"
import {
  startTonSandboxChain,
  type TonSandboxChain,
  ton_sandbox_block_time_ms,
} from "../../src/chains/ton-sandbox.ts"

const owner_seed = new Uint8Array(64).fill(3)
const owner_ref = { chain: "ton", tenant_index: 0, wallet_index: 0 } as const
const owner = deriveAddress(owner_seed, owner_ref)
const run = <A, E>(effect: Effect.Effect<A, E>) => Effect.runPromise(effect)

describe("the sandbox TON chain", () => {
  let ton: TonSandboxChain
  let usdt: string

  beforeAll(async () => {
    ton = await startTonSandboxChain()
    usdt = ton.contracts.get("USDT") ?? ""
  })

  afterAll(async () => {
    await ton?.stop()
  })

  test("USDT is the platform jetton, administered by the issuer, with nothing minted yet", async () => {
    expect(Address.isFriendly(usdt) && Address.parseFriendly(usdt).isBounceable).toBe(true)
    const data = await ton.transport.runGetMethod(Address.parse(usdt), "get_jetton_data", [])
    expect(data?.readBigNumber()).toBe(0n)
    data?.readBigNumber()
    expect(data?.readAddress().equals(Address.parse(ton.issuer_address))).toBe(true)
    data?.readCell()
    expect(data?.readCell().equals(jetton_wallet_code)).toBe(true)
  })

  test("fund mints jettons to the owner and tops up its TON once", async () => {
    const token = { kind: "token", contract: usdt } as const
    await ton.fund(owner, "USDT", 2_500_000n)
    expect(await run(ton.adapter.balance(owner, token))).toBe(2_500_000n)
    const topped_up = await run(ton.adapter.balance(owner, { kind: "native" }))
    expect(topped_up).toBeGreaterThanOrEqual(1_000_000_000n)
    await ton.fund(owner, "USDT", 500_000n)
    expect(await run(ton.adapter.balance(owner, token))).toBe(3_000_000n)
    expect(await run(ton.adapter.balance(owner, { kind: "native" }))).toBe(topped_up)
  })

  test("fund to one owner six times at once: every mint lands and every call says so", async () => {
    const other = deriveAddress(owner_seed, { ...owner_ref, wallet_index: 1 })
    const amounts = [1n, 20n, 300n, 4_000n, 50_000n, 600_000n]
    await Promise.all(amounts.map((amount) => ton.fund(other, "USDT", amount)))
    expect(await run(ton.adapter.balance(other, { kind: "token", contract: usdt }))).toBe(654_321n)
  })

  test("fund refuses an owner the issuer froze, and works again once unfrozen", async () => {
    await ton.freeze(owner, "USDT", true)
    await expect(ton.fund(owner, "USDT", 1n)).rejects.toThrow(/refused/)
    await ton.freeze(owner, "USDT", false)
    await ton.fund(owner, "USDT", 1n)
  })

  test("the gas probe is a deployed wallet: its estimate is emulated, well under the undeployed bound", async () => {
    const probe = ton.gas_probe_address
    expect((await ton.transport.account(Address.parse(probe))).status).toBe("active")
    const fee = await run(
      ton.adapter.estimateTransferFee(probe, { asset: { kind: "native" }, to: probe, amount: 1n }),
    )
    expect(fee).toBeGreaterThan(0n)
    expect(fee).toBeLessThan(10_000_000n)
  })

  test("the chain makes a block a second: a transfer is seen when sent and lands in a block; stop ends blocks", async () => {
    const key = deriveSigningKey(owner_seed, owner_ref)
    const intent = { asset: { kind: "native" }, to: ton.gas_probe_address, amount: 1_000n } as const
    const statusOf = async (tx_hash: string) => (await run(ton.adapter.transactionStatus(tx_hash))).status
    const first = await run(ton.adapter.signTransfer(key, intent))
    await run(ton.adapter.broadcast(first.raw))
    expect(await statusOf(first.tx_hash)).toBe("seen")
    const sent_at = Date.now()
    // A block a second lands it within a few; the bound is wide only for a slow, busy host.
    while ((await statusOf(first.tx_hash)) === "seen") {
      expect(Date.now() - sent_at).toBeLessThan(15 * ton_sandbox_block_time_ms)
      await new Promise((resolve) => setTimeout(resolve, 50))
    }
    expect(await statusOf(first.tx_hash)).toBe("finalized")

    await ton.stop()
    const second = await run(ton.adapter.signTransfer(key, intent))
    await run(ton.adapter.broadcast(second.raw))
    await new Promise((resolve) => setTimeout(resolve, 2 * ton_sandbox_block_time_ms))
    expect(await statusOf(second.tx_hash)).toBe("seen")
  })
})
