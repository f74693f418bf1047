/**
 * Goal: the TON adapter signs, broadcasts, confirms and reads native TON transfers from custody's
 * v4R2 wallets on the real TVM (@ton/sandbox, in process) through the code path the HTTP transport
 * shares: the first send deploys the wallet, success with its proof, a rebroadcast that changes
 * nothing, one seqno carrying one transfer, a sender without enough TON, an expired message, fee
 * estimates, balances and incoming transfers listed once. Then the same adapter over a transport
 * that holds messages for blocks, as the sandbox chain runs it: `seen` until the block, once per
 * message, the seqno checked at execution, and a message expired before its block dropped.
 */
import { Address, loadMessage, toNano } from "@ton/core"
import { Blockchain } from "@ton/sandbox"
import { Cause, Effect, Exit, Option } from "effect"
import { beforeAll, describe, expect, test } from "vitest"
import {
  makeTonAdapter,
  message_ttl_seconds,
  ton_native_contract,
} from "../../adapters/chains/ton/adapter.ts"
import {
  makeSandboxTransport,
  type SandboxTonTransport,
} from "../../adapters/chains/ton/sandbox-transport.ts"
import { summarizeMessage, walletOf } from "../../adapters/chains/ton/transaction.ts"
import type { TonTransport } from "../../adapters/chains/ton/transport.ts"
import { deriveAddress, deriveSigningKey, type WalletKeyRef } from "../../domain/custody/derive.ts"
import type { ChainAdapter, SignedTransfer, TransferIntent } from "../../src/ports/chain.ts"

const seed = new Uint8Array(64).fill(7)
const native = { kind: "native" } as const
const wallet = (wallet_index: number): WalletKeyRef => ({ chain: "ton", tenant_index: 0, wallet_index })
const addressOf = (wallet_index: number) => deriveAddress(seed, wallet(wallet_index))
const keyOf = (wallet_index: number) => deriveSigningKey(seed, wallet(wallet_index))
const run = <A, E>(effect: Effect.Effect<A, E>) => Effect.runPromise(effect)
/** Storage fees an uninitialised receiver may pay between two test transfers (nanotons). */
const storage_fee_max = 1_000n
const runExit = <A, E>(effect: Effect.Effect<A, E>) => Effect.runPromiseExit(effect)
const failureTag = <A, E extends { readonly _tag: string }>(exit: Exit.Exit<A, E>) =>
  Exit.isFailure(exit)
    ? Option.getOrNull(Option.map(Cause.findErrorOption(exit.cause), (error) => error._tag))
    : null
const rawBytes = (signed: SignedTransfer) => Buffer.from(signed.raw.slice(2), "hex")

describe("TON adapter on @ton/sandbox", () => {
  let blockchain: Blockchain
  let transport: TonTransport
  let adapter: ChainAdapter
  const sender = addressOf(0)
  const receiver = addressOf(1)

  beforeAll(async () => {
    blockchain = await Blockchain.create()
    transport = makeSandboxTransport(blockchain)
    adapter = makeTonAdapter(transport)
    const treasury = await blockchain.treasury("funder")
    await treasury.send({ to: Address.parse(sender), value: toNano("10"), bounce: false })
  })

  const nativeTo = (to: string, amount: bigint): TransferIntent => ({ asset: native, to, amount })
  const balanceOf = (address: string) => run(adapter.balance(address, native))

  test("custody's derived address is the address of @ton/ton's v4R2 wallet for the same key", () => {
    const address = walletOf(keyOf(0).public_key).address
    expect(address.toString({ urlSafe: true, bounceable: false, testOnly: false })).toBe(sender)
  })

  test("a funded wallet not yet deployed: its fee bound is positive, its balance is the deposit", async () => {
    expect((await transport.account(Address.parse(sender))).status).toBe("uninit")
    expect(await balanceOf(sender)).toBe(toNano("10"))
    expect(await run(adapter.estimateTransferFee(sender, nativeTo(receiver, toNano("1"))))).toBeGreaterThan(
      0n,
    )
  })

  test("the first transfer deploys the wallet (StateInit at seqno 0) and lands with its proof", async () => {
    const estimate = await run(adapter.estimateTransferFee(sender, nativeTo(receiver, toNano("2"))))
    const signed = await run(adapter.signTransfer(keyOf(0), nativeTo(receiver, toNano("2"))))
    expect(signed.nonce).toBe(0)
    expect(signed.from).toBe(sender)
    expect(signed.tx_hash).toMatch(/^[0-9a-f]{64}$/)
    const root = summarizeMessage(rawBytes(signed))?.message
    expect(root && loadMessage(root.beginParse()).init).toBeTruthy()

    expect(await run(adapter.broadcast(signed.raw))).toEqual({ tx_hash: signed.tx_hash })
    const status = await run(adapter.transactionStatus(signed.tx_hash))
    expect(status.status).toBe("finalized")
    if (status.status !== "finalized") return
    expect(status.proof).toMatchObject({ tx_hash: signed.tx_hash, log_index: null, confirmations: 1 })
    expect(status.proof.block_number).toBeGreaterThan(0n)
    expect(status.proof.block_hash).toMatch(/^[0-9a-f]{64}$/)

    expect((await transport.account(Address.parse(sender))).status).toBe("active")
    expect(await transport.getSeqno(Address.parse(sender))).toBe(1)
    expect(await balanceOf(receiver)).toBe(toNano("2"))
    const fee_paid = toNano("10") - toNano("2") - (await balanceOf(sender))
    expect(fee_paid).toBeGreaterThan(0n)
    expect(fee_paid).toBeLessThanOrEqual(signed.fee_max)
    expect(fee_paid).toBeLessThanOrEqual(estimate)
  })

  test("rebroadcasting the same message succeeds and moves nothing: the seqno is spent", async () => {
    const signed = await run(adapter.signTransfer(keyOf(0), nativeTo(receiver, toNano("1"))))
    expect(signed.nonce).toBe(1)
    expect(summarizeMessage(rawBytes(signed))?.message.refs.length).toBe(1)
    await run(adapter.broadcast(signed.raw))
    const sender_after = await balanceOf(sender)
    const receiver_after = await balanceOf(receiver)

    expect(await run(adapter.broadcast(signed.raw))).toEqual({ tx_hash: signed.tx_hash })
    expect(await transport.send(summarizeMessage(rawBytes(signed))?.message ?? expect.fail())).toMatchObject({
      kind: "rejected",
    })
    expect(await balanceOf(sender)).toBe(sender_after)
    expect(await balanceOf(receiver)).toBe(receiver_after)
    expect(await transport.getSeqno(Address.parse(sender))).toBe(2)
  })

  test("a deployed wallet's fee estimate comes from emulation and covers the fee paid", async () => {
    const intent = nativeTo(receiver, toNano("0.5"))
    const estimate = await run(adapter.estimateTransferFee(sender, intent))
    const before = await balanceOf(sender)
    const signed = await run(adapter.signTransfer(keyOf(0), intent))
    await run(adapter.broadcast(signed.raw))
    const fee_paid = before - toNano("0.5") - (await balanceOf(sender))
    expect(fee_paid).toBeGreaterThan(0n)
    expect(estimate).toBeGreaterThanOrEqual(fee_paid)
    expect(estimate).toBeLessThan(fee_paid * 2n)
  })

  test("a message that lands between the adapter's first read and its seqno read is a rebroadcast, not NonceTooLow", async () => {
    const bystander = addressOf(9)
    const signed = await run(adapter.signTransfer(keyOf(0), nativeTo(bystander, toNano("0.05"))))
    await run(adapter.broadcast(signed.raw))
    // A worker restarted after the broadcast reads the wallet just before the message lands: its
    // first read finds nothing, and the seqno it reads next is already taken by this message.
    let reads = 0
    const lagging: TonTransport = new Proxy(transport, {
      get: (target, property, receiver) =>
        property === "landed"
          ? (...args: Parameters<TonTransport["landed"]>) =>
              reads++ === 0 ? Promise.resolve(null) : target.landed(...args)
          : Reflect.get(target, property, receiver),
    })
    const before = await balanceOf(bystander)
    expect(await run(makeTonAdapter(lagging).broadcast(signed.raw))).toEqual({ tx_hash: signed.tx_hash })
    expect(reads).toBe(2)
    expect(await balanceOf(bystander)).toBe(before)
  })

  test("a message past its valid_until by less than the transport's landing lag reads seen and is not called expired", async () => {
    const bystander = addressOf(9)
    const before = await balanceOf(bystander)
    const signed = await run(adapter.signTransfer(keyOf(0), nativeTo(bystander, toNano("0.05"))))
    const message = summarizeMessage(Buffer.from(signed.raw.slice(2), "hex"))
    if (message === null) throw new Error("a TON transfer's bytes are a wallet message")
    // As the production transport reads the chain: with a lag, so a message that landed just before
    // its valid_until may still be unseen some seconds after it.
    let now = message.valid_until + 5
    const lagging: TonTransport = new Proxy(transport, {
      get: (target, property, receiver) =>
        property === "landing_lag_seconds"
          ? 30
          : property === "now"
            ? () => Promise.resolve(now)
            : Reflect.get(target, property, receiver),
    })
    const late = makeTonAdapter(lagging)
    expect(failureTag(await runExit(late.broadcast(signed.raw)))).toBe("BroadcastRejected")
    expect((await run(late.transactionStatus(signed.tx_hash))).status).toBe("seen")
    now = message.valid_until + 30
    expect(failureTag(await runExit(late.broadcast(signed.raw)))).toBe("TransactionExpired")
    expect((await run(late.transactionStatus(signed.tx_hash))).status).toBe("dropped")
    expect(await balanceOf(bystander)).toBe(before)
  })

  test("two messages signed for one seqno: the second is refused as NonceTooLow and reads dropped", async () => {
    const first = await run(adapter.signTransfer(keyOf(0), nativeTo(receiver, toNano("0.1"))))
    const second = await run(adapter.signTransfer(keyOf(0), nativeTo(receiver, toNano("0.2"))))
    expect(second.nonce).toBe(first.nonce)
    expect(second.tx_hash).not.toBe(first.tx_hash)
    expect((await run(adapter.transactionStatus(second.tx_hash))).status).toBe("seen")
    await run(adapter.broadcast(first.raw))
    expect(failureTag(await runExit(adapter.broadcast(second.raw)))).toBe("NonceTooLow")
    expect((await run(adapter.transactionStatus(second.tx_hash))).status).toBe("dropped")
    expect((await run(adapter.transactionStatus(first.tx_hash))).status).toBe("finalized")
  })

  test("a sender without enough TON gets InsufficientFundsForFee before anything is sent", async () => {
    const receiver_balance = await balanceOf(receiver)
    const too_much = await runExit(adapter.signTransfer(keyOf(1), nativeTo(sender, receiver_balance)))
    expect(failureTag(too_much)).toBe("InsufficientFundsForFee")
    const empty = await runExit(adapter.signTransfer(keyOf(5), nativeTo(sender, toNano("0.1"))))
    expect(failureTag(empty)).toBe("InsufficientFundsForFee")
    expect(await balanceOf(receiver)).toBe(receiver_balance)
  })

  test("bad input is typed: an address in another format, a token the sender holds none of", async () => {
    const bad = await runExit(adapter.balance("0x9858EfFD232B4033E47d90003D41EC34EcaEda94", native))
    expect(failureTag(bad)).toBe("InvalidChainAddress")
    const token = { asset: { kind: "token", contract: receiver }, to: receiver, amount: 1n } as const
    expect(failureTag(await runExit(adapter.signTransfer(keyOf(0), token)))).toBe("TransferWouldRevert")
    expect(failureTag(await runExit(adapter.broadcast("0x1234")))).toBe("BroadcastRejected")
  })

  test("incoming transfers to watched addresses are listed once each, in lt order", async () => {
    const to_block = await run(adapter.blockNumber())
    const query = {
      contract: ton_native_contract,
      addresses: [receiver, addressOf(5)],
      from_block: 0n,
      to_block,
    }
    const incoming = await run(adapter.incomingTransfers(query))
    expect(incoming.map((transfer) => transfer.amount)).toEqual([
      toNano("2"),
      toNano("1"),
      toNano("0.5"),
      toNano("0.1"),
    ])
    for (const transfer of incoming) expect(transfer).toMatchObject({ from: sender, to: receiver })
    const hashes = new Set(incoming.map((transfer) => transfer.proof.block_hash))
    expect(hashes.size).toBe(incoming.length)
    const none = await run(
      adapter.incomingTransfers({ ...query, from_block: to_block + 1n, to_block: to_block + 2n }),
    )
    expect(none).toEqual([])
  })

  test("a message past its valid_until reads dropped and is refused on broadcast", async () => {
    const signed = await run(adapter.signTransfer(keyOf(0), nativeTo(receiver, toNano("0.1"))))
    blockchain.now = Math.floor(Date.now() / 1000) + message_ttl_seconds + 60
    expect((await run(adapter.transactionStatus(signed.tx_hash))).status).toBe("dropped")
    expect(failureTag(await runExit(adapter.broadcast(signed.raw)))).toBe("TransactionExpired")
  })
})

describe("TON adapter on a sandbox transport that holds messages for blocks", () => {
  let blockchain: Blockchain
  let transport: SandboxTonTransport
  let adapter: ChainAdapter
  const sender = addressOf(20)
  const receiver = addressOf(21)

  beforeAll(async () => {
    blockchain = await Blockchain.create()
    transport = makeSandboxTransport(blockchain, { hold_messages: true })
    adapter = makeTonAdapter(transport)
    const treasury = await blockchain.treasury("funder")
    await treasury.send({ to: Address.parse(sender), value: toNano("10"), bounce: false })
  })

  const nativeTo = (to: string, amount: bigint): TransferIntent => ({ asset: native, to, amount })
  const balanceOf = (address: string) => run(adapter.balance(address, native))
  const statusOf = async (signed: SignedTransfer) =>
    (await run(adapter.transactionStatus(signed.tx_hash))).status
  /**
   * The receiver (an uninitialised account) pays storage fees by the seconds since its last
   * transaction, a nanoton or so here: its balance grows by the amount less at most that.
   */
  const expectReceived = async (before: bigint, amount: bigint) => {
    const received = (await balanceOf(receiver)) - before
    expect(received).toBeLessThanOrEqual(amount)
    expect(received).toBeGreaterThanOrEqual(amount - storage_fee_max)
  }

  test("a sent message is seen, moves nothing until its block, and lands in it", async () => {
    const signed = await run(adapter.signTransfer(keyOf(20), nativeTo(receiver, toNano("1"))))
    expect(await run(adapter.broadcast(signed.raw))).toEqual({ tx_hash: signed.tx_hash })
    expect(await statusOf(signed)).toBe("seen")
    expect(await balanceOf(receiver)).toBe(0n)
    await transport.produceBlock(1)
    expect(await statusOf(signed)).toBe("finalized")
    expect(await balanceOf(receiver)).toBe(toNano("1"))
  })

  test("a message sent twice before its block runs once", async () => {
    const before = await balanceOf(receiver)
    const signed = await run(adapter.signTransfer(keyOf(20), nativeTo(receiver, toNano("0.5"))))
    await run(adapter.broadcast(signed.raw))
    await run(adapter.broadcast(signed.raw))
    await transport.produceBlock(1)
    expect(await statusOf(signed)).toBe("finalized")
    await expectReceived(before, toNano("0.5"))
    expect(await transport.getSeqno(Address.parse(sender))).toBe(signed.nonce + 1)
  })

  test("the seqno is checked at execution: the next seqno, sent first, lands in the block after", async () => {
    const before = await balanceOf(receiver)
    const first = await run(adapter.signTransfer(keyOf(20), nativeTo(receiver, toNano("0.1"))))
    const second = await run(
      adapter.signTransfer(keyOf(20), nativeTo(receiver, toNano("0.2")), { nonce: first.nonce + 1 }),
    )
    await run(adapter.broadcast(second.raw))
    await run(adapter.broadcast(first.raw))
    expect([await statusOf(first), await statusOf(second)]).toEqual(["seen", "seen"])
    await transport.produceBlock(1)
    expect([await statusOf(first), await statusOf(second)]).toEqual(["finalized", "seen"])
    await transport.produceBlock(1)
    expect(await statusOf(second)).toBe("finalized")
    await expectReceived(before, toNano("0.3"))
  })

  test("a message whose valid_until passes before its block never lands and reads dropped", async () => {
    const before = await balanceOf(sender)
    const signed = await run(adapter.signTransfer(keyOf(20), nativeTo(receiver, toNano("0.1"))))
    const valid_until = summarizeMessage(rawBytes(signed))?.valid_until ?? expect.fail()
    blockchain.now = valid_until - 1
    try {
      await run(adapter.broadcast(signed.raw))
      expect(await statusOf(signed)).toBe("seen")
      await transport.produceBlock(1)
      expect(blockchain.now).toBe(valid_until)
      expect(await statusOf(signed)).toBe("dropped")
      expect(await transport.landed(Address.parse(sender), signed.tx_hash)).toBeNull()
      expect(failureTag(await runExit(adapter.broadcast(signed.raw)))).toBe("TransactionExpired")
      expect(await balanceOf(sender)).toBe(before)
    } finally {
      blockchain.now = undefined
    }
  })
})
