/**
 * Tron deposit watching (`incomingTransfers`) over the full node HTTP API alone, so that any
 * java-tron full node serves it, not only TronGrid (whose v1 event API is an index of its own). A
 * full node has no log filter, so the range is read block by block, each block with two requests:
 * its transactions' execution results with their logs (`/wallet/gettransactioninfobyblocknum`)
 * and the block itself (`/wallet/getblockbynum`) for its id. At most `block_reads_in_flight_max`
 * blocks are read at a time, so a wide range does not flood the node (10,000 blocks, the port's
 * widest range, are 20,000 requests; watchers of Tron scan narrower ranges when they can).
 *
 * The two reads are not atomic: a reorganisation between them could pair one fork's block id with
 * another fork's logs. So the block must hold exactly the transactions whose results were read, or
 * both are read again (at most `block_read_attempts_max` times; then a defect, and the caller's scan
 * is retried). A block the node does not have (above its head) is a defect too: answering "no
 * transfers there" would let a watcher move its cursor past blocks it never read.
 *
 * `log_index` is the log's position in its transaction's `log[]`, from 0, not its position in the
 * block as on EVM chains: java-tron reports logs per transaction and numbers none of them. The pair
 * (tx_hash, log_index) still names one log, and it stays the same when a reorganisation re-includes
 * the transaction elsewhere, so a deposit's ledger id does not move with it. `transactionStatus`
 * reports the same index from the transaction's own result (both decode logs with trc20-log.ts),
 * so a proof from either names the same log.
 */
import { bytesToHex } from "@noble/hashes/utils.js"
import { Effect } from "effect"
import { assert } from "../../../domain/assert.ts"
import {
  type IncomingTransfer,
  type IncomingTransfersQuery,
  InvalidChainAddress,
  incoming_addresses_max,
  incoming_block_range_max,
  QueryTooWide,
} from "../../../src/ports/chain.ts"
import { formatTronAddress, parseTronAddress } from "./address.ts"
import type { TronBlock, TronBlockTransactionInfo, TronTransport } from "./transport.ts"
import { trc20TransferOfLog } from "./trc20-log.ts"

/** How many times a block and its results are read before their mismatch is a defect. */
const block_read_attempts_max = 3

/** A transfer found in a block, before the head is known to count its confirmations. */
type Found = Omit<IncomingTransfer, "proof"> & {
  readonly proof: Omit<IncomingTransfer["proof"], "confirmations">
}

/**
 * Token transfers of `query.contract` into `query.addresses` over the query's blocks, in chain
 * order (block, transaction, log). Only successful transactions count.
 * @example incomingTransfers(transport, 4, { contract: "TR7N...", addresses: ["TUEZ..."], from_block: 70_000_000n, to_block: 70_000_099n })
 */
export function incomingTransfers(
  transport: TronTransport,
  block_reads_in_flight_max: number,
  query: IncomingTransfersQuery,
): Effect.Effect<ReadonlyArray<IncomingTransfer>, InvalidChainAddress | QueryTooWide> {
  return Effect.gen(function* () {
    assert(
      Number.isInteger(block_reads_in_flight_max) && block_reads_in_flight_max >= 1,
      "at least one block is read at a time",
    )
    const span = query.to_block - query.from_block + 1n
    if (span < 1n || span > incoming_block_range_max) {
      return yield* new QueryTooWide({ reason: `${span} blocks; 1 to ${incoming_block_range_max} allowed` })
    }
    if (query.from_block < 0n) return yield* new QueryTooWide({ reason: "blocks are numbered from 0" })
    if (query.addresses.length === 0) return []
    if (query.addresses.length > incoming_addresses_max) {
      return yield* new QueryTooWide({
        reason: `${query.addresses.length} addresses; ${incoming_addresses_max} at most`,
      })
    }
    const contract = parseTronAddress(query.contract)
    if (contract === null) return yield* new InvalidChainAddress({ address: query.contract })
    const recipients = new Set<string>()
    for (const address of query.addresses) {
      const bytes = parseTronAddress(address)
      if (bytes === null) return yield* new InvalidChainAddress({ address })
      recipients.add(bytesToHex(bytes))
    }
    const filter = { contract: query.contract, contract_hex: bytesToHex(contract), recipients }
    // The genesis block executes no contract, and nodes answer nothing for its results.
    const numbers: Array<bigint> = []
    for (let number = query.from_block === 0n ? 1n : query.from_block; number <= query.to_block; number += 1n)
      numbers.push(number)
    const per_block = yield* Effect.forEach(
      numbers,
      (number) => readBlock(transport, number).pipe(Effect.map((read) => transfersIn(read, number, filter))),
      { concurrency: block_reads_in_flight_max },
    )
    const found = per_block.flat()
    if (found.length === 0) return []
    // Read after the blocks, so the head is at or above every block read.
    const head = (yield* transport.nowBlock()).number
    return found.map(
      (transfer): IncomingTransfer => ({
        ...transfer,
        proof: { ...transfer.proof, confirmations: Number(head - transfer.proof.block_number + 1n) },
      }),
    )
  })
}

interface BlockRead {
  readonly block: TronBlock
  readonly infos: ReadonlyArray<TronBlockTransactionInfo>
}

/** A block and its transactions' results, read until both describe the same transactions. */
function readBlock(transport: TronTransport, number: bigint): Effect.Effect<BlockRead> {
  return Effect.gen(function* () {
    for (let attempt = 1; attempt <= block_read_attempts_max; attempt += 1) {
      const block = yield* transport.block(number)
      if (block === null)
        return yield* Effect.die(new Error(`the Tron node has no block ${number} (above its head?)`))
      const infos = yield* transport.blockTransactionInfos(number)
      for (const info of infos) {
        if (info.block_number !== number)
          return yield* Effect.die(
            new Error(`the Tron node answered block ${info.block_number} for ${number}`),
          )
      }
      if (sameTransactions(block.tx_ids, infos)) return { block, infos }
    }
    return yield* Effect.die(
      new Error(
        `Tron block ${number}: its transactions and their results differed in ${block_read_attempts_max} reads`,
      ),
    )
  })
}

/** Whether the results are those of exactly the block's transactions (order aside). */
function sameTransactions(tx_ids: ReadonlyArray<string>, infos: ReadonlyArray<TronBlockTransactionInfo>) {
  if (tx_ids.length !== infos.length) return false
  const expected = new Set(tx_ids)
  return infos.every((info) => expected.has(info.tx_id))
}

interface TransferFilter {
  /** The query's own spelling, returned as is. */
  readonly contract: string
  /** 21-byte hex, the canonical form logs are compared in. */
  readonly contract_hex: string
  /** 21-byte hex of each watched address. */
  readonly recipients: ReadonlySet<string>
}

/** The block's Transfer logs of the contract into watched addresses, from successful transactions. */
function transfersIn(read: BlockRead, number: bigint, filter: TransferFilter): ReadonlyArray<Found> {
  const found: Array<Found> = []
  const block_hash = bytesToHex(read.block.id)
  for (const info of read.infos) {
    if (!info.succeeded) continue
    info.logs.forEach((log, log_index) => {
      const transfer = trc20TransferOfLog(log)
      if (transfer === null || bytesToHex(transfer.contract) !== filter.contract_hex) return
      if (!filter.recipients.has(bytesToHex(transfer.to))) return
      found.push({
        contract: filter.contract,
        from: formatTronAddress(transfer.from),
        to: formatTronAddress(transfer.to),
        amount: transfer.amount,
        proof: { tx_hash: info.tx_id, block_number: number, block_hash, log_index },
      })
    })
  }
  return found
}
