/**
 * Goal: the TON adapter moves jettons (the sandbox's USDT, the platform's own FunC jetton) from
 * custody's v4R2 wallets on the real TVM (@ton/sandbox, in process): the message it signs carries
 * TEP-74's `transfer` to the sender's jetton wallet, whose address it computes as the minter does;
 * a transfer is `finalized` only once the recipient's jetton wallet credited it, with that credit as
 * its proof; a frozen recipient makes it `reverted` with the sender's jettons restored; a sender
 * without TON or jettons is refused before signing; an expired message is dropped; a landed one
 * stays finalized however busy its jetton wallets are since; a rebroadcast
 * changes nothing; deposits and balances are read from the owners' jetton wallets.
 */
import { Address, beginCell, Cell, contractAddress, loadMessage, loadMessageRelaxed, toNano } from "@ton/core"
import type { BlockchainTransaction } from "@ton/sandbox"
import { Cause, Effect, Exit, Option } from "effect"
import { beforeAll, describe, expect, test } from "vitest"
import {
  jetton_attached_nanotons,
  jetton_forward_nanotons,
  makeTonAdapter,
  message_ttl_seconds,
} from "../../adapters/chains/ton/adapter.ts"
import {
  jetton_op,
  jetton_wallet_code,
  jettonMintBody,
  jettonMinterInit,
  jettonWalletAddress,
  readJettonTransfer,
} from "../../adapters/chains/ton/jetton.ts"
import { summarizeMessage } from "../../adapters/chains/ton/transaction.ts"
import type { TonTransport } from "../../adapters/chains/ton/transport.ts"
import { deriveAddress, deriveSigningKey, type WalletKeyRef } from "../../domain/custody/derive.ts"
import { compileTonContract } from "../../scripts/compile-ton-contracts.ts"
import { startTonSandboxChain, type TonSandboxChain } from "../../src/chains/ton-sandbox.ts"
import type { ChainAsset, SignedTransfer, TransferIntent } from "../../src/ports/chain.ts"

const seed = new Uint8Array(64).fill(9)
const wallet = (wallet_index: number): WalletKeyRef => ({ chain: "ton", tenant_index: 0, wallet_index })
const addressOf = (wallet_index: number) => deriveAddress(seed, wallet(wallet_index))
const keyOf = (wallet_index: number) => deriveSigningKey(seed, wallet(wallet_index))
const run = <A, E>(effect: Effect.Effect<A, E>) => Effect.runPromise(effect)
const runExit = <A, E>(effect: Effect.Effect<A, E>) => Effect.runPromiseExit(effect)
const failureTag = <A, E extends { readonly _tag: string }>(exit: Exit.Exit<A, E>) =>
  Exit.isFailure(exit)
    ? Option.getOrNull(Option.map(Cause.findErrorOption(exit.cause), (error) => error._tag))
    : null
const usdt = (whole: number) => BigInt(whole) * 1_000_000n
const native = { kind: "native" } as const

/** The internal message inside a signed wallet message: where it goes, what it carries. */
function innerMessage(signed: SignedTransfer) {
  const summary = summarizeMessage(Buffer.from(signed.raw.slice(2), "hex"))
  const body = summary === null ? null : loadMessage(summary.message.beginParse()).body.beginParse()
  body?.skip(512 + 32 * 3 + 8 + 8)
  const inner = body?.loadRef()
  return inner === undefined ? null : loadMessageRelaxed(inner.beginParse())
}

describe("TON adapter: jetton transfers on @ton/sandbox", () => {
  let ton: TonSandboxChain
  let token: ChainAsset
  let minter: Address
  const sender = addressOf(0)
  const recipient = addressOf(1)
  const frozen = addressOf(2)
  const no_ton = addressOf(3)

  const jettons = (address: string) => run(ton.adapter.balance(address, token))
  const tonOf = (address: string) => run(ton.adapter.balance(address, native))
  const to = (address: string, amount: bigint): TransferIntent => ({ asset: token, to: address, amount })
  const landedCredit = async (owner: string) => {
    const wallet = jettonWalletAddress(Address.parse(owner), minter)
    const history = await ton.transport.transactionsOf(wallet, 0n, await ton.transport.newestLt(), 100)
    return history.at(-1)
  }

  beforeAll(async () => {
    ton = await startTonSandboxChain({ block_time_ms: 0 })
    const contract = ton.contracts.get("USDT")
    if (contract === undefined) throw new Error("USDT is deployed")
    token = { kind: "token", contract }
    minter = Address.parse(contract)
    await ton.fund(sender, "USDT", usdt(100))
  })

  test("balances: the funded owner's jetton wallet holds the mint; an owner without one holds 0", async () => {
    expect(await jettons(sender)).toBe(usdt(100))
    expect(await jettons(recipient)).toBe(0n)
    expect(await tonOf(sender)).toBeGreaterThan(0n)
  })

  test("the jetton wallet address computed locally is the minter's get_wallet_address", async () => {
    for (const owner of [sender, recipient]) {
      const args = [
        { type: "slice", cell: beginCell().storeAddress(Address.parse(owner)).endCell() },
      ] as const
      const answer = await ton.transport.runGetMethod(minter, "get_wallet_address", [...args])
      expect(answer?.readAddress().equals(jettonWalletAddress(Address.parse(owner), minter))).toBe(true)
      // The adapter's answer for the port (`tokenAccountOf`) is the same account.
      const account = await run(
        ton.adapter.tokenAccountOf?.(owner, minter.toString()) ?? Effect.die("absent"),
      )
      expect(Address.parse(account).equals(jettonWalletAddress(Address.parse(owner), minter))).toBe(true)
    }
    const bad = await runExit(
      ton.adapter.tokenAccountOf?.("0x1234", minter.toString()) ?? Effect.die("absent"),
    )
    expect(failureTag(bad)).toBe("InvalidChainAddress")
  })

  test("the signed message sends TEP-74's transfer to the sender's jetton wallet", async () => {
    const signed = await run(ton.adapter.signTransfer(keyOf(0), to(recipient, usdt(1))))
    const inner = innerMessage(signed)
    if (inner === null || inner.info.type !== "internal") return expect.fail("an internal message")
    expect(inner.info.dest.equals(jettonWalletAddress(Address.parse(sender), minter))).toBe(true)
    expect(inner.info.bounce).toBe(true)
    expect(inner.info.value.coins).toBe(jetton_attached_nanotons)
    expect(inner.body.beginParse().preloadUint(32)).toBe(jetton_op.transfer)
    const transfer = readJettonTransfer(inner.body)
    expect(transfer?.amount).toBe(usdt(1))
    expect(transfer?.destination.equals(Address.parse(recipient))).toBe(true)
    expect(transfer?.response_destination.equals(Address.parse(sender))).toBe(true)
    expect(transfer?.forward_ton_amount).toBe(jetton_forward_nanotons)
    expect(signed.fee_max).toBeGreaterThan(jetton_attached_nanotons)
  })

  test("a transfer lands finalized, proven by the recipient jetton wallet's credit; TON spent within the bound", async () => {
    const estimate = await run(ton.adapter.estimateTransferFee(sender, to(recipient, usdt(10))))
    const ton_before = await tonOf(sender)
    const signed = await run(ton.adapter.signTransfer(keyOf(0), to(recipient, usdt(10))))
    expect(signed.nonce).toBe(0)
    expect(await run(ton.adapter.broadcast(signed.raw))).toEqual({ tx_hash: signed.tx_hash })

    const status = await run(ton.adapter.transactionStatus(signed.tx_hash))
    expect(status.status).toBe("finalized")
    if (status.status !== "finalized") return
    const credit = await landedCredit(recipient)
    expect(status.proof).toMatchObject({
      tx_hash: signed.tx_hash,
      block_number: credit?.lt,
      block_hash: credit?.hash,
      log_index: 0,
      confirmations: 1,
    })
    // What src/transfers/verify.ts reads: the credit at the proof's lt, under the transfer's tx_hash.
    const logs = await run(
      ton.adapter.incomingTransfers({
        contract: token.kind === "token" ? token.contract : "",
        addresses: [recipient],
        from_block: status.proof.block_number,
        to_block: status.proof.block_number,
      }),
    )
    expect(logs).toEqual([
      {
        contract: token.kind === "token" ? token.contract : "",
        from: sender,
        to: recipient,
        amount: usdt(10),
        proof: status.proof,
      },
    ])
    expect(await jettons(sender)).toBe(usdt(90))
    expect(await jettons(recipient)).toBe(usdt(10))
    const spent = ton_before - (await tonOf(sender))
    expect(spent).toBeGreaterThan(0n)
    expect(spent).toBeLessThan(jetton_attached_nanotons)
    expect(spent).toBeLessThanOrEqual(signed.fee_max)
    expect(spent).toBeLessThanOrEqual(estimate)
  })

  test("query ids differ between transfers of one sender", async () => {
    const first = await run(ton.adapter.signTransfer(keyOf(0), to(recipient, usdt(1))))
    await run(ton.adapter.broadcast(first.raw))
    const second = await run(ton.adapter.signTransfer(keyOf(0), to(recipient, usdt(1))))
    expect(second.nonce).toBe(first.nonce + 1)
    const idOf = (signed: SignedTransfer) => {
      const inner = innerMessage(signed)
      return inner === null ? null : readJettonTransfer(inner.body)?.query_id
    }
    expect(idOf(first)).not.toBe(idOf(second))
  })

  test("rebroadcasting a landed transfer succeeds and moves nothing", async () => {
    const signed = await run(ton.adapter.signTransfer(keyOf(0), to(recipient, usdt(5))))
    await run(ton.adapter.broadcast(signed.raw))
    expect(await jettons(recipient)).toBe(usdt(16))
    expect(await run(ton.adapter.broadcast(signed.raw))).toEqual({ tx_hash: signed.tx_hash })
    expect(await jettons(recipient)).toBe(usdt(16))
    expect(await jettons(sender)).toBe(usdt(84))
    expect((await run(ton.adapter.transactionStatus(signed.tx_hash))).status).toBe("finalized")
  })

  test("while the jetton messages are still travelling the transfer reads confirmed, then finalized", async () => {
    const signed = await run(ton.adapter.signTransfer(keyOf(0), to(recipient, usdt(2))))
    const message = summarizeMessage(Buffer.from(signed.raw.slice(2), "hex"))?.message
    if (message === undefined) return expect.fail("a wallet message")
    const steps = await ton.blockchain.sendMessageIter(message)
    const step = async (count: number) => {
      const transactions: Array<BlockchainTransaction> = []
      for (let index = 0; index < count; index++) {
        const next = await steps.next()
        if (next.done === true) break
        transactions.push(next.value)
      }
      return { transactions, events: [], externals: [] }
    }
    // The sender's wallet and the sender's jetton wallet run; the credit has not happened yet.
    await ton.transport.apply(() => step(2))
    const travelling = await run(ton.adapter.transactionStatus(signed.tx_hash))
    expect(travelling.status).toBe("confirmed")
    expect(await jettons(recipient)).toBe(usdt(16))
    await ton.transport.apply(() => step(10))
    expect((await run(ton.adapter.transactionStatus(signed.tx_hash))).status).toBe("finalized")
    expect(await jettons(recipient)).toBe(usdt(18))
  })

  test("to a frozen recipient: reverted, proven by the refusing wallet's transaction; the jettons come back", async () => {
    await ton.freeze(frozen, "USDT", true)
    const signed = await run(ton.adapter.signTransfer(keyOf(0), to(frozen, usdt(7))))
    await run(ton.adapter.broadcast(signed.raw))
    const status = await run(ton.adapter.transactionStatus(signed.tx_hash))
    expect(status.status).toBe("reverted")
    if (status.status !== "reverted") return
    const refusal = await landedCredit(frozen)
    expect(refusal?.failed).toBe(true)
    expect(status.proof).toMatchObject({
      block_number: refusal?.lt,
      block_hash: refusal?.hash,
      log_index: null,
    })
    expect(await jettons(frozen)).toBe(0n)
    expect(await jettons(sender)).toBe(usdt(82))
    await expect(ton.fund(frozen, "USDT", 1n)).rejects.toThrow(/refused/)
  })

  test("refused before signing: a sender without TON, without enough jettons, or frozen", async () => {
    const gift = await run(ton.adapter.signTransfer(keyOf(0), to(no_ton, usdt(3))))
    await run(ton.adapter.broadcast(gift.raw))
    expect(await jettons(no_ton)).toBe(usdt(3))
    expect(await tonOf(no_ton)).toBe(jetton_forward_nanotons)
    const poor = await runExit(ton.adapter.signTransfer(keyOf(3), to(recipient, usdt(1))))
    expect(failureTag(poor)).toBe("InsufficientFundsForFee")
    const short = await runExit(ton.adapter.signTransfer(keyOf(0), to(recipient, usdt(1_000))))
    expect(failureTag(short)).toBe("TransferWouldRevert")
    await ton.fund(addressOf(4), "USDT", usdt(1))
    await ton.freeze(addressOf(4), "USDT", true)
    const frozen_sender = await runExit(ton.adapter.signTransfer(keyOf(4), to(recipient, usdt(1))))
    expect(failureTag(frozen_sender)).toBe("TransferWouldRevert")
    // A jetton wallet as the destination (its own or another owner's): the jettons would go to a
    // jetton wallet that contract owns, lost. Refused, naming the owner to send to instead.
    for (const owner of [recipient, sender]) {
      const jetton_wallet = jettonWalletAddress(Address.parse(owner), minter)
      for (const spelling of [jetton_wallet.toString(), jetton_wallet.toRawString()]) {
        const lost = await runExit(ton.adapter.signTransfer(keyOf(0), to(spelling, usdt(1))))
        expect(failureTag(lost)).toBe("TransferWouldRevert")
        const error = Exit.isFailure(lost) ? Option.getOrNull(Cause.findErrorOption(lost.cause)) : null
        const reason = error?._tag === "TransferWouldRevert" ? error.reason : undefined
        expect(reason).toContain("is a jetton wallet")
        expect(reason).toContain(Address.parse(owner).toString({ bounceable: false }))
      }
    }
    const bad_minter = await runExit(ton.adapter.balance(sender, { kind: "token", contract: "0xabc" }))
    expect(failureTag(bad_minter)).toBe("InvalidChainAddress")
    expect(await jettons(no_ton)).toBe(usdt(3))
  })

  test("incoming transfers: every credit of the watched owners' jetton wallets, once, in lt order", async () => {
    const to_block = await run(ton.adapter.blockNumber())
    const query = { contract: token.kind === "token" ? token.contract : "", from_block: 0n, to_block }
    const incoming = await run(ton.adapter.incomingTransfers({ ...query, addresses: [recipient, frozen] }))
    expect(incoming.map((transfer) => transfer.amount)).toEqual([usdt(10), usdt(1), usdt(5), usdt(2)])
    for (const transfer of incoming) {
      expect(transfer).toMatchObject({ contract: query.contract, from: sender, to: recipient })
      expect(transfer.proof.log_index).toBe(0)
    }
    const minted = await run(ton.adapter.incomingTransfers({ ...query, addresses: [sender] }))
    expect(minted).toHaveLength(1)
    expect(minted[0]?.amount).toBe(usdt(100))
    expect(Address.parse(minted[0]?.from ?? "").equals(minter)).toBe(true)
    const later = { ...query, from_block: to_block + 1n, to_block: to_block + 2n }
    expect(await run(ton.adapter.incomingTransfers({ ...later, addresses: [recipient] }))).toEqual([])
  })

  test("another jetton's wallet code: wallets are asked of its minter, and transfers work the same", async () => {
    const foreign_code = Cell.fromBase64((await compileTonContract("jetton-wallet", 1)).code_boc)
    expect(foreign_code.equals(jetton_wallet_code)).toBe(false)
    const admin = await ton.blockchain.treasury("foreign-admin")
    const init = jettonMinterInit(admin.address, beginCell().endCell(), foreign_code)
    const foreign = contractAddress(0, init)
    await ton.transport.apply(() => admin.send({ to: foreign, value: toNano("1"), init }))
    const body = jettonMintBody({
      query_id: 0n,
      owner: Address.parse(sender),
      amount: usdt(4),
      forward_ton_amount: 0n,
      response_destination: admin.address,
    })
    await ton.transport.apply(() => admin.send({ to: foreign, value: toNano("0.1"), body }))
    const asset = { kind: "token", contract: foreign.toString() } as const
    expect(await run(ton.adapter.balance(sender, asset))).toBe(usdt(4))

    const signed = await run(ton.adapter.signTransfer(keyOf(0), { asset, to: recipient, amount: usdt(3) }))
    const inner = innerMessage(signed)
    const local_guess = jettonWalletAddress(Address.parse(sender), foreign)
    expect(inner?.info.type === "internal" && inner.info.dest.equals(local_guess)).toBe(false)
    // The port's `tokenAccountOf` asks this minter too: the account the transfer is sent from.
    const account = await run(
      ton.adapter.tokenAccountOf?.(sender, foreign.toString()) ?? Effect.die("absent"),
    )
    expect(inner?.info.type === "internal" && inner.info.dest.equals(Address.parse(account))).toBe(true)
    await run(ton.adapter.broadcast(signed.raw))
    expect((await run(ton.adapter.transactionStatus(signed.tx_hash))).status).toBe("finalized")
    expect(await run(ton.adapter.balance(recipient, asset))).toBe(usdt(3))
    const to_block = await run(ton.adapter.blockNumber())
    const query = { contract: asset.contract, addresses: [recipient], from_block: 0n, to_block }
    const incoming = await run(ton.adapter.incomingTransfers(query))
    expect(incoming.map((transfer) => [transfer.amount, transfer.proof.tx_hash])).toEqual([
      [usdt(3), signed.tx_hash],
    ])
  })

  test("to an ordinary wallet already deployed (it has sent): signed and landed, not refused as a jetton wallet", async () => {
    // Asked `get_wallet_data`, a deployed wallet exits 11 (no such method); @ton/sandbox throws
    // that, and every transfer to such a wallet failed before signing, for good.
    const deployed = addressOf(7)
    await ton.fund(deployed, "USDT", usdt(1))
    const first = await run(ton.adapter.signTransfer(keyOf(7), to(sender, usdt(1))))
    await run(ton.adapter.broadcast(first.raw))
    expect((await run(ton.adapter.transactionStatus(first.tx_hash))).status).toBe("finalized")
    expect((await ton.transport.account(Address.parse(deployed))).status).toBe("active")
    const signed = await run(ton.adapter.signTransfer(keyOf(0), to(deployed, usdt(1))))
    await run(ton.adapter.broadcast(signed.raw))
    expect((await run(ton.adapter.transactionStatus(signed.tx_hash))).status).toBe("finalized")
    expect(await jettons(deployed)).toBe(usdt(1))
  })

  test("a transfer past its valid_until reads dropped and is refused on broadcast", async () => {
    const signed = await run(ton.adapter.signTransfer(keyOf(0), to(recipient, usdt(1))))
    ton.blockchain.now = Math.floor(Date.now() / 1000) + message_ttl_seconds + 60
    expect((await run(ton.adapter.transactionStatus(signed.tx_hash))).status).toBe("dropped")
    expect(failureTag(await runExit(ton.adapter.broadcast(signed.raw)))).toBe("TransactionExpired")
    expect(await jettons(recipient)).toBe(usdt(18))
  })

  test("a landed transfer stays finalized after its jetton wallets had many newer transactions (a transport that looks at the newest only when not told since when)", async () => {
    // As the production transport does without `since_unix`: the newest 20 transactions only.
    const newest_only: TonTransport = {
      ...ton.transport,
      landed: async (address, message_hash, since_unix) => {
        if (since_unix !== undefined) return await ton.transport.landed(address, message_hash, since_unix)
        const all = await ton.transport.transactionsOf(address, 0n, await ton.transport.newestLt(), 1_000_000)
        return all.slice(-20).find((landed) => landed.in_message_hash === message_hash) ?? null
      },
    }
    const adapter = makeTonAdapter(newest_only)
    const busy = addressOf(6)
    const signed = await run(adapter.signTransfer(keyOf(0), to(busy, usdt(1))))
    await run(adapter.broadcast(signed.raw))
    expect((await run(adapter.transactionStatus(signed.tx_hash))).status).toBe("finalized")
    // A busy deposit address: 25 more credits to its jetton wallet.
    for (let credit = 0; credit < 25; credit++) await ton.fund(busy, "USDT", 1n)
    expect((await run(adapter.transactionStatus(signed.tx_hash))).status).toBe("finalized")
    expect(await jettons(busy)).toBe(usdt(1) + 25n)
  })
})
