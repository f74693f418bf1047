/**
 * Goal: the sandbox's TON chain (src/chains/ton-sandbox.ts) is what the platform needs from a
 * `RunningChain`: USDT deployed as the platform jetton with the in-memory issuer as its admin, a
 * `fund` that mints jettons and tops up TON for fees (and refuses, loudly, a frozen owner), and a
 * gas probe whose fee estimate is emulated from a deployed wallet.
 */
import { Address } from "@ton/core"
import { Effect } from "effect"
import { beforeAll, describe, expect, test } from "vitest"
import { jetton_wallet_code } from "../../adapters/chains/ton/jetton.ts"
import { deriveAddress } from "../../domain/custody/derive.ts"
import { startTonSandboxChain, type TonSandboxChain } from "../../src/chains/ton-sandbox.ts"

const owner = deriveAddress(new Uint8Array(64).fill(3), { chain: "ton", tenant_index: 0, wallet_index: 0 })
const run = <A, E>(effect: Effect.Effect<A, E>) => Effect.runPromise(effect)

describe("the sandbox TON chain", () => {
  let ton: TonSandboxChain
  let usdt: string

  beforeAll(async () => {
    ton = await startTonSandboxChain()
    usdt = ton.contracts.get("USDT") ?? ""
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
})
