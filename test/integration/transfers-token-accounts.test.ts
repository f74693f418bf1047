// The search for a transfer destination among the token accounts of the platform's own wallets
// (src/transfers/token-accounts.ts), on a real TON chain (@ton/sandbox) with the platform's jetton:
// a wallet's jetton wallet is found in every spelling, deployed or not; a wallet's own address or
// another account is not. When the node fails or stops answering the minter's get methods, the
// search answers "not found" (the request goes on; signing still refuses a created jetton wallet)
// instead of failing or holding the request, and what it derived stays remembered; a failing
// contract does not stop the search among the others.
import { Address } from "@ton/core"
import { Effect } from "effect"
import { beforeAll, describe, expect, test } from "vitest"
import { makeTonAdapter } from "../../adapters/chains/ton/adapter.ts"
import { jettonWalletAddress } from "../../adapters/chains/ton/jetton.ts"
import type { TonTransport } from "../../adapters/chains/ton/transport.ts"
import { deriveAddress, type WalletKeyRef } from "../../domain/custody/derive.ts"
import { startTonSandboxChain, type TonSandboxChain } from "../../src/chains/ton-sandbox.ts"
import { isCustodyTokenAccount } from "../../src/transfers/token-accounts.ts"

const seed = new Uint8Array(64).fill(7)
const wallet = (wallet_index: number): WalletKeyRef => ({ chain: "ton", tenant_index: 0, wallet_index })
const addressOf = (wallet_index: number) => deriveAddress(seed, wallet(wallet_index))
const run = <A>(effect: Effect.Effect<A>) => Effect.runPromise(effect)

/** The chain's transport with its get methods failing, or never answering. */
const withGetMethods = (transport: TonTransport, answer: "fail" | "hang"): TonTransport =>
  new Proxy(transport, {
    get: (target, property, receiver) =>
      property === "runGetMethod"
        ? () => (answer === "fail" ? Promise.reject(new Error("node unreachable")) : new Promise(() => {}))
        : Reflect.get(target, property, receiver),
  })

describe("the token accounts of the platform's TON wallets", () => {
  let ton: TonSandboxChain
  let minter: string

  beforeAll(async () => {
    ton = await startTonSandboxChain({ block_time_ms: 0 })
    minter = ton.contracts.get("USDT") ?? ""
    expect(minter).not.toBe("")
    // Wallet 0's jetton wallet is deployed by a mint; the others' are not.
    await ton.fund(addressOf(0), "USDT", 5_000_000n)
  })

  const jettonWalletOf = (wallet_index: number) =>
    jettonWalletAddress(Address.parse(addressOf(wallet_index)), Address.parse(minter))

  test("a wallet's jetton wallet is found in every spelling, deployed or not; nothing else is", async () => {
    const search = (destination: string) =>
      run(
        isCustodyTokenAccount({
          chain: "ton",
          adapter: ton.adapter,
          wallet_addresses: [addressOf(0), addressOf(1), addressOf(2)],
          contracts: [minter],
          destination,
        }),
      )
    for (const account of [jettonWalletOf(0), jettonWalletOf(2)]) {
      for (const spelling of [
        account.toString({ bounceable: false }),
        account.toString({ bounceable: true }),
        account.toString({ bounceable: false, testOnly: true }),
        account.toRawString(),
      ]) {
        expect(await search(spelling)).toBe(true)
      }
    }
    // The wallets themselves, a wallet not listed, the minter and the same account hash on the
    // masterchain are not token accounts of these wallets.
    for (const destination of [
      addressOf(0),
      addressOf(1),
      jettonWalletOf(3).toString(),
      minter,
      new Address(-1, jettonWalletOf(1).hash).toRawString(),
    ]) {
      expect(await search(destination)).toBe(false)
    }
  })

  test("a node that fails or stops answering gives 'not found' in time; what was derived stays", async () => {
    // A fresh adapter: it has not yet asked the minter whether it runs the platform's wallet code.
    const owners = [addressOf(10), addressOf(11)]
    const search = (transport: TonTransport, deadline_ms?: number) =>
      run(
        isCustodyTokenAccount({
          chain: "ton",
          adapter: makeTonAdapter(transport),
          wallet_addresses: owners,
          contracts: [minter],
          destination: jettonWalletOf(11).toString(),
          ...(deadline_ms === undefined ? {} : { deadline_ms }),
        }),
      )
    expect(await search(withGetMethods(ton.transport, "fail"))).toBe(false)
    const started = performance.now()
    expect(await search(withGetMethods(ton.transport, "hang"), 300)).toBe(false)
    expect(performance.now() - started).toBeLessThan(5_000)
    expect(await search(ton.transport)).toBe(true)
    // Derived once, remembered: the node is not asked again for these wallets.
    expect(await search(withGetMethods(ton.transport, "fail"))).toBe(true)
  })
  test("a contract whose accounts the node cannot derive is passed over; the others are still searched", async () => {
    // Another jetton's minter, whose get methods fail; the platform's USDT minter answers.
    const other = jettonWalletOf(99).toString()
    const transport = new Proxy(ton.transport, {
      get: (target, property, receiver) =>
        property === "runGetMethod"
          ? (address: Address, method: string, args: Parameters<TonTransport["runGetMethod"]>[2]) =>
              address.equals(Address.parse(other))
                ? Promise.reject(new Error("node unreachable"))
                : target.runGetMethod(address, method, args)
          : Reflect.get(target, property, receiver),
    })
    expect(
      await run(
        isCustodyTokenAccount({
          chain: "ton",
          adapter: makeTonAdapter(transport),
          wallet_addresses: [addressOf(20), addressOf(21)],
          contracts: [other, minter],
          destination: jettonWalletOf(21).toString(),
        }),
      ),
    ).toBe(true)
  })
})
