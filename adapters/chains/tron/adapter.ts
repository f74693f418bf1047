/**
 * The Tron chain adapter: TRX (TransferContract) and TRC-20 (TriggerSmartContract `transfer`)
 * payments, built and signed offline (transaction.ts, transfer.ts) against the reference block a
 * full node reports, then broadcast through the same node (transport.ts).
 *
 * Where Tron differs from the port's EVM-shaped words:
 * - There is no nonce. Replay protection is TAPOS plus expiration: a signed transaction can be
 *   included only until `expiration` (reference block time + `lifetime_ms`), so rebroadcasting the
 *   persisted bytes is safe and idempotent until then, and after it the transaction can never land.
 *   A refusal of bytes the chain already holds is still a successful rebroadcast (see `broadcast`).
 *   `SignedTransfer.nonce` is therefore always 0, and `SignOptions.nonce` is ignored.
 * - Two identical transfers would have identical txIDs if they shared a timestamp; this adapter's
 *   timestamps strictly increase per instance (one job per sender address, as the port asks).
 * - `log_index` is the Transfer event's index within its transaction's logs: a full node reports
 *   logs per transaction, not per block. `transactionStatus` and `incomingTransfers` (incoming.ts,
 *   which says why) count the same way, so their proofs of one log agree.
 * - Hashes are bare lower-case hex, as Tron explorers show them; raw bytes are 0x-prefixed hex.
 */
import { equalBytes } from "@noble/curves/utils.js"
import { bytesToHex, hexToBytes } from "@noble/hashes/utils.js"
import { Effect } from "effect"
import { assert } from "../../../domain/assert.ts"
import type { SigningKey } from "../../../domain/custody/derive.ts"
import {
  BroadcastRejected,
  type ChainAdapter,
  type ChainAsset,
  type InclusionProof,
  InsufficientFundsForFee,
  InvalidChainAddress,
  type SignedTransfer,
  TransactionExpired,
  type TransactionStatus,
  type TransferIntent,
  TransferWouldRevert,
} from "../../../src/ports/chain.ts"
import {
  formatTronAddress,
  parseTronAddress,
  type TronAddressBytes,
  tronAddressOfPublicKey,
} from "./address.ts"
import { incomingTransfers } from "./incoming.ts"
import {
  decodeRawData,
  decodeTrc20TransferData,
  type TronContract,
  type TronRawData,
  verifySignedTransaction,
} from "./transaction.ts"
import { buildRawData, signTronRawData, type TronFeeQuote, tronContractOf, tronFeeQuote } from "./transfer.ts"
import type { TronLog, TronTransport } from "./transport.ts"
import { trc20TransferOfLog } from "./trc20-log.ts"

export interface TronChainConfig {
  /** How long after its reference block a signed transaction may be included (at most 24 hours). */
  readonly lifetime_ms: bigint
  /** The most sun one TRC-20 transfer may burn for energy (`fee_limit`). */
  readonly fee_limit_sun: bigint
  /** Confirmations (1 = in the newest block) from which a transaction counts as finalized; 19 = solidified. */
  readonly finality_confirmations: number
  /** How many blocks `incomingTransfers` reads at a time (two requests each); default 4. */
  readonly block_reads_in_flight_max?: number
}

const block_reads_in_flight_default = 4
/** `balanceOf(address)`. */
const balance_of_selector = "70a08231"
/** The node reports a rebroadcast of a transaction it already holds with this code. */
const duplicate_code = "DUP_TRANSACTION_ERROR"
/** The node refuses a transaction past its `expiration` with this code: it can never be included. */
const expiration_code = "TRANSACTION_EXPIRATION_ERROR"

/**
 * A Tron adapter over one full node.
 * @example makeTronAdapter({ lifetime_ms: 120_000n, fee_limit_sun: 100_000_000n, finality_confirmations: 19 }, makeTronHttpTransport(...))
 */
export function makeTronAdapter(config: TronChainConfig, transport: TronTransport): ChainAdapter {
  let timestamp_last_ms = 0n
  /** Strictly increasing per instance, so that equal transfers signed in one millisecond differ. */
  const nextTimestamp = (now_ms: bigint): bigint => {
    timestamp_last_ms = now_ms > timestamp_last_ms ? now_ms : timestamp_last_ms + 1n
    return timestamp_last_ms
  }

  /** Builds the raw data against the node's newest block and prices it; signs nothing. */
  const quote = (owner: TronAddressBytes, intent: TransferIntent, timestamp_ms: bigint | null) =>
    Effect.gen(function* () {
      const contract = yield* Effect.fromResult(tronContractOf(owner, intent))
      const reference_block = yield* transport.nowBlock()
      const raw = buildRawData(contract, {
        reference_block,
        timestamp_ms: timestamp_ms ?? reference_block.timestamp_ms,
        lifetime_ms: config.lifetime_ms,
        fee_limit_sun: config.fee_limit_sun,
      })
      const prices = yield* transport.resourcePrices()
      const usage = yield* resourceUsage(raw, contract.recipient)
      const fee = tronFeeQuote(raw, prices, usage)
      if (fee.estimate_sun > fee.max_sun) {
        return yield* new TransferWouldRevert({
          reason: `energy would cost ${fee.estimate_sun} sun, over the fee limit`,
        })
      }
      return { raw, fee }
    })

  const resourceUsage = (raw: TronRawData, recipient: TronAddressBytes) =>
    Effect.gen(function* () {
      const contract = raw.contract
      if (contract.kind === "transfer") {
        const account = yield* transport.account(formatTronAddress(recipient))
        return { energy_used: 0n, activates_recipient: !account.exists }
      }
      const simulation = yield* transport.simulate(
        formatTronAddress(contract.owner),
        formatTronAddress(contract.contract),
        contract.data,
      )
      if (simulation.reverted) return yield* new TransferWouldRevert({ reason: simulation.reason })
      return { energy_used: simulation.energy_used, activates_recipient: false }
    })

  const requireFunds = (owner: TronAddressBytes, intent: TransferIntent, fee: TronFeeQuote) =>
    Effect.gen(function* () {
      const account = yield* transport.account(formatTronAddress(owner))
      const required = fee.estimate_sun + (intent.asset.kind === "native" ? intent.amount : 0n)
      if (account.balance_sun < required) {
        return yield* new InsufficientFundsForFee({
          address: formatTronAddress(owner),
          required,
          available: account.balance_sun,
        })
      }
    })

  return {
    estimateTransferFee: (from, intent) =>
      Effect.gen(function* () {
        const owner = parseTronAddress(from)
        if (owner === null) return yield* new InvalidChainAddress({ address: from })
        const { fee } = yield* quote(owner, intent, null)
        return fee.estimate_sun
      }),
    signTransfer: (key, intent) =>
      Effect.gen(function* () {
        const owner = tronAddressOfPublicKey(key.public_key)
        const now_ms = BigInt(Date.now())
        const { raw, fee } = yield* quote(owner, intent, nextTimestamp(now_ms))
        yield* requireFunds(owner, intent, fee)
        return signed(key, raw, fee)
      }),
    broadcast: (raw) =>
      Effect.gen(function* () {
        const bytes = hexToBytes(raw.replace(/^0x/, ""))
        const verified = verifySignedTransaction(bytes)
        assert(verified !== null, "broadcast gets bytes signTransfer made")
        const tx_hash = bytesToHex(verified.tx_id)
        const answer = yield* transport.broadcastHex(bytesToHex(bytes))
        if (answer.accepted || answer.code === duplicate_code) return { tx_hash }
        // A node names a duplicate only while it remembers the transaction's id: bytes that landed
        // before a crash, sent again after their expiration (to another node, or one that
        // restarted), can be refused as expired or for their TaPoS. Bytes the chain holds (in a
        // block, or waiting in the node's pool) are a rebroadcast all the same, and succeed.
        if ((yield* transport.transactionInfo(tx_hash)) !== null) return { tx_hash }
        if (yield* transport.isPending(tx_hash)) return { tx_hash }
        if (answer.code === expiration_code) return yield* new TransactionExpired({ tx_hash })
        return yield* new BroadcastRejected({ tx_hash, reason: `${answer.code}: ${answer.message}` })
      }),
    transactionStatus: (tx_hash, log_index) =>
      transactionStatus(transport, config, tx_hash, log_index === undefined),
    balance: (address, asset) => balance(transport, address, asset),
    blockNumber: () => transport.nowBlock().pipe(Effect.map((block) => block.number)),
    incomingTransfers: (query) =>
      incomingTransfers(transport, config.block_reads_in_flight_max ?? block_reads_in_flight_default, query),
  }
}

function signed(key: SigningKey, raw: TronRawData, fee: TronFeeQuote): SignedTransfer {
  const transfer = signTronRawData(key, raw)
  return {
    raw: `0x${bytesToHex(transfer.transaction)}`,
    tx_hash: bytesToHex(transfer.tx_id),
    from: formatTronAddress(transfer.from),
    nonce: 0,
    fee_max: fee.max_sun,
  }
}

/**
 * `own_transfer`: the transaction is one the platform signed (no `log_index` given), so a TRC-20
 * transfer counts only with its Transfer log; a deposit's status (with its log's index) is its
 * execution result's, since a sender's contract may move the tokens by a call of its own.
 */
function transactionStatus(
  transport: TronTransport,
  config: TronChainConfig,
  tx_hash: string,
  own_transfer: boolean,
): Effect.Effect<TransactionStatus> {
  return Effect.gen(function* () {
    const info = yield* transport.transactionInfo(tx_hash)
    if (info === null) {
      const pending = yield* transport.isPending(tx_hash)
      return pending ? { status: "seen", tx_hash } : { status: "dropped", tx_hash }
    }
    const head = yield* transport.nowBlock()
    const block = yield* transport.block(info.block_number)
    // The block left the node's chain since the info was read, or the block now at that height no
    // longer holds the transaction (a reorganisation): it is in no block the node has now.
    if (block === null || !block.tx_ids.includes(tx_hash.toLowerCase())) return { status: "seen", tx_hash }
    const confirmations = Number(head.number - info.block_number + 1n)
    const proof: InclusionProof = {
      tx_hash,
      block_number: info.block_number,
      block_hash: bytesToHex(block.id),
      log_index: info.succeeded ? transferLogIndex(info.logs) : null,
      confirmations,
    }
    // A failure is final only with its block: a reorganisation can still order the transaction
    // where it succeeds, so until then it reads confirmed (in a block, not yet decided).
    if (confirmations < config.finality_confirmations) return { status: "confirmed", proof }
    if (!info.succeeded) return { status: "reverted", proof }
    if (!own_transfer) return { status: "finalized", proof }
    const raw_data = yield* transport.transactionRawData(tx_hash)
    const moved =
      raw_data === null ? undefined : trc20TransferLog(decodeRawData(raw_data).contract, info.logs)
    if (moved === undefined) return { status: "finalized", proof }
    // A token that answers `transfer` with false, or moves nothing without failing, leaves the
    // call's success without its Transfer log: nothing moved, as in a revert (the fee was burned).
    if (moved === null) return { status: "reverted", proof: { ...proof, log_index: null } }
    return { status: "finalized", proof: { ...proof, log_index: moved } }
  })
}

/**
 * For a direct TRC-20 `transfer(to, amount)` call (the only token call the platform signs), the index
 * of the token's log that records a transfer from the caller to `to`, or null without one; undefined
 * for any other transaction (TRX, a deposit made through another contract), whose success is its
 * execution result's.
 */
function trc20TransferLog(contract: TronContract, logs: ReadonlyArray<TronLog>): number | null | undefined {
  if (contract.kind !== "trigger_smart_contract") return undefined
  const call = decodeTrc20TransferData(contract.data)
  if (call === null) return undefined
  const index = logs.findIndex((log) => {
    const transfer = trc20TransferOfLog(log)
    return (
      transfer !== null &&
      equalBytes(transfer.contract, contract.contract) &&
      equalBytes(transfer.from, contract.owner) &&
      equalBytes(transfer.to, call.to)
    )
  })
  return index === -1 ? null : index
}

/** The first TRC-20 Transfer log's index among the transaction's logs, as incoming.ts counts it. */
function transferLogIndex(logs: ReadonlyArray<TronLog>): number | null {
  const index = logs.findIndex((log) => trc20TransferOfLog(log) !== null)
  return index === -1 ? null : index
}

function balance(
  transport: TronTransport,
  address: string,
  asset: ChainAsset,
): Effect.Effect<bigint, InvalidChainAddress> {
  return Effect.gen(function* () {
    const owner = parseTronAddress(address)
    if (owner === null) return yield* new InvalidChainAddress({ address })
    if (asset.kind === "native") return (yield* transport.account(address)).balance_sun
    const contract = parseTronAddress(asset.contract)
    if (contract === null) return yield* new InvalidChainAddress({ address: asset.contract })
    const word = `${"0".repeat(24)}${bytesToHex(owner.subarray(1))}`
    const simulation = yield* transport.simulate(
      address,
      asset.contract,
      hexToBytes(`${balance_of_selector}${word}`),
    )
    if (simulation.reverted) return yield* Effect.die(new Error(`balanceOf reverted: ${simulation.reason}`))
    assert(simulation.result.length === 32, "balanceOf returns one uint256")
    return BigInt(`0x${bytesToHex(simulation.result)}`)
  })
}
