// Proves that the Tron adapter's `incomingTransfers` finds TRC-20 deposits with the full node HTTP
// API alone: the right amount, sender, recipient and proof; other contracts, other recipients,
// failed transactions and look-alike logs ignored; several logs of one block with their indexes;
// the port's bounds; bounded request volume; and proofs that agree with `transactionStatus`, which
// takes a TRC-20 transfer that succeeded without its Transfer log as reverted. Also
// how `broadcast` reads the node's refusals: bytes the chain holds (in a block, in the pool) are a
// rebroadcast whatever the refusal's code; an expiration is `TransactionExpired`, anything else
// `BroadcastRejected`.
//
// No Tron node can run on this machine, so a local node:http server stands in for a java-tron full
// node: it answers /wallet/getnowblock, getblockbynum, gettransactioninfobyblocknum,
// gettransactionbyid, gettransactioninfobyid, gettransactionfrompending and broadcasthex in the
// JSON shapes java-tron documents. Its blocks hold real transactions, built and signed with the adapter's own code; each
// Transfer log is derived from its signed transaction by tronweb (its protobuf decoder, ABI decoder
// and encoder, address conversion and keccak), not by the adapter, so the adapter's decoding is
// checked against an independent implementation. This tests the adapter and its HTTP transport up to the node's
// boundary, not against a real node.

import { createServer, type IncomingMessage, type ServerResponse } from "node:http"
import type { AddressInfo } from "node:net"
import { sha256 } from "@noble/hashes/sha2.js"
import { bytesToHex, hexToBytes, utf8ToBytes } from "@noble/hashes/utils.js"
import { mnemonicToSeedSync } from "@scure/bip39"
import { Cause, Effect, Exit, Result } from "effect"
import { utils as tronUtils } from "tronweb"
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest"
import { makeTronAdapter } from "../../adapters/chains/tron/adapter.ts"
import {
  formatTronAddress,
  parseTronAddress,
  tronAddressOfPublicKey,
} from "../../adapters/chains/tron/address.ts"
import { makeTronHttpTransport } from "../../adapters/chains/tron/http-transport.ts"
import { decodeSignedTransaction, type ReferenceBlock } from "../../adapters/chains/tron/transaction.ts"
import { buildRawData, signTronRawData, tronContractOf } from "../../adapters/chains/tron/transfer.ts"
import { trc20TransferOfLog, tronLogAddress } from "../../adapters/chains/tron/trc20-log.ts"
import { deriveAddress, deriveSigningKey } from "../../domain/custody/derive.ts"
import {
  type ChainAdapter,
  type IncomingTransfer,
  type IncomingTransfersQuery,
  incoming_addresses_max,
  incoming_block_range_max,
} from "../../src/ports/chain.ts"

const seed = mnemonicToSeedSync(
  "abandon abandon abandon abandon abandon abandon abandon abandon abandon abandon abandon about",
  "",
)
const keyOf = (wallet_index: number) =>
  deriveSigningKey(seed, { chain: "tron", tenant_index: 0, wallet_index })
const addressOf = (wallet_index: number) =>
  deriveAddress(seed, { chain: "tron", tenant_index: 0, wallet_index })

const usdt = "TR7NHqjeKQxGTCi8q8ZY4pL8otSzgjLj6t"
const usdc = "TEkxiTehnzSmSe2XqrBj4w32RUN966rdz8"
const custody_a = addressOf(10)
const custody_b = addressOf(11)
const outsider = addressOf(12)
const batch_contract = addressOf(13)
const transfer_topic = tronUtils.ethersUtils.id("Transfer(address,address,uint256)").slice(2)
const approval_topic = tronUtils.ethersUtils.id("Approval(address,address,uint256)").slice(2)

// Mainnet block 50,910,534, the reference block of every transaction signed here.
const reference_block: ReferenceBlock = {
  number: 50_910_534n,
  id: hexToBytes("000000000308d546908eae2604fbe73bf186ea41d7806b547a730c7dbd8e413f"),
  timestamp_ms: 1_683_345_360_000n,
}
let timestamp_ms = 1_683_345_356_000n

/** A transaction signed by custody wallet `payer`, with its JSON as a block lists it. */
interface Signed {
  readonly tx_id: string
  /** The signed transaction's bytes, 0x-hex, as `signTransfer` answers them. */
  readonly raw: string
  readonly json: Record<string, unknown>
  /** The call's contract and data, as tronweb decodes them from the signed bytes. */
  readonly call: { readonly owner: string; readonly contract: string; readonly data: string } | null
}

function sign(payer: number, contract: Parameters<typeof buildRawData>[0]): Signed {
  timestamp_ms += 1n
  const raw = buildRawData(contract, {
    reference_block,
    timestamp_ms,
    lifetime_ms: 60_000n,
    fee_limit_sun: 30_000_000n,
  })
  const signed = signTronRawData(keyOf(payer), raw)
  const type = contract.kind === "transfer" ? "TransferContract" : "TriggerSmartContract"
  const raw_data = tronUtils.deserializeTx.deserializeTransaction(type, bytesToHex(signed.raw_data))
  const tx_id = bytesToHex(signed.tx_id)
  const signature = decodeSignedTransaction(signed.transaction).signatures.map((bytes) => bytesToHex(bytes))
  const json = {
    ret: [{ contractRet: "SUCCESS" }],
    signature,
    txID: tx_id,
    raw_data,
    raw_data_hex: bytesToHex(signed.raw_data),
  }
  const value = (raw_data.contract[0]?.parameter.value ?? {}) as Record<string, string>
  const call =
    type === "TriggerSmartContract"
      ? {
          owner: String(value.owner_address),
          contract: String(value.contract_address),
          data: String(value.data),
        }
      : null
  return { tx_id, raw: `0x${bytesToHex(signed.transaction)}`, json, call }
}

function signTokenTransfer(payer: number, token: string, to: string, amount: bigint): Signed {
  const owner = tronAddressOfPublicKey(keyOf(payer).public_key)
  const contract = tronContractOf(owner, { asset: { kind: "token", contract: token }, to, amount })
  if (Result.isFailure(contract)) throw new Error("refused")
  return sign(payer, contract.success)
}

function signTrx(payer: number, to: string): Signed {
  const owner = tronAddressOfPublicKey(keyOf(payer).public_key)
  const contract = tronContractOf(owner, { asset: { kind: "native" }, to, amount: 1_000_000n })
  if (Result.isFailure(contract)) throw new Error("refused")
  return sign(payer, contract.success)
}

/** A call of a contract that is not a token (a batch payer), with opaque call data. */
function signBatchCall(payer: number): Signed {
  const owner = tronAddressOfPublicKey(keyOf(payer).public_key)
  const contract = parseTronAddress(batch_contract)
  if (contract === null) throw new Error("not a Tron address")
  return sign(payer, { kind: "trigger_smart_contract", owner, contract, data: hexToBytes("c204642c") })
}

/** A log as java-tron reports it: the emitting contract's 20 bytes (no 0x41), topics and data in hex. */
interface Log {
  readonly address: string
  readonly topics: ReadonlyArray<string>
  readonly data: string
}

/** The event `Transfer(from, to, value)` of `token`, encoded with tronweb's ABI encoder. */
function transferLog(token: string, from: string, to: string, value: bigint): Log {
  const words = tronUtils.abi.encodeParams(["address", "address", "uint256"], [from, to, value]).slice(2)
  return {
    address: tronUtils.address.toHex(token).slice(2),
    topics: [transfer_topic, words.slice(0, 64), words.slice(64, 128)],
    data: words.slice(128),
  }
}

/** The Transfer log the token emits for a signed `transfer(to, value)` call, decoded by tronweb. */
function logOfCall(signed: Signed): Log {
  if (signed.call === null) throw new Error("not a contract call")
  const { to, value } = tronUtils.abi.decodeParams(
    ["to", "value"],
    ["address", "uint256"],
    `0x${signed.call.data}`,
    true,
  )
  return transferLog(
    tronUtils.address.fromHex(signed.call.contract),
    tronUtils.address.fromHex(signed.call.owner),
    tronUtils.address.fromHex(String(to)),
    BigInt(value),
  )
}

/** A transaction in a block, with its execution result (`TransactionInfo`) as the node answers it. */
interface Included {
  readonly signed: Signed
  readonly outcome: "success" | "revert" | "trx"
  readonly logs: ReadonlyArray<Log>
}

interface StandInBlock {
  readonly id: string
  readonly included: ReadonlyArray<Included>
}

const block_time_ms = 3_000
const genesis_time_ms = 1_700_000_000_000

/** A block id as Tron forms it: the number in 8 bytes, then 24 bytes of the header's hash. */
function blockIdOf(number: number, fork: string): string {
  const hash = bytesToHex(sha256(utf8ToBytes(`${fork}:${number}`)))
  return `${number.toString(16).padStart(16, "0")}${hash.slice(16)}`
}

function infoJson(number: number, item: Included) {
  const common = {
    id: item.signed.tx_id,
    blockNumber: number,
    blockTimeStamp: genesis_time_ms + number * block_time_ms,
    contractResult: [""],
  }
  switch (item.outcome) {
    case "trx":
      return { ...common, receipt: { net_usage: 267 } }
    case "success":
      return {
        ...common,
        fee: 13_844_850,
        contract_address: tronUtils.address.toHex(usdt),
        receipt: { energy_fee: 13_499_850, energy_usage_total: 64_285, net_fee: 345_000, result: "SUCCESS" },
        log: item.logs,
      }
    case "revert":
      // java-tron should drop a reverted execution's logs; the stand-in keeps one, so that only the
      // receipt can tell the adapter that nothing moved.
      return {
        ...common,
        fee: 2_000_000,
        result: "FAILED",
        resMessage: bytesToHex(utf8ToBytes("REVERT opcode executed")),
        receipt: { energy_fee: 1_655_000, energy_usage_total: 7_881, net_fee: 345_000, result: "REVERT" },
        log: item.logs,
      }
  }
}

/** A local HTTP server answering like a java-tron full node over a chain of blocks 0..head. */
class StandInFullNode {
  head = 120
  readonly blocks = new Map<number, StandInBlock>()
  /** Results the node still reports by id after a reorganisation took their block away. */
  readonly stale_infos = new Map<string, { readonly number: number; readonly item: Included }>()
  readonly requests: Array<{ readonly path: string; readonly body: Record<string, unknown> }> = []
  in_flight = 0
  in_flight_max = 0
  /** What /wallet/broadcasthex answers (java-tron's shape); accepted unless a test says otherwise. */
  broadcast_answer: Record<string, unknown> = { result: true }
  /** Ids the node holds in its pool of pending transactions. */
  readonly pending = new Set<string>()
  /** Called when a block is read, before the answer: lets a test change the chain mid-scan. */
  onBlockRead: (number: number) => void = () => {}
  url = ""
  private readonly server = createServer((request, response) => {
    this.handle(request, response).catch((error: unknown) => {
      response.writeHead(500).end(String(error))
    })
  })

  async start() {
    await new Promise<void>((resolve) => this.server.listen(0, "127.0.0.1", resolve))
    this.url = `http://127.0.0.1:${(this.server.address() as AddressInfo).port}`
  }

  async stop() {
    await new Promise<void>((resolve) => this.server.close(() => resolve()))
  }

  blockAt(number: number): StandInBlock | null {
    if (number > this.head || number < 0) return null
    return this.blocks.get(number) ?? { id: blockIdOf(number, "main"), included: [] }
  }

  private blockJson(number: number) {
    const block = this.blockAt(number)
    if (block === null) return {}
    const transactions = block.included.map((item) => item.signed.json)
    return {
      blockID: block.id,
      block_header: {
        raw_data: {
          number,
          txTrieRoot: bytesToHex(sha256(utf8ToBytes(block.id))),
          witness_address: "41b2f713d57dbcec679d93a8849fa0cd0e4db594ba",
          parentHash: this.blockAt(number - 1)?.id ?? "",
          version: 30,
          timestamp: genesis_time_ms + number * block_time_ms,
        },
        witness_signature: "00".repeat(65),
      },
      // java-tron leaves out an empty list, as proto3 JSON does.
      ...(transactions.length === 0 ? {} : { transactions }),
    }
  }

  private answer(path: string, body: Record<string, unknown>): unknown {
    const number = Number(body.num)
    switch (path) {
      case "/wallet/getnowblock":
        return this.blockJson(this.head)
      case "/wallet/getblockbynum":
        this.onBlockRead(number)
        return this.blockJson(number)
      case "/wallet/gettransactioninfobyblocknum": {
        if (number <= 0) return {}
        const block = this.blockAt(number)
        return block === null ? [] : block.included.map((item) => infoJson(number, item))
      }
      case "/wallet/gettransactioninfobyid": {
        const stale = this.stale_infos.get(String(body.value))
        if (stale !== undefined) return infoJson(stale.number, stale.item)
        for (let at = 0; at <= this.head; at += 1) {
          const item = this.blockAt(at)?.included.find((candidate) => candidate.signed.tx_id === body.value)
          if (item !== undefined) return infoJson(at, item)
        }
        return {}
      }
      case "/wallet/gettransactionbyid": {
        for (let at = 0; at <= this.head; at += 1) {
          const item = this.blockAt(at)?.included.find((candidate) => candidate.signed.tx_id === body.value)
          if (item !== undefined) return item.signed.json
        }
        return {}
      }
      case "/wallet/gettransactionfrompending":
        return this.pending.has(String(body.value)) ? { txID: body.value } : {}
      case "/wallet/broadcasthex":
        return this.broadcast_answer
      default:
        return undefined
    }
  }

  private async handle(request: IncomingMessage, response: ServerResponse) {
    this.in_flight += 1
    this.in_flight_max = Math.max(this.in_flight_max, this.in_flight)
    try {
      let text = ""
      for await (const chunk of request) text += String(chunk)
      const path = request.url ?? ""
      const body = (text === "" ? {} : JSON.parse(text)) as Record<string, unknown>
      this.requests.push({ path, body })
      // A little latency, so that concurrent reads overlap as they do against a real node.
      await new Promise((resolve) => setTimeout(resolve, 3))
      const answer = this.answer(path, body)
      if (answer === undefined) response.writeHead(404).end()
      else response.writeHead(200, { "content-type": "application/json" }).end(JSON.stringify(answer))
    } finally {
      this.in_flight -= 1
    }
  }
}

// The chain: block 101 has one deposit among noise, 102 a failed deposit, 103 several logs.
const deposit = signTokenTransfer(0, usdt, custody_a, 12_345_678n)
const trx_payment = signTrx(1, custody_a)
const to_outsider = signTokenTransfer(1, usdt, outsider, 5_000_000n)
const other_token = signTokenTransfer(2, usdc, custody_a, 7_000_000n)
const reverted = signTokenTransfer(3, usdt, custody_b, 9_000_000n)
const batch = signBatchCall(0)
const batch_deposit = signTokenTransfer(1, usdt, custody_b, 250_000n)
const payer_0 = addressOf(0)
const batch_logs: ReadonlyArray<Log> = [
  {
    ...transferLog(usdt, payer_0, batch_contract, 1_000n),
    topics: [approval_topic, ...transferLog(usdt, payer_0, batch_contract, 0n).topics.slice(1)],
  },
  transferLog(usdt, payer_0, outsider, 100n),
  transferLog(usdt, payer_0, custody_a, 200n),
  transferLog(usdt, payer_0, custody_b, 300n),
  // An ERC-721 style Transfer: the same topic, the token id as a fourth topic, no data.
  {
    ...transferLog(usdt, payer_0, custody_a, 0n),
    topics: [...transferLog(usdt, payer_0, custody_a, 0n).topics, `${"0".repeat(63)}7`],
    data: "",
  },
]

const nft_first = signTokenTransfer(2, usdt, custody_a, 31n)
const nft_first_logs: ReadonlyArray<Log> = [
  {
    ...transferLog(usdt, addressOf(2), custody_a, 0n),
    topics: [...transferLog(usdt, addressOf(2), custody_a, 0n).topics, `${"0".repeat(63)}9`],
    data: "",
  },
  logOfCall(nft_first),
]

// Calls of a token that succeed without moving anything: no log at all, or a log to someone else.
const silent = signTokenTransfer(4, usdt, custody_b, 77n)
const misdirected = signTokenTransfer(4, usdt, custody_b, 78n)

function chainBlocks(): ReadonlyArray<[number, StandInBlock]> {
  return [
    [
      105,
      {
        id: blockIdOf(105, "main"),
        included: [
          { signed: silent, outcome: "success", logs: [] },
          {
            signed: misdirected,
            outcome: "success",
            logs: [transferLog(usdt, addressOf(4), addressOf(14), 78n)],
          },
        ],
      },
    ],
    [
      104,
      {
        id: blockIdOf(104, "main"),
        included: [{ signed: nft_first, outcome: "success", logs: nft_first_logs }],
      },
    ],
    [
      101,
      {
        id: blockIdOf(101, "main"),
        included: [
          { signed: deposit, outcome: "success", logs: [logOfCall(deposit)] },
          { signed: trx_payment, outcome: "trx", logs: [] },
          { signed: to_outsider, outcome: "success", logs: [logOfCall(to_outsider)] },
          { signed: other_token, outcome: "success", logs: [logOfCall(other_token)] },
        ],
      },
    ],
    [
      102,
      {
        id: blockIdOf(102, "main"),
        included: [{ signed: reverted, outcome: "revert", logs: [logOfCall(reverted)] }],
      },
    ],
    [
      103,
      {
        id: blockIdOf(103, "main"),
        included: [
          { signed: batch, outcome: "success", logs: batch_logs },
          { signed: batch_deposit, outcome: "success", logs: [logOfCall(batch_deposit)] },
        ],
      },
    ],
  ]
}

const node = new StandInFullNode()
let adapter: ChainAdapter
const block_reads_in_flight_max = 3

beforeAll(async () => {
  await node.start()
  adapter = makeTronAdapter(
    {
      lifetime_ms: 60_000n,
      fee_limit_sun: 30_000_000n,
      finality_confirmations: 19,
      block_reads_in_flight_max,
    },
    makeTronHttpTransport({ full_node_url: node.url, request_timeout_ms: 5_000 }),
  )
})
afterAll(() => node.stop())
beforeEach(async () => {
  // A test whose scan failed may leave aborted reads behind; they must not count in the next one.
  while (node.in_flight > 0) await new Promise((resolve) => setTimeout(resolve, 5))
  node.blocks.clear()
  node.stale_infos.clear()
  for (const [number, block] of chainBlocks()) node.blocks.set(number, block)
  node.head = 120
  node.requests.length = 0
  node.in_flight_max = 0
  node.broadcast_answer = { result: true }
  node.pending.clear()
  node.onBlockRead = () => {}
})

const incoming = (query: Partial<IncomingTransfersQuery>) =>
  Effect.runPromise(
    adapter.incomingTransfers({
      contract: usdt,
      addresses: [custody_a],
      from_block: 101n,
      to_block: 101n,
      ...query,
    }),
  )
const refusal = (query: Partial<IncomingTransfersQuery>) =>
  Effect.runPromise(
    Effect.flip(
      adapter.incomingTransfers({
        contract: usdt,
        addresses: [custody_a],
        from_block: 101n,
        to_block: 101n,
        ...query,
      }),
    ),
  )
const place = (transfer: IncomingTransfer) => [
  transfer.proof.tx_hash,
  transfer.proof.log_index,
  transfer.to,
  transfer.amount,
]

describe("incomingTransfers against a stand-in full node", () => {
  it("finds a TRC-20 transfer into a custody address with its amount, sender, recipient and proof", async () => {
    const found = await incoming({})
    expect(found).toEqual([
      {
        contract: usdt,
        from: payer_0,
        to: custody_a,
        amount: 12_345_678n,
        proof: {
          tx_hash: deposit.tx_id,
          block_number: 101n,
          block_hash: blockIdOf(101, "main"),
          log_index: 0,
          confirmations: 20,
        },
      },
    ])
    // The signed transaction, as tronweb decodes it, says the same.
    const call = deposit.call ?? { owner: "", contract: "", data: "" }
    expect(tronUtils.address.fromHex(call.owner)).toBe(found[0]?.from)
    expect(tronUtils.address.fromHex(call.contract)).toBe(usdt)
  })

  it("ignores other contracts' transfers and transfers to other recipients, and finds each when asked", async () => {
    expect((await incoming({ contract: usdc })).map(place)).toEqual([
      [other_token.tx_id, 0, custody_a, 7_000_000n],
    ])
    expect((await incoming({ addresses: [outsider] })).map(place)).toEqual([
      [to_outsider.tx_id, 0, outsider, 5_000_000n],
    ])
    expect(await incoming({ addresses: [custody_b] })).toEqual([])
  })

  it("ignores a failed transaction, even one whose result carries a Transfer log, and reports it reverted once final", async () => {
    expect(await incoming({ addresses: [custody_b], from_block: 102n, to_block: 102n })).toEqual([])
    const status = await Effect.runPromise(adapter.transactionStatus(reverted.tx_id))
    expect(status.status).toBe("reverted")
    // Short of the 19 confirmations of finality, the failure is not decided yet: confirmed.
    node.head = 110
    const recent = await Effect.runPromise(adapter.transactionStatus(reverted.tx_id))
    expect(recent).toMatchObject({ status: "confirmed", proof: { confirmations: 9, log_index: null } })
  })

  it("reports reverted, once final, a token transfer that succeeded without its Transfer log from sender to recipient", async () => {
    node.head = 123
    for (const tx of [silent, misdirected]) {
      expect(await Effect.runPromise(adapter.transactionStatus(tx.tx_id))).toMatchObject({
        status: "reverted",
        proof: { tx_hash: tx.tx_id, log_index: null, confirmations: 19 },
      })
    }
    // Read as a deposit (with its log's index), success is the execution result's.
    expect(await Effect.runPromise(adapter.transactionStatus(silent.tx_id, 0))).toMatchObject({
      status: "finalized",
    })
    // The transfer that did move is finalized, its proof naming its log.
    expect(await Effect.runPromise(adapter.transactionStatus(deposit.tx_id))).toMatchObject({
      status: "finalized",
      proof: { log_index: 0 },
    })
  })

  it("finds several logs in one block once each, indexed within their transaction, and skips look-alike events", async () => {
    const found = await incoming({ addresses: [custody_a, custody_b], from_block: 103n, to_block: 103n })
    expect(found.map(place)).toEqual([
      [batch.tx_id, 2, custody_a, 200n],
      [batch.tx_id, 3, custody_b, 300n],
      [batch_deposit.tx_id, 0, custody_b, 250_000n],
    ])
    expect(found.every((transfer) => transfer.from === payer_0 || transfer.from === addressOf(1))).toBe(true)
    expect(new Set(found.map((transfer) => transfer.proof.block_hash))).toEqual(
      new Set([blockIdOf(103, "main")]),
    )
  })

  it("reports the same block and log index as transactionStatus, as the watcher and verification compare them", async () => {
    const found = await incoming({
      addresses: [custody_a, custody_b, outsider],
      from_block: 101n,
      to_block: 104n,
    })
    // The last one's first log is an ERC-721 style Transfer, which neither counts.
    for (const tx of [deposit, to_outsider, batch, batch_deposit, nft_first]) {
      const status = await Effect.runPromise(adapter.transactionStatus(tx.tx_id))
      if (status.status !== "finalized" && status.status !== "confirmed") throw new Error(status.status)
      // transactionStatus names the transaction's first Transfer log; incomingTransfers has it too.
      const same = found.find(
        (transfer) =>
          transfer.proof.tx_hash === tx.tx_id && transfer.proof.log_index === status.proof.log_index,
      )
      expect(same?.proof).toEqual(status.proof)
    }
  })

  it("has transactionStatus report a transaction that left its block as seen, not in another block's proof", async () => {
    const main = node.blockAt(101)
    if (main === null) throw new Error("no block 101")
    node.stale_infos.set(deposit.tx_id, { number: 101, item: main.included[0] as Included })
    node.blocks.set(101, { id: blockIdOf(101, "fork"), included: main.included.slice(1) })
    expect(await Effect.runPromise(adapter.transactionStatus(deposit.tx_id))).toEqual({
      status: "seen",
      tx_hash: deposit.tx_id,
    })
    expect(await incoming({})).toEqual([])
  })

  it("reads a range in chain order, and the range equals its pages read one after the other", async () => {
    const query = { addresses: [custody_a, custody_b, outsider] }
    const whole = await incoming({ ...query, from_block: 100n, to_block: 110n })
    const pages = [
      ...(await incoming({ ...query, from_block: 100n, to_block: 101n })),
      ...(await incoming({ ...query, from_block: 102n, to_block: 103n })),
      ...(await incoming({ ...query, from_block: 104n, to_block: 110n })),
    ]
    expect(whole.map(place)).toEqual([
      [deposit.tx_id, 0, custody_a, 12_345_678n],
      [to_outsider.tx_id, 0, outsider, 5_000_000n],
      [batch.tx_id, 1, outsider, 100n],
      [batch.tx_id, 2, custody_a, 200n],
      [batch.tx_id, 3, custody_b, 300n],
      [batch_deposit.tx_id, 0, custody_b, 250_000n],
      [nft_first.tx_id, 1, custody_a, 31n],
    ])
    expect(pages).toEqual(whole)
  })

  it("costs two requests per block, a bounded number at a time, and the head once when it found something", async () => {
    await incoming({ from_block: 0n, to_block: 29n })
    const count = (path: string) => node.requests.filter((request) => request.path === path).length
    // The genesis block is not read: it executes no contract.
    expect([count("/wallet/getblockbynum"), count("/wallet/gettransactioninfobyblocknum")]).toEqual([29, 29])
    expect(count("/wallet/getnowblock")).toBe(0)
    expect(node.requests.length).toBe(58)
    expect(node.in_flight_max).toBeLessThanOrEqual(block_reads_in_flight_max)
    expect(node.in_flight_max).toBeGreaterThan(1)

    node.requests.length = 0
    expect(await incoming({ from_block: 100n, to_block: 109n })).toHaveLength(3)
    expect([count("/wallet/getblockbynum"), count("/wallet/gettransactioninfobyblocknum")]).toEqual([10, 10])
    expect(count("/wallet/getnowblock")).toBe(1)
  })

  it("reads a block again when it changed between its two reads, and reports the block it settled on", async () => {
    const fork = {
      id: blockIdOf(101, "fork"),
      included: [{ signed: deposit, outcome: "success" as const, logs: [logOfCall(deposit)] }],
    }
    let reads = 0
    node.onBlockRead = (number) => {
      reads += number === 101 ? 1 : 0
      // A reorganisation right after the first block read: its results come from the new fork.
      if (number === 101 && reads === 1) setTimeout(() => node.blocks.set(101, fork), 0)
    }
    const found = await incoming({})
    expect(reads).toBe(2)
    expect(found.map((transfer) => transfer.proof.block_hash)).toEqual([blockIdOf(101, "fork")])
  })

  it("fails as a defect when a block keeps changing under its reads, or when the node has no such block", async () => {
    const full = node.blockAt(101)
    const short = { id: blockIdOf(101, "fork"), included: full?.included.slice(0, 1) ?? [] }
    node.onBlockRead = (number) => {
      // Every block read is followed by a reorganisation to the other fork.
      if (number === 101)
        setTimeout(() => node.blocks.set(101, (node.blocks.get(101) === full ? short : full) ?? short), 0)
    }
    const changing = await Effect.runPromiseExit(
      adapter.incomingTransfers({ contract: usdt, addresses: [custody_a], from_block: 101n, to_block: 101n }),
    )
    expect(Exit.hasDies(changing)).toBe(true)
    expect(Exit.isFailure(changing) ? Cause.pretty(changing.cause) : "").toMatch(/differed in 3 reads/)

    const above = await Effect.runPromiseExit(
      adapter.incomingTransfers({ contract: usdt, addresses: [custody_a], from_block: 120n, to_block: 121n }),
    )
    expect(Exit.hasDies(above)).toBe(true)
    expect(Exit.isFailure(above) ? Cause.pretty(above.cause) : "").toMatch(/no block 121/)
  })
})

describe("the port's bounds", () => {
  const many = (count: number) =>
    Array.from({ length: count }, (_, index) =>
      formatTronAddress(hexToBytes(`41${(index + 1).toString(16).padStart(40, "0")}`)),
    )

  it.each([
    ["one block more than the widest range", { from_block: 1n, to_block: incoming_block_range_max + 1n }],
    ["an empty range", { from_block: 101n, to_block: 100n }],
    ["one address more than allowed", { addresses: many(incoming_addresses_max + 1) }],
  ])("refuses %s with QueryTooWide before asking the node", async (_name, query) => {
    expect((await refusal(query))._tag).toBe("QueryTooWide")
    expect(node.requests).toEqual([])
  })

  it("accepts the most addresses allowed", async () => {
    expect(await incoming({ addresses: many(incoming_addresses_max) })).toEqual([])
    expect(node.requests).toHaveLength(2)
  })

  it.each([
    [
      "a recipient in Tron hex",
      { addresses: [custody_a, tronUtils.address.toHex(custody_b)] },
      tronUtils.address.toHex(custody_b),
    ],
    [
      "an EVM recipient",
      { addresses: ["0x9858EfFD232B4033E47d90003D41EC34EcaEda94"] },
      "0x9858EfFD232B4033E47d90003D41EC34EcaEda94",
    ],
    [
      "a recipient with a broken checksum",
      { addresses: [`${custody_a.slice(0, -1)}x`] },
      `${custody_a.slice(0, -1)}x`,
    ],
    ["a contract in Tron hex", { contract: tronUtils.address.toHex(usdt) }, tronUtils.address.toHex(usdt)],
  ])("refuses %s with InvalidChainAddress before asking the node", async (_name, query, address) => {
    expect(await refusal(query)).toMatchObject({ _tag: "InvalidChainAddress", address })
    expect(node.requests).toEqual([])
  })

  it("answers no addresses with nothing, without asking the node", async () => {
    expect(await incoming({ addresses: [] })).toEqual([])
    expect(node.requests).toEqual([])
  })
})

describe("TRC-20 Transfer logs", () => {
  const log = transferLog(usdt, payer_0, custody_a, 42n)
  const hex20 = tronUtils.address.toHex(usdt).slice(2)

  it.each([
    ["20-byte hex (java-tron's default)", hex20],
    ["21-byte hex with 41", `41${hex20}`],
    ["upper-case hex", hex20.toUpperCase()],
    ["base58check (visible: true)", usdt],
  ])("reads the contract address spelled as %s", (_name, address) => {
    const bytes = tronLogAddress(address)
    expect(bytes === null ? null : formatTronAddress(bytes)).toBe(usdt)
    const transfer = trc20TransferOfLog({ ...log, address })
    expect(
      transfer === null
        ? null
        : [formatTronAddress(transfer.from), formatTronAddress(transfer.to), transfer.amount],
    ).toEqual([payer_0, custody_a, 42n])
  })

  it.each([
    ["another event", { ...log, topics: [approval_topic, ...log.topics.slice(1)] }],
    ["a fourth topic, even with a data word", { ...log, topics: [...log.topics, "0".repeat(64)] }],
    [
      "an ERC-721 Transfer (four topics, no data)",
      { ...log, topics: [...log.topics, "0".repeat(64)], data: "" },
    ],
    [
      "a recipient word with bits above its 20 bytes",
      { ...log, topics: [log.topics[0] ?? "", log.topics[1] ?? "", `01${(log.topics[2] ?? "").slice(2)}`] },
    ],
    ["data shorter than a word", { ...log, data: log.data.slice(2) }],
    ["an address of 19 bytes", { ...log, address: hex20.slice(2) }],
    ["a topic missing", { ...log, topics: log.topics.slice(0, 2) }],
  ])("refuses %s", (_name, candidate) => {
    expect(trc20TransferOfLog(candidate)).toBeNull()
  })
})

describe("broadcast", () => {
  /** java-tron's refusal: its code, and its message as hex of UTF-8. */
  const refused = (code: string, message: string) => ({
    result: false,
    code,
    message: bytesToHex(utf8ToBytes(message)),
  })
  const send = (raw: string) => Effect.runPromise(Effect.result(adapter.broadcast(raw)))
  const sent = signTokenTransfer(2, usdt, outsider, 1_000_000n)
  const expired = refused("TRANSACTION_EXPIRATION_ERROR", "Transaction expired")

  it("succeeds when the node accepts the bytes or already holds them (DUP_TRANSACTION_ERROR)", async () => {
    expect(await send(sent.raw)).toEqual(Result.succeed({ tx_hash: sent.tx_id }))
    node.broadcast_answer = refused("DUP_TRANSACTION_ERROR", "Dup transaction.")
    expect(await send(sent.raw)).toEqual(Result.succeed({ tx_hash: sent.tx_id }))
  })

  it("takes a refusal of bytes already in a block, or in the node's pool, as the rebroadcast it is", async () => {
    // Landed before a crash, sent again after the expiration to a node that no longer remembers it.
    node.broadcast_answer = expired
    expect(await send(deposit.raw)).toEqual(Result.succeed({ tx_hash: deposit.tx_id }))
    node.broadcast_answer = refused("TAPOS_ERROR", "Tapos check error")
    expect(await send(deposit.raw)).toEqual(Result.succeed({ tx_hash: deposit.tx_id }))
    node.pending.add(sent.tx_id)
    expect(await send(sent.raw)).toEqual(Result.succeed({ tx_hash: sent.tx_id }))
  })

  it("reports bytes past their expiration that the chain does not hold as expired, anything else as rejected", async () => {
    node.broadcast_answer = expired
    const late = await send(sent.raw)
    expect(Result.isFailure(late) && late.failure._tag).toBe("TransactionExpired")
    node.broadcast_answer = refused("SIGERROR", "Validate signature error")
    const bad = await send(sent.raw)
    expect(Result.isFailure(bad) && bad.failure).toMatchObject({
      _tag: "BroadcastRejected",
      tx_hash: sent.tx_id,
      reason: "SIGERROR: Validate signature error",
    })
  })
})
