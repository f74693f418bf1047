/**
 * A payment as a Tron transaction: the port's `TransferIntent` becomes a TransferContract (TRX) or
 * a TriggerSmartContract calling TRC-20 `transfer`, against an explicit reference block and time.
 * Pure: the adapter fetches the reference block; tests pass one.
 *
 * The fee model, in sun, assumes the sender has no staked or free resources left, so every
 * resource is burned as TRX: an upper bound (a sender with free bandwidth pays less).
 * - bandwidth: the signed transaction's bytes plus the 64 bytes java-tron reserves for the result
 *   it attaches, times `getTransactionFee` (sun per byte);
 * - energy (token transfers): the energy a constant call of the same `transfer` uses, times
 *   `getEnergyFee`; a TRC-20 transfer to an address that never held the token uses about twice the
 *   energy of one to an address that did, and the simulation sees which case applies;
 * - activation (TRX sent to an address that does not exist yet): the account creation fees.
 * A token transfer may burn at most its `fee_limit`, so its worst case is bandwidth + fee_limit.
 */
import { equalBytes } from "@noble/curves/utils.js"
import { Result } from "effect"
import { assert } from "../../../domain/assert.ts"
import type { SigningKey } from "../../../domain/custody/derive.ts"
import { InvalidChainAddress, type TransferIntent } from "../../../src/ports/chain.ts"
import { parseTronAddress, type TronAddressBytes, tronAddressOfPublicKey } from "./address.ts"
import {
  encodeRawData,
  encodeSignedTransaction,
  expiration_after_reference_ms_max,
  type ReferenceBlock,
  referenceFields,
  signRawData,
  type TronContract,
  type TronRawData,
  trc20TransferData,
  tronTransactionId,
} from "./transaction.ts"
import type { TronResourcePrices } from "./transport.ts"

/** java-tron adds this many bytes to a transaction's size when charging bandwidth. */
const result_reserve_bytes = 64n
const signature_length_bytes = 65

/** When and against what a transaction is built; in production from the full node's newest block. */
export interface TronBuildContext {
  readonly reference_block: ReferenceBlock
  /** The transaction's creation time; unique per sender so that equal transfers get distinct txIDs. */
  readonly timestamp_ms: bigint
  /** How long after the reference block's time the transaction may be included. */
  readonly lifetime_ms: bigint
  /** The most sun a token transfer may burn for energy. */
  readonly fee_limit_sun: bigint
}

/** A transfer's contract, its addresses checked; built by `tronContractOf`. */
export type TronTransferContract = TronContract & { readonly recipient: TronAddressBytes }

/**
 * The contract that carries `intent` from `owner`, or `InvalidChainAddress` for a recipient or a
 * token contract that is not a base58check `T...` address.
 * @example tronContractOf(owner, { asset: { kind: "native" }, to: "T...", amount: 1_000_000n })
 */
export function tronContractOf(
  owner: TronAddressBytes,
  intent: TransferIntent,
): Result.Result<TronTransferContract, InvalidChainAddress> {
  const to = parseTronAddress(intent.to)
  if (to === null) return Result.fail(new InvalidChainAddress({ address: intent.to }))
  switch (intent.asset.kind) {
    case "native":
      return Result.succeed({ kind: "transfer", owner, to, amount: intent.amount, recipient: to })
    case "token": {
      const contract = parseTronAddress(intent.asset.contract)
      if (contract === null) return Result.fail(new InvalidChainAddress({ address: intent.asset.contract }))
      const data = trc20TransferData(to, intent.amount)
      return Result.succeed({ kind: "trigger_smart_contract", owner, contract, data, recipient: to })
    }
    default:
      return intent.asset satisfies never
  }
}

/**
 * The raw data of `contract` against the context's reference block. Expiration counts from the
 * reference block's time, as nodes check it, and stays within the chain's 24-hour bound.
 * @example encodeRawData(buildRawData(contract, context))
 */
export function buildRawData(contract: TronContract, context: TronBuildContext): TronRawData {
  assert(
    context.lifetime_ms > 0n && context.lifetime_ms <= expiration_after_reference_ms_max,
    "a Tron transaction lives between 0 and 24 hours",
  )
  assert(context.fee_limit_sun >= 0n, "a fee limit is not negative")
  return {
    ...referenceFields(context.reference_block),
    expiration_ms: context.reference_block.timestamp_ms + context.lifetime_ms,
    timestamp_ms: context.timestamp_ms,
    fee_limit_sun: contract.kind === "trigger_smart_contract" ? context.fee_limit_sun : 0n,
    contract,
  }
}

/** A signed transaction and what a caller persists of it. */
export interface TronSignedTransfer {
  /** The bytes to broadcast (`Transaction` protobuf). */
  readonly transaction: Uint8Array
  readonly raw_data: Uint8Array
  readonly tx_id: Uint8Array
  readonly from: TronAddressBytes
}

/**
 * Signs raw data with a custody key (chain "tron", secp256k1). The key must own the contract.
 * @example signTronRawData(deriveSigningKey(seed, { chain: "tron", tenant_index: 0, wallet_index: 0 }), raw)
 */
export function signTronRawData(key: SigningKey, raw: TronRawData): TronSignedTransfer {
  assert(key.curve === "secp256k1", "a Tron key is secp256k1")
  const from = tronAddressOfPublicKey(key.public_key)
  assert(equalBytes(from, raw.contract.owner), "the signing key owns the transaction's contract")
  const raw_data = encodeRawData(raw)
  const signature = signRawData(raw_data, key.exposeSecret())
  return {
    transaction: encodeSignedTransaction(raw_data, [signature]),
    raw_data,
    tx_id: tronTransactionId(raw_data),
    from,
  }
}

/**
 * The bandwidth bytes a transaction with this raw data is charged once signed.
 * @example bandwidthBytes(raw) // e.g. 345n for a TRC-20 transfer
 */
export function bandwidthBytes(raw: TronRawData): bigint {
  const unsigned = encodeRawData(raw)
  const signed = encodeSignedTransaction(unsigned, [new Uint8Array(signature_length_bytes)])
  return BigInt(signed.length) + result_reserve_bytes
}

/** What a transfer costs in sun under the model above: the likely fee and the most it can burn. */
export interface TronFeeQuote {
  readonly estimate_sun: bigint
  readonly max_sun: bigint
}

/**
 * The fee of a transfer, given what the node reports: the energy a simulation used (0 for TRX) and
 * whether the recipient must be activated (only TRX transfers activate accounts).
 * @example tronFeeQuote(raw, prices, { energy_used: 14_650n, activates_recipient: false })
 */
export function tronFeeQuote(
  raw: TronRawData,
  prices: TronResourcePrices,
  usage: { readonly energy_used: bigint; readonly activates_recipient: boolean },
): TronFeeQuote {
  const bandwidth = bandwidthBytes(raw) * prices.bandwidth_sun_per_byte
  const activation = usage.activates_recipient ? prices.account_activation_sun : 0n
  const energy = usage.energy_used * prices.energy_sun_per_unit
  return {
    estimate_sun: bandwidth + activation + energy,
    max_sun: bandwidth + activation + raw.fee_limit_sun,
  }
}
