// Proves that the production TON transport (adapters/chains/ton/http-transport.ts) reads an old lt
// range of a busy address, and that the deposit watcher gets past it. The API client is a stand-in
// that answers `getTransactions` as toncenter's API v2 does (newest first, or from a transaction
// named by lt and hash, which must match) over real @ton/sandbox transactions, each account's
// history padded with clones newer than them. A range behind 2,100 newer transactions is read (it
// used to fail on every scan, the chain's cursor stuck), and so is a jetton deposit whose sender's
// jetton wallet is that busy, under the same tx_hash as when it is not; a range behind more than a
// read's bound of newer pages is read by the next read, which goes on from where the first stopped;
// and once read, an older range is read from just above it.
import { Address, beginCell, contractAddress, type Transaction, toNano } from "@ton/core"
import { Blockchain } from "@ton/sandbox"
import { Effect, Exit } from "effect"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { makeTonAdapter, ton_incoming_lt_range_max } from "../../adapters/chains/ton/adapter.ts"
import { makeHttpTransport } from "../../adapters/chains/ton/http-transport.ts"
import {
  jettonMintBody,
  jettonMinterInit,
  jettonTransferBody,
  jettonWalletAddress,
} from "../../adapters/chains/ton/jetton.ts"
import { summarizeTransaction } from "../../adapters/chains/ton/transaction.ts"
import { deriveAddress } from "../../domain/custody/derive.ts"
import type { WatchedChain } from "../../src/deposits/watcher.ts"
import { type DepositHarness, depositHarness } from "../support/deposits.ts"

const seed = new Uint8Array(64).fill(5)
const owner = Address.parse(deriveAddress(seed, { chain: "ton", tenant_index: 7, wallet_index: 0 }))
const friendly = owner.toString({ urlSafe: true, bounceable: false, testOnly: false })

/** Clones of `transaction` at lts `from`, `from` + 1, ...: a busy account's newer history. */
const newerClones = (transaction: Transaction, from: bigint, count: number): Array<Transaction> =>
  Array.from({ length: count }, (_, i) => {
    const lt = from + BigInt(i)
    return { ...transaction, lt, hash: () => Buffer.from(lt.toString(16).padStart(64, "0"), "hex") }
  })

const newestLt = (accounts: ReadonlyMap<string, ReadonlyArray<Transaction>>) => {
  let newest = 0n
  for (const t of [...accounts.values()].flat()) if (t.lt > newest) newest = t.lt
  return newest
}

/** API v2 over the histories of `accounts` (by raw address); counts the pages it answers. */
const standIn = (accounts: ReadonlyMap<string, ReadonlyArray<Transaction>>) => {
  const newestFirst = (address: Address) =>
    [...(accounts.get(address.toRawString()) ?? [])].sort((a, b) => (a.lt > b.lt ? -1 : 1))
  const newest = newestLt(accounts)
  const client = {
    pages_read: 0,
    getTransactions: async (
      address: Address,
      opts: { limit: number; lt?: string; hash?: string; inclusive?: boolean },
    ) => {
      client.pages_read += 1
      const newest_first = newestFirst(address)
      if (opts.lt === undefined) return newest_first.slice(0, opts.limit)
      const at = newest_first.findIndex((t) => t.lt === BigInt(opts.lt ?? 0))
      // The API finds the starting transaction by lt and hash, and refuses a pair it does not know.
      if (at < 0 || newest_first[at]?.hash().toString("base64") !== opts.hash)
        throw new Error("LITE_SERVER_UNKNOWN: cannot locate transaction")
      const start = opts.inclusive === true ? at : at + 1
      return newest_first.slice(start, start + opts.limit)
    },
    // Every account reads as not deployed: a minter then counts as the platform's (jettons.ts).
    getContractState: async () => ({ state: "uninitialized", balance: 0n }),
    getMasterchainInfo: async () => ({ workchain: -1, shard: "-9223372036854775808", latestSeqno: 1 }),
    getShardTransactions: async () => [{ lt: newest.toString() }],
  }
  return client
}

let harness: DepositHarness
let deposit: Transaction
/** A jetton deposit to the custody address, as its accounts' histories; and its minter. */
const jetton_history = new Map<string, Array<Transaction>>()
let minter: Address
let sender_jetton_wallet: Address
let custody_jetton_wallet: Address
let credit_lt: bigint
let exchange_address: Address

beforeAll(async () => {
  harness = await depositHarness("ten_review_ton_stall")
  const blockchain = await Blockchain.create()
  const funder = await blockchain.treasury("funder")
  const sent = await funder.send({ to: owner, value: toNano("1"), bounce: false })
  const account = BigInt(`0x${owner.hash.toString("hex")}`)
  const found = sent.transactions.find((t) => t.address === account)
  if (found === undefined) throw new Error("no transaction of the custody address")
  deposit = found
  await harness.custodyWallet("ton", "wal_review_ton", friendly, 0)

  // An exchange's wallet holding the jetton sends some to the custody address.
  const keep = (sent: { transactions: ReadonlyArray<Transaction> }) => {
    for (const t of sent.transactions) {
      const key = `0:${t.address.toString(16).padStart(64, "0")}`
      jetton_history.set(key, [...(jetton_history.get(key) ?? []), t])
    }
  }
  const issuer = await blockchain.treasury("issuer")
  const exchange = await blockchain.treasury("exchange")
  exchange_address = exchange.address
  const init = jettonMinterInit(issuer.address, beginCell().storeUint(1, 8).endCell())
  minter = contractAddress(0, init)
  keep(await issuer.send({ to: minter, value: toNano("1"), init }))
  const mint = { query_id: 0n, owner: exchange.address, amount: 1_000_000n, forward_ton_amount: 0n }
  keep(
    await issuer.send({
      to: minter,
      value: toNano("0.1"),
      body: jettonMintBody({ ...mint, response_destination: issuer.address }),
    }),
  )
  sender_jetton_wallet = jettonWalletAddress(exchange.address, minter)
  custody_jetton_wallet = jettonWalletAddress(owner, minter)
  const body = jettonTransferBody({
    query_id: 1n,
    amount: 250_000n,
    destination: owner,
    response_destination: exchange.address,
    forward_ton_amount: 1n,
  })
  keep(await exchange.send({ to: sender_jetton_wallet, value: toNano("0.1"), bounce: true, body }))
  const credit = jetton_history.get(custody_jetton_wallet.toRawString())?.[0]
  if (credit === undefined) throw new Error("no credit of the custody's jetton wallet")
  credit_lt = credit.lt
}, 60_000)
afterAll(async () => {
  await harness?.close()
})

/** The deposit at lt 1,000, then `newer` transactions from lt 10,000 on. */
const historyWith = (newer: number) => {
  const [at_1000] = newerClones(deposit, 1_000n, 1)
  if (at_1000 === undefined) throw new Error("one clone")
  return new Map([[owner.toRawString(), [at_1000, ...newerClones(deposit, 10_000n, newer)]]])
}
/**
 * The jetton deposit, with `newer` transactions after it on each of `busy`: clones of the sender's
 * jetton wallet taking the exchange's `transfer`, which credit nothing.
 */
const jettonHistoryWith = (newer: number, busy: ReadonlyArray<Address>) => {
  const template = jetton_history.get(sender_jetton_wallet.toRawString())?.at(-1)
  if (template === undefined) throw new Error("the sender's jetton wallet has a history")
  const padded = new Map(jetton_history)
  for (const account of busy) {
    const own = jetton_history.get(account.toRawString()) ?? []
    padded.set(account.toRawString(), [...own, ...newerClones(template, credit_lt + 1_000_000n, newer)])
  }
  return padded
}
const transportOver = (client: ReturnType<typeof standIn>) =>
  makeHttpTransport(
    { endpoint_url: "http://stand-in.invalid" },
    client as unknown as Parameters<typeof makeHttpTransport>[1],
  )
const watchedOver = (
  history: ReadonlyMap<string, ReadonlyArray<Transaction>>,
  token = { asset: { code: "TON@ton", symbol: "TON", chain: "ton", decimals: 9 }, contract: "TON" },
): WatchedChain => ({
  environment: "sandbox",
  chain: "ton",
  adapter: makeTonAdapter(transportOver(standIn(history))),
  tokens: [token],
  finality_confirmations: 1,
  block_range_max: ton_incoming_lt_range_max,
})
const setCursor = (n: bigint) =>
  harness.db.pool.query(
    `insert into platform.chain_deposit_cursors (environment, chain, next_block) values ('sandbox', 'ton', $1)
     on conflict (environment, chain) do update set next_block = excluded.next_block`,
    [n.toString()],
  )
const cursor = async () =>
  (
    await harness.db.pool.query<{ next_block: string }>(
      "select next_block::text from platform.chain_deposit_cursors where environment = 'sandbox' and chain = 'ton'",
    )
  ).rows[0]?.next_block
const native = { contract: "TON", addresses: [friendly], from_block: 1_000n, to_block: 1_000n }

describe("the TON HTTP transport, a busy address", () => {
  it("control: with 1,500 newer transactions the adapter reads the deposit's lt", async () => {
    const found = await Effect.runPromise(watchedOver(historyWith(1_500)).adapter.incomingTransfers(native))
    expect(found.map((t) => t.amount)).toEqual([toNano("1")])
  })

  it("with 2,100 newer transactions the adapter reads the deposit's lt", async () => {
    const exit = await Effect.runPromiseExit(
      watchedOver(historyWith(2_100)).adapter.incomingTransfers(native),
    )
    expect(Exit.isSuccess(exit) && exit.value.map((t) => t.amount)).toEqual([toNano("1")])
  })

  it("a jetton deposit from a busy sender's jetton wallet keeps its tx_hash: its sending message", async () => {
    const query = (history: ReadonlyMap<string, ReadonlyArray<Transaction>>) =>
      Effect.runPromise(
        watchedOver(history).adapter.incomingTransfers({
          contract: minter.toString(),
          addresses: [friendly],
          from_block: credit_lt,
          to_block: credit_lt,
        }),
      )
    const [quiet] = await query(jetton_history)
    const [busy] = await query(jettonHistoryWith(2_100, [sender_jetton_wallet, custody_jetton_wallet]))
    expect(quiet?.amount).toBe(250_000n)
    expect(busy?.proof).toEqual(quiet?.proof)
    // Walked back to the exchange wallet's message, not the credit's own inbound message.
    const sent = jetton_history
      .get(exchange_address.toRawString())
      ?.findLast((t) => t.inMessage?.info.type === "external-in")
    if (sent === undefined) throw new Error("the exchange's wallet took a message")
    expect(quiet?.proof.tx_hash).toBe(summarizeTransaction(exchange_address, sent).in_message_hash)
  })

  it("a scan behind 2,100 newer transactions records the deposit and moves the cursor past it", async () => {
    harness.errors.length = 0
    await setCursor(credit_lt - 100n)
    const usdt = {
      asset: { code: "USDT@ton", symbol: "USDT", chain: "ton", decimals: 6 },
      contract: minter.toString(),
    }
    const history = jettonHistoryWith(2_100, [sender_jetton_wallet, custody_jetton_wallet])
    const watcher = harness.newWatcher([watchedOver(history, usdt)])
    const [report] = await watcher.scanOnce()
    expect(harness.errors).toEqual([])
    const newest = newestLt(history)
    expect(report?.blocks).toEqual({ from: credit_lt - 101n, to: newest })
    expect(await cursor()).toBe((newest + 1n).toString())
    const rows = await harness.db.pool.query<{ block_number: string; amount: string }>(
      "select block_number::text, amount::text from platform.chain_deposits where wallet_id = 'wal_review_ton'",
    )
    expect(rows.rows).toEqual([{ block_number: credit_lt.toString(), amount: "250000" }])
    // Not credited yet: judging it (`transactionStatus`) looks for its hops among the newest 20
    // transactions of each account over API v2 (`landed` without `since_unix`), and 2,100 newer
    // ones hide the custody's credit, so the row stays `seen`. Its read no longer holds up the chain.
  })

  it("behind more newer transactions than one read pages through, the next read goes on and reads the range", async () => {
    const client = standIn(historyWith(10_050))
    const transport = transportOver(client)
    await expect(transport.transactionsOf(owner, 1_000n, 1_000n, 10)).rejects.toThrow(
      /more than 10000 transactions .* newer than lt 1000/,
    )
    expect(client.pages_read).toBe(100)
    client.pages_read = 0
    expect((await transport.transactionsOf(owner, 1_000n, 1_000n, 10)).map((t) => t.lt)).toEqual([1_000n])
    expect(client.pages_read).toBe(1)
  })

  it("once a read passed them, an older range is read from just above it, not from the newest", async () => {
    const client = standIn(historyWith(2_100))
    const transport = transportOver(client)
    expect(await transport.transactionsOf(owner, 11_000n, 11_099n, 1_000)).toHaveLength(100)
    expect(client.pages_read).toBe(12)
    client.pages_read = 0
    expect((await transport.transactionsOf(owner, 1_000n, 10_500n, 1_000)).map((t) => t.lt)).toEqual([
      1_000n,
      ...Array.from({ length: 501 }, (_, i) => 10_000n + BigInt(i)),
    ])
    // From the lowest page end above the range (10,900) down: 10 pages, not 22.
    expect(client.pages_read).toBe(10)
  })
})
