/**
 * Tron transactions, built and signed offline. A transaction is the protobuf `Transaction`
 * `{ raw raw_data = 1; repeated bytes signature = 2; }`; its id (txID) is the sha256 of the
 * raw_data bytes, and its signature is secp256k1 over the txID, 65 bytes r || s || v (v = 27 + the
 * recovery bit). No node is needed once the reference block (TAPOS: the chain refuses a
 * transaction whose ref_block_bytes/ref_block_hash do not name a recent block of its own fork) and
 * the times are known.
 *
 * Only the two contracts a payment needs are written and read: TransferContract (TRX, type 1) and
 * TriggerSmartContract (type 31) carrying a TRC-20 `transfer(address,uint256)` call.
 */
import { secp256k1 } from "@noble/curves/secp256k1.js"
import { equalBytes } from "@noble/curves/utils.js"
import { sha256 } from "@noble/hashes/sha2.js"
import { bytesToHex, concatBytes, hexToBytes, utf8ToBytes } from "@noble/hashes/utils.js"
import { assert } from "../../../domain/assert.ts"
import {
  type TronAddressBytes,
  tron_address_length_bytes,
  tron_address_prefix,
  tronAddressOfPublicKey,
} from "./address.ts"
import { bytesField, decodeFields, int64Field, MalformedProtobuf, type ProtobufField } from "./protobuf.ts"

/** The longest a transaction may live after its reference block, by the chain's own rule. */
export const expiration_after_reference_ms_max = 24n * 60n * 60n * 1000n
/** A TRC-20 amount is a uint256. */
const uint256_max = 2n ** 256n - 1n
const int64_max = 2n ** 63n - 1n
/** `transfer(address,uint256)`: the first four bytes of its keccak-256. */
export const trc20_transfer_selector = hexToBytes("a9059cbb")
const abi_word_bytes = 32
const signature_length_bytes = 65
const ethereum_style_v_offset = 27

const contract_type = { transfer: 1, trigger_smart_contract: 31 } as const
const type_url_prefix = "type.googleapis.com/protocol."

/** The block a transaction refers to (TAPOS), as the full node's `getnowblock` reports it. */
export interface ReferenceBlock {
  readonly number: bigint
  /** The 32-byte block id; its first eight bytes are the block number, big-endian. */
  readonly id: Uint8Array
  readonly timestamp_ms: bigint
}

/** What the transaction does: exactly one contract, as Tron allows today. */
export type TronContract =
  | {
      readonly kind: "transfer"
      readonly owner: TronAddressBytes
      readonly to: TronAddressBytes
      /** In sun (1 TRX = 1,000,000 sun). */
      readonly amount: bigint
    }
  | {
      readonly kind: "trigger_smart_contract"
      readonly owner: TronAddressBytes
      readonly contract: TronAddressBytes
      /** ABI call data; for a TRC-20 transfer, see `trc20TransferData`. */
      readonly data: Uint8Array
    }

/** The signed part of a transaction (`Transaction.raw`), restricted to the fields payments use. */
export interface TronRawData {
  /** Bytes 6..8 of the reference block's number (its low 16 bits, big-endian). */
  readonly ref_block_bytes: Uint8Array
  /** Bytes 8..16 of the reference block's id. */
  readonly ref_block_hash: Uint8Array
  readonly expiration_ms: bigint
  readonly timestamp_ms: bigint
  /** The most sun the transaction may burn for energy; 0 (absent) for a TRX transfer. */
  readonly fee_limit_sun: bigint
  readonly contract: TronContract
}

/** A decoded signed transaction: the raw data's bytes as signed, and its signatures. */
export interface TronSignedTransaction {
  readonly raw_data: Uint8Array
  readonly signatures: ReadonlyArray<Uint8Array>
}

/**
 * The TAPOS fields of a reference block. Checks that the id starts with the block's number, which
 * is how Tron forms block ids, so that a mixed-up number and id never reach a signature.
 * @example referenceFields(block).ref_block_bytes // the low 16 bits of block.number
 */
export function referenceFields(
  block: ReferenceBlock,
): Pick<TronRawData, "ref_block_bytes" | "ref_block_hash"> {
  assert(block.id.length === 32, "a Tron block id is 32 bytes")
  const number_bytes = new Uint8Array(8)
  new DataView(number_bytes.buffer).setBigUint64(0, block.number, false)
  assert(equalBytes(block.id.subarray(0, 8), number_bytes), "a Tron block id starts with its block number")
  return { ref_block_bytes: block.id.slice(6, 8), ref_block_hash: block.id.slice(8, 16) }
}

/**
 * The call data of a TRC-20 `transfer(to, amount)`: the selector a9059cbb, the recipient's 20
 * address bytes (without the 0x41 prefix) left-padded to 32 bytes, and the amount as a uint256.
 * @example bytesToHex(trc20TransferData(to, 1n)).slice(0, 8) // "a9059cbb"
 */
export function trc20TransferData(to: TronAddressBytes, amount: bigint): Uint8Array {
  assert(amount >= 0n && amount <= uint256_max, "a TRC-20 amount is a uint256")
  const recipient = new Uint8Array(abi_word_bytes)
  recipient.set(to.subarray(1), abi_word_bytes - 20)
  const value = hexToBytes(amount.toString(16).padStart(abi_word_bytes * 2, "0"))
  return concatBytes(trc20_transfer_selector, recipient, value)
}

/**
 * The recipient and amount of TRC-20 `transfer` call data, or null for any other call.
 * @example decodeTrc20TransferData(trc20TransferData(to, 5n))?.amount // 5n
 */
export function decodeTrc20TransferData(
  data: Uint8Array,
): { readonly to: TronAddressBytes; readonly amount: bigint } | null {
  if (data.length !== 4 + 2 * abi_word_bytes) return null
  if (!equalBytes(data.subarray(0, 4), trc20_transfer_selector)) return null
  const padding = data.subarray(4, 4 + abi_word_bytes - 20)
  if (padding.some((byte) => byte !== 0)) return null
  const to = concatBytes(
    Uint8Array.of(tron_address_prefix),
    data.subarray(4 + abi_word_bytes - 20, 4 + abi_word_bytes),
  )
  const amount = BigInt(`0x${bytesToHex(data.subarray(4 + abi_word_bytes))}`)
  return { to: to as TronAddressBytes, amount }
}

/**
 * The protobuf bytes of `Transaction.raw`: what the txID hashes and the signature covers.
 * @example tronTransactionId(encodeRawData(raw))
 */
export function encodeRawData(raw: TronRawData): Uint8Array {
  assert(raw.ref_block_bytes.length === 2, "ref_block_bytes is 2 bytes")
  assert(raw.ref_block_hash.length === 8, "ref_block_hash is 8 bytes")
  assert(raw.expiration_ms > raw.timestamp_ms, "a transaction expires after it is made")
  return concatBytes(
    bytesField(1, raw.ref_block_bytes),
    bytesField(4, raw.ref_block_hash),
    int64Field(8, raw.expiration_ms),
    bytesField(11, encodeContract(raw.contract)),
    int64Field(14, raw.timestamp_ms),
    int64Field(18, raw.fee_limit_sun),
  )
}

function encodeContract(contract: TronContract): Uint8Array {
  const [type, name, value] = contractPayload(contract)
  const any = concatBytes(bytesField(1, utf8ToBytes(`${type_url_prefix}${name}`)), bytesField(2, value))
  return concatBytes(int64Field(1, BigInt(type)), bytesField(2, any))
}

function contractPayload(contract: TronContract): readonly [number, string, Uint8Array] {
  switch (contract.kind) {
    case "transfer":
      assert(contract.amount > 0n && contract.amount <= int64_max, "a TRX amount is in 1..2^63-1 sun")
      return [
        contract_type.transfer,
        "TransferContract",
        concatBytes(
          bytesField(1, contract.owner),
          bytesField(2, contract.to),
          int64Field(3, contract.amount),
        ),
      ]
    case "trigger_smart_contract":
      return [
        contract_type.trigger_smart_contract,
        "TriggerSmartContract",
        concatBytes(
          bytesField(1, contract.owner),
          bytesField(2, contract.contract),
          bytesField(4, contract.data),
        ),
      ]
    default:
      return contract satisfies never
  }
}

/**
 * Reads `Transaction.raw` bytes back. Throws `MalformedProtobuf` when they are not a single
 * TransferContract or TriggerSmartContract transaction with well-formed addresses, or when they
 * carry fields this adapter never writes (a call value, token fields, auths, memo data, scripts):
 * a transaction is only trusted here if this adapter could have built it.
 * @example decodeRawData(encodeRawData(raw)).contract.kind // "transfer"
 */
export function decodeRawData(bytes: Uint8Array): TronRawData {
  const fields = decodeFields(bytes)
  const contracts = fields.filter((field) => field.number === 11)
  const contract = contracts[0]
  if (contracts.length !== 1 || contract === undefined || contract.wire !== "bytes") {
    throw new MalformedProtobuf("a transaction holds exactly one contract")
  }
  onlyFields(fields, [1, 4, 8, 11, 14, 18])
  return {
    ref_block_bytes: bytesOf(fields, 1),
    ref_block_hash: bytesOf(fields, 4),
    expiration_ms: varintOf(fields, 8),
    timestamp_ms: varintOf(fields, 14),
    fee_limit_sun: varintOf(fields, 18),
    contract: decodeContract(contract.value),
  }
}

function decodeContract(bytes: Uint8Array): TronContract {
  const fields = decodeFields(bytes)
  onlyFields(fields, [1, 2])
  const type = Number(varintOf(fields, 1))
  const any = decodeFields(bytesOf(fields, 2))
  onlyFields(any, [1, 2])
  const type_url = new TextDecoder().decode(bytesOf(any, 1))
  const value = decodeFields(bytesOf(any, 2))
  if (type === contract_type.transfer && type_url === `${type_url_prefix}TransferContract`) {
    onlyFields(value, [1, 2, 3])
    return {
      kind: "transfer",
      owner: addressOf(value, 1),
      to: addressOf(value, 2),
      amount: varintOf(value, 3),
    }
  }
  if (
    type === contract_type.trigger_smart_contract &&
    type_url === `${type_url_prefix}TriggerSmartContract`
  ) {
    onlyFields(value, [1, 2, 4])
    return {
      kind: "trigger_smart_contract",
      owner: addressOf(value, 1),
      contract: addressOf(value, 2),
      data: bytesOf(value, 4),
    }
  }
  throw new MalformedProtobuf(`unsupported contract type ${type} (${type_url})`)
}

function onlyFields(fields: ReadonlyArray<ProtobufField>, allowed: ReadonlyArray<number>): void {
  const seen = new Set<number>()
  for (const field of fields) {
    if (!allowed.includes(field.number)) throw new MalformedProtobuf(`unexpected field ${field.number}`)
    if (seen.has(field.number)) throw new MalformedProtobuf(`repeated field ${field.number}`)
    seen.add(field.number)
  }
}

function bytesOf(fields: ReadonlyArray<ProtobufField>, number: number): Uint8Array {
  const field = fields.find((candidate) => candidate.number === number)
  if (field === undefined) return new Uint8Array(0)
  if (field.wire !== "bytes") throw new MalformedProtobuf(`field ${number} is not length-delimited`)
  return field.value
}

function varintOf(fields: ReadonlyArray<ProtobufField>, number: number): bigint {
  const field = fields.find((candidate) => candidate.number === number)
  if (field === undefined) return 0n
  if (field.wire !== "varint") throw new MalformedProtobuf(`field ${number} is not a varint`)
  return field.value
}

function addressOf(fields: ReadonlyArray<ProtobufField>, number: number): TronAddressBytes {
  const bytes = bytesOf(fields, number)
  if (bytes.length !== tron_address_length_bytes || bytes[0] !== tron_address_prefix) {
    throw new MalformedProtobuf(`field ${number} is not a Tron address`)
  }
  return bytes as TronAddressBytes
}

/**
 * The txID: sha256 of the raw data's bytes, 32 bytes (the explorers' 64 hex digits).
 * @example bytesToHex(tronTransactionId(raw_data))
 */
export function tronTransactionId(raw_data: Uint8Array): Uint8Array {
  return sha256(raw_data)
}

/**
 * Signs raw data: secp256k1 over its txID (deterministic, RFC 6979, low s), as r || s || v with
 * v = 27 + recovery bit. The caller wipes nothing: `private_key` is the copy `exposeSecret` made.
 * @example signRawData(raw_data, key.exposeSecret()).length // 65
 */
export function signRawData(raw_data: Uint8Array, private_key: Uint8Array): Uint8Array {
  const recovered = secp256k1.sign(tronTransactionId(raw_data), private_key, {
    prehash: false,
    format: "recovered",
  })
  const signature = secp256k1.Signature.fromBytes(recovered, "recovered")
  assert(signature.recovery !== undefined, "a recovered signature has its recovery bit")
  return concatBytes(
    signature.toBytes("compact"),
    Uint8Array.of(ethereum_style_v_offset + signature.recovery),
  )
}

/**
 * The address that made a 65-byte r || s || v signature over `tx_id`, or null when the signature
 * is malformed or recovers no key.
 * @example formatTronAddress(recoverSigner(tx_id, signature)!)
 */
export function recoverSigner(tx_id: Uint8Array, signature: Uint8Array): TronAddressBytes | null {
  if (signature.length !== signature_length_bytes) return null
  const v = signature[64]
  if (v === undefined) return null
  const recovery = v >= ethereum_style_v_offset ? v - ethereum_style_v_offset : v
  if (recovery !== 0 && recovery !== 1) return null
  try {
    const point = secp256k1.Signature.fromBytes(signature.subarray(0, 64), "compact")
      .addRecoveryBit(recovery)
      .recoverPublicKey(tx_id)
    return tronAddressOfPublicKey(point.toBytes(true))
  } catch {
    return null
  }
}

/**
 * The bytes to broadcast: `Transaction { raw_data = 1; signature = 2 }`.
 * @example bytesToHex(encodeSignedTransaction(raw_data, [signature])) // for /wallet/broadcasthex
 */
export function encodeSignedTransaction(
  raw_data: Uint8Array,
  signatures: ReadonlyArray<Uint8Array>,
): Uint8Array {
  assert(signatures.length > 0, "a signed transaction has a signature")
  return concatBytes(bytesField(1, raw_data), ...signatures.map((signature) => bytesField(2, signature)))
}

/**
 * Splits signed transaction bytes into raw data and signatures; ignores `ret` (field 5), which
 * nodes attach to executed transactions and which is not signed. Throws `MalformedProtobuf`.
 * @example decodeSignedTransaction(bytes).signatures.length // 1
 */
export function decodeSignedTransaction(bytes: Uint8Array): TronSignedTransaction {
  const fields = decodeFields(bytes)
  const raw = fields.filter((field) => field.number === 1)
  if (raw.length !== 1) throw new MalformedProtobuf("a transaction holds one raw_data")
  const signatures = fields
    .filter((field) => field.number === 2)
    .map((field) => {
      if (field.wire !== "bytes") throw new MalformedProtobuf("a signature is length-delimited")
      return field.value
    })
  return { raw_data: bytesOf(raw, 1), signatures }
}

/**
 * Checks signed transaction bytes as a node would before accepting them from us: they decode to a
 * transaction this adapter builds, carry one signature, and that signature over the txID recovers
 * to the contract's owner. Returns the txID and the decoded raw data, or null when any check fails.
 * @example verifySignedTransaction(bytes)?.raw.contract.owner
 */
export function verifySignedTransaction(
  bytes: Uint8Array,
): { readonly tx_id: Uint8Array; readonly raw: TronRawData } | null {
  let signed: TronSignedTransaction
  let raw: TronRawData
  try {
    signed = decodeSignedTransaction(bytes)
    raw = decodeRawData(signed.raw_data)
  } catch (error) {
    if (error instanceof MalformedProtobuf) return null
    throw error
  }
  const signature = signed.signatures[0]
  if (signed.signatures.length !== 1 || signature === undefined) return null
  const tx_id = tronTransactionId(signed.raw_data)
  const signer = recoverSigner(tx_id, signature)
  if (signer === null || !equalBytes(signer, raw.contract.owner)) return null
  return { tx_id, raw }
}
