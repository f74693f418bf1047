// Proves that jetton transfers into custody addresses on the sandbox's TON chain (@ton/sandbox in
// process, the platform jetton as its USDT) are credited exactly once, with real parts (PostgreSQL,
// the ledger writer with the deposit hook), when the sender is an outside account whose wallet
// message this process never signed nor broadcast (its own software, another adapter on the same
// chain): on the first scan after the transfer lands (TON is final at depth 1); once, however often
// and by however many watchers the chain is scanned; each of several transfers batched in one
// wallet message at its own place; one a contract started (relayed, three hops from a wallet
// message); across a watcher restart with a fresh adapter, and through a transport that cannot look
// a message up by hash; never for the faucet's mints (internal transfers from the minter), another
// jetton's transfer, or a transfer to an address that is not custody's.
import fs from "node:fs"
import path from "node:path"
import {
  Address,
  beginCell,
  Cell,
  contractAddress,
  external,
  internal,
  SendMode,
  storeMessage,
  toNano,
} from "@ton/core"
import { keyPairFromSeed } from "@ton/crypto"
import { compileFunc } from "@ton-community/func-js"
import { Effect } from "effect"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { makeTonAdapter } from "../../adapters/chains/ton/adapter.ts"
import {
  jettonMintBody,
  jettonMinterInit,
  jettonTransferBody,
  jettonWalletAddress,
} from "../../adapters/chains/ton/jetton.ts"
import { walletOf } from "../../adapters/chains/ton/transaction.ts"
import { deriveAddress, deriveSigningKey, type WalletKeyRef } from "../../domain/custody/derive.ts"
import type { Asset } from "../../domain/money/asset.ts"
import { startTonSandboxChain, type TonSandboxChain } from "../../src/chains/ton-sandbox.ts"
import type { WatchedChain } from "../../src/deposits/watcher.ts"
import type { ChainAdapter, ChainAsset } from "../../src/ports/chain.ts"
import { type DepositHarness, depositHarness } from "../support/deposits.ts"

const usdt: Asset = { code: "USDT@ton", symbol: "USDT", chain: "ton", decimals: 6 }
const seed = new Uint8Array(64).fill(11)
/** Custody's keys are the tenant's (index 7); outside accounts derive under another index. */
const custodyRef = (wallet_index: number): WalletKeyRef => ({ chain: "ton", tenant_index: 7, wallet_index })
const outsideRef = (wallet_index: number): WalletKeyRef => ({ chain: "ton", tenant_index: 8, wallet_index })
const outside = deriveAddress(seed, outsideRef(0))
/** The form in which the adapter names owners, and src/main.ts the ignored minters (`UQ...`). */
const friendly = (address: Address) => address.toString({ urlSafe: true, bounceable: false, testOnly: false })

let harness: DepositHarness
let ton: TonSandboxChain
let watched: WatchedChain
let usdt_minter: string
/** Another jetton of the platform's code, administered by someone else: not a watched token. */
let other_minter: Address
/** The outside sender's own software: another adapter on the same chain. */
let outsider: ChainAdapter

const run = <A, E>(effect: Effect.Effect<A, E>) => Effect.runPromise(effect)
const token = (contract: string): ChainAsset => ({ kind: "token", contract })

/** A custody wallet of the tenant on TON. */
const custodyWallet = async (index: number) => {
  const address = deriveAddress(seed, custodyRef(index))
  const wallet_id = `wal_ton_deposit_${index}`
  await harness.custodyWallet("ton", wallet_id, address, index)
  return { wallet_id, address }
}

/**
 * Sends `amount` of a jetton from the outside account to `to`, through the outside account's own
 * adapter; answers the message's hash and the recipient jetton wallet's crediting transaction.
 */
const sendFromOutside = async (to: string, amount: bigint, contract = usdt_minter) => {
  const key = deriveSigningKey(seed, outsideRef(0))
  const signed = await run(outsider.signTransfer(key, { asset: token(contract), to, amount }))
  await run(outsider.broadcast(signed.raw))
  const status = await run(outsider.transactionStatus(signed.tx_hash))
  if (status.status !== "finalized") throw new Error(`the outside transfer is ${status.status}`)
  return { tx_hash: signed.tx_hash, lt: status.proof.block_number, block_hash: status.proof.block_hash }
}

/**
 * Sends several jetton transfers in ONE wallet message of the outside account, as an exchange's
 * wallet batches its payouts (a v4 wallet carries up to four); answers the message's hash.
 */
const sendBatchFromOutside = async (payouts: ReadonlyArray<{ to: string; amount: bigint }>) => {
  const key = deriveSigningKey(seed, outsideRef(0))
  const wallet = walletOf(key.public_key)
  const owner = Address.parse(outside)
  const seqno = (await ton.transport.getSeqno(wallet.address)) ?? 0
  const messages = payouts.map((payout, index) =>
    internal({
      to: jettonWalletAddress(owner, Address.parse(usdt_minter)),
      value: toNano("0.05"),
      bounce: true,
      body: jettonTransferBody({
        query_id: BigInt(seqno * 10 + index),
        amount: payout.amount,
        destination: Address.parse(payout.to),
        response_destination: owner,
        forward_ton_amount: 1n,
      }),
    }),
  )
  const body = await wallet.createTransfer({
    seqno,
    secretKey: keyPairFromSeed(Buffer.from(key.exposeSecret())).secretKey,
    messages,
    sendMode: SendMode.PAY_GAS_SEPARATELY + SendMode.IGNORE_ERRORS,
  })
  const message = beginCell()
    .store(storeMessage(external({ to: wallet.address, init: seqno === 0 ? wallet.init : null, body })))
    .endCell()
  expect(await ton.transport.send(message)).toEqual({ kind: "accepted" })
  return message.hash().toString("hex")
}

/**
 * A contract that owns jettons and moves them when asked: it forwards the message body's reference
 * to the address the body names, with the value it received. A jetton transfer it starts reaches
 * custody three hops after a wallet message (caller's wallet, relay, relay's jetton wallet), so its
 * chain cannot be walked back to one in two hops.
 */
const relay_source = `#pragma version >=0.4.0;
() recv_internal(int msg_value, cell in_msg_full, slice in_msg_body) impure {
  if (slice_empty?(in_msg_body)) { return (); }
  slice to = in_msg_body~load_msg_addr();
  cell body = in_msg_body~load_ref();
  send_raw_message(begin_cell()
    .store_uint(0x18, 6).store_slice(to).store_coins(0)
    .store_uint(1, 1 + 4 + 4 + 64 + 32 + 1 + 1).store_ref(body)
    .end_cell(), 64);
}
`

const deployRelay = async (): Promise<Address> => {
  const stdlib = fs.readFileSync(path.join(import.meta.dirname, "../../contracts/ton/stdlib.fc"), "utf8")
  const compiled = await compileFunc({
    targets: ["stdlib.fc", "relay.fc"],
    sources: { "stdlib.fc": stdlib, "relay.fc": relay_source },
  })
  if (compiled.status === "error") throw new Error(compiled.message)
  const init = { code: Cell.fromBase64(compiled.codeBoc), data: beginCell().endCell() }
  const relay = contractAddress(0, init)
  const deployer = await ton.blockchain.treasury("relay-deployer")
  await ton.transport.apply(() => deployer.send({ to: relay, value: toNano("2"), init }))
  return relay
}

const depositRows = async () =>
  (await harness.db.pool.query("select * from platform.chain_deposits where chain = 'ton'")).rows

beforeAll(async () => {
  harness = await depositHarness("ten_deposits_ton")
  // Blocks on demand: a transfer lands when sent, so each test decides when the watcher scans.
  ton = await startTonSandboxChain({ block_time_ms: 0 })
  usdt_minter = ton.contracts.get("USDT") ?? ""
  outsider = makeTonAdapter(ton.transport)
  await ton.fund(outside, "USDT", 1_000_000_000n)

  // Another jetton: deployed and minted to the outside account by an issuer of its own.
  const other_issuer = await ton.blockchain.treasury("other-jetton-issuer")
  const content = beginCell().storeUint(1, 8).storeStringTail("other:jetton").endCell()
  const init = jettonMinterInit(other_issuer.address, content)
  other_minter = contractAddress(0, init)
  await ton.transport.apply(() => other_issuer.send({ to: other_minter, value: toNano("1"), init }))
  const body = jettonMintBody({
    query_id: 0n,
    owner: Address.parse(outside),
    amount: 1_000_000_000n,
    forward_ton_amount: 0n,
    response_destination: other_issuer.address,
  })
  await ton.transport.apply(() => other_issuer.send({ to: other_minter, value: toNano("0.1"), body }))

  // As src/main.ts watches the sandbox chain: final at 1, the minters ignored, lt ranges unbounded.
  watched = {
    environment: "sandbox",
    chain: "ton",
    adapter: ton.adapter,
    tokens: [{ asset: usdt, contract: usdt_minter }],
    finality_confirmations: 1,
    ignore_from: new Set([friendly(Address.parse(usdt_minter))]),
    block_range_max: 1n << 62n,
  }
})

afterAll(async () => {
  await harness?.close()
  await ton?.stop()
})

describe("deposits (TON)", () => {
  it("credits an outside jetton transfer exactly once on the first scan after it lands, however many watchers scan", async () => {
    const wallet = await custodyWallet(1)
    const amount = 25_000_000n
    const watcher = harness.newWatcher([watched])
    const other = harness.newWatcher([watched], harness.newWriter())
    await watcher.scanOnce()
    const sent = await sendFromOutside(wallet.address, amount)

    // Two watchers of two processes and repeated scans, all at once: one credit.
    const reports = await Promise.all([
      watcher.scanOnce(),
      other.scanOnce(),
      watcher.scanOnce(),
      other.scanOnce(),
    ])
    expect(reports.flat().reduce((sum, report) => sum + report.credited, 0)).toBe(1)
    for (let i = 0; i < 3; i++) await Promise.all([watcher.scanOnce(), other.scanOnce()])

    const rows = await harness.rowsOf(wallet.wallet_id)
    expect(rows).toHaveLength(1)
    expect(rows[0]).toMatchObject({
      status: "credited",
      amount,
      token: "USDT@ton",
      token_contract: usdt_minter,
      from_address: outside,
      to_address: wallet.address,
      tx_hash: sent.tx_hash,
      log_index: 0,
      block_number: sent.lt,
      block_hash: sent.block_hash,
      confirmations: 1,
    })
    expect(await harness.balanceOf(wallet.wallet_id, usdt)).toBe(amount)
    expect(await harness.ledgerCreditsOf(wallet.wallet_id, usdt)).toBe(1)
    const events = await harness.outboxOf(wallet.wallet_id)
    expect(events).toHaveLength(1)
    expect(events[0]).toMatchObject({
      deposit_id: rows[0]?.deposit_id,
      chain: "ton",
      token: "USDT",
      amount: "25.00",
      from_address: outside,
      to_address: wallet.address,
      tx_hash: sent.tx_hash,
      block_number: sent.lt.toString(),
      block_hash: sent.block_hash,
      confirmations: 1,
    })
    await Promise.all([watcher.stop(), other.stop()])
    expect(harness.errors).toEqual([])
  })

  it("credits it on the first scan after it lands, not before", async () => {
    const wallet = await custodyWallet(2)
    const watcher = harness.newWatcher([watched])
    await watcher.scanOnce()
    expect(await harness.rowsOf(wallet.wallet_id)).toEqual([])
    await sendFromOutside(wallet.address, 3_000_000n)
    const [report] = await watcher.scanOnce()
    expect(report).toMatchObject({ outcome: "scanned", recorded: 1, credited: 1 })
    expect((await harness.rowsOf(wallet.wallet_id)).map((row) => row.status)).toEqual(["credited"])
    expect(await harness.balanceOf(wallet.wallet_id, usdt)).toBe(3_000_000n)
    await watcher.stop()
    expect(harness.errors).toEqual([])
  })

  it("does not take the faucet's mint, another jetton's transfer or a transfer elsewhere for a deposit", async () => {
    const wallet = await custodyWallet(3)
    const before = (await depositRows()).length
    const watcher = harness.newWatcher([watched])
    await ton.fund(wallet.address, "USDT", 9_000_000n)
    await sendFromOutside(wallet.address, 4_000_000n, other_minter.toString())
    await sendFromOutside(deriveAddress(seed, outsideRef(1)), 5_000_000n)
    await watcher.scanOnce()
    await watcher.scanOnce()

    // The jettons are on chain, and nothing of them is a deposit.
    expect(await run(ton.adapter.balance(wallet.address, token(usdt_minter)))).toBe(9_000_000n)
    expect(await run(ton.adapter.balance(wallet.address, token(other_minter.toString())))).toBe(4_000_000n)
    expect(await depositRows()).toHaveLength(before)
    expect(await harness.balanceOf(wallet.wallet_id, usdt)).toBe(0n)
    await watcher.stop()
    expect(harness.errors).toEqual([])
  })

  it("reads an outside message's status, final at its credit, in a process that never saw it", async () => {
    const wallet = await custodyWallet(5)
    const sent = await sendFromOutside(wallet.address, 7_000_000n)
    // A fresh adapter: it neither signed the message nor read the transfer; the chain finds it.
    const status = await run(makeTonAdapter(ton.transport).transactionStatus(sent.tx_hash))
    expect(status).toMatchObject({
      status: "finalized",
      proof: { tx_hash: sent.tx_hash, block_number: sent.lt, block_hash: sent.block_hash, confirmations: 1 },
    })
    // A message that never landed anywhere is still `dropped`.
    expect(await run(makeTonAdapter(ton.transport).transactionStatus("ab".repeat(32)))).toEqual({
      status: "dropped",
      tx_hash: "ab".repeat(32),
    })
  })

  it("credits it through a transport that cannot find a message by its hash alone (as API v2)", async () => {
    const wallet = await custodyWallet(6)
    const blind = makeTonAdapter({ ...ton.transport, landedMessage: async () => null })
    const watcher = harness.newWatcher([{ ...watched, adapter: blind }])
    await watcher.scanOnce()
    await sendFromOutside(wallet.address, 8_000_000n)
    await watcher.scanOnce()
    expect((await harness.rowsOf(wallet.wallet_id)).map((row) => row.status)).toEqual(["credited"])
    expect(await harness.balanceOf(wallet.wallet_id, usdt)).toBe(8_000_000n)
    await watcher.stop()
    expect(harness.errors).toEqual([])
  })

  it("credits each of several jetton transfers in one outside wallet message once, at its own place", async () => {
    const first = await custodyWallet(7)
    const second = await custodyWallet(8)
    const watcher = harness.newWatcher([watched])
    await watcher.scanOnce()
    const tx_hash = await sendBatchFromOutside([
      { to: first.address, amount: 1_100_000n },
      { to: second.address, amount: 2_200_000n },
      { to: first.address, amount: 3_300_000n },
    ])
    await watcher.scanOnce()
    await watcher.scanOnce()

    const rows = [...(await harness.rowsOf(first.wallet_id)), ...(await harness.rowsOf(second.wallet_id))]
    expect(rows.map((row) => [row.status, row.tx_hash, row.log_index, row.amount])).toEqual([
      ["credited", tx_hash, 0, 1_100_000n],
      ["credited", tx_hash, 2, 3_300_000n],
      ["credited", tx_hash, 1, 2_200_000n],
    ])
    expect(await harness.balanceOf(first.wallet_id, usdt)).toBe(4_400_000n)
    expect(await harness.balanceOf(second.wallet_id, usdt)).toBe(2_200_000n)
    expect(await harness.ledgerCreditsOf(first.wallet_id, usdt)).toBe(2)
    await watcher.stop()
    expect(harness.errors).toEqual([])
  })

  it("credits once a jetton transfer a contract started (not walked back to a wallet message)", async () => {
    const wallet = await custodyWallet(9)
    const relay = await deployRelay()
    await ton.fund(friendly(relay), "USDT", 50_000_000n)
    const watcher = harness.newWatcher([watched])
    await watcher.scanOnce()
    const caller = await ton.blockchain.treasury("relay-caller")
    const order = beginCell()
      .storeAddress(jettonWalletAddress(relay, Address.parse(usdt_minter)))
      .storeRef(
        jettonTransferBody({
          query_id: 1n,
          amount: 6_000_000n,
          destination: Address.parse(wallet.address),
          response_destination: caller.address,
          forward_ton_amount: 1n,
        }),
      )
      .endCell()
    await ton.transport.apply(() => caller.send({ to: relay, value: toNano("0.2"), body: order }))
    expect(await run(ton.adapter.balance(wallet.address, token(usdt_minter)))).toBe(6_000_000n)
    await watcher.scanOnce()
    await watcher.scanOnce()

    const rows = await harness.rowsOf(wallet.wallet_id)
    expect(rows.map((row) => [row.status, row.from_address, row.amount])).toEqual([
      ["credited", friendly(relay), 6_000_000n],
    ])
    expect(await harness.balanceOf(wallet.wallet_id, usdt)).toBe(6_000_000n)
    expect(await harness.ledgerCreditsOf(wallet.wallet_id, usdt)).toBe(1)
    await watcher.stop()
    expect(harness.errors).toEqual([])
  })

  it("loses and doubles nothing when the watcher (and its process's adapter) is replaced", async () => {
    const wallet = await custodyWallet(4)
    const first = harness.newWatcher([watched])
    await sendFromOutside(wallet.address, 1_000_000n)
    await first.scanOnce()
    await first.stop()

    // While no watcher runs, a second one arrives; the next process knows no message of either.
    await sendFromOutside(wallet.address, 2_000_000n)
    const restarted = { ...watched, adapter: makeTonAdapter(ton.transport) }
    const second = harness.newWatcher([restarted], harness.newWriter())
    await second.scanOnce()
    await second.scanOnce()

    const rows = await harness.rowsOf(wallet.wallet_id)
    expect(rows.map((row) => [row.status, row.amount])).toEqual([
      ["credited", 1_000_000n],
      ["credited", 2_000_000n],
    ])
    expect(await harness.balanceOf(wallet.wallet_id, usdt)).toBe(3_000_000n)
    expect(await harness.ledgerCreditsOf(wallet.wallet_id, usdt)).toBe(2)
    expect(await harness.outboxOf(wallet.wallet_id)).toHaveLength(2)
    await second.stop()
    expect(harness.errors).toEqual([])
  })
})
