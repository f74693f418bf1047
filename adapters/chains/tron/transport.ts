/**
 * What the Tron adapter asks of a full node. Building and signing need only `nowBlock` (the TAPOS
 * reference block); everything else reads or writes chain state. Production uses the HTTP full
 * node API (http-transport.ts). No Tron node runs here: tests exercise the offline parts
 * (transaction.ts) with explicit reference blocks, and the HTTP transport itself against a local
 * server answering in the full node's documented JSON shapes, never a fake of this interface.
 *
 * A node that cannot be reached or answers malformed JSON is a defect of the effect (the calling
 * job retries); what a node answers on purpose (a refused broadcast, an unknown transaction) is data.
 */
import type { Effect } from "effect"
import type { ReferenceBlock } from "./transaction.ts"

/** The node's answer to a broadcast: accepted, or refused with its code (`DUP_TRANSACTION_ERROR`, ...). */
export type TronBroadcastAnswer =
  | { readonly accepted: true }
  | { readonly accepted: false; readonly code: string; readonly message: string }

/** One event log of an executed transaction, as `gettransactioninfobyid` reports it. */
export interface TronLog {
  /** The emitting contract, 20 bytes hex (no 0x41 prefix), as the node reports it. */
  readonly address: string
  readonly topics: ReadonlyArray<string>
  readonly data: string
}

/** An executed transaction: its block and whether its contract succeeded. */
export interface TronTransactionInfo {
  readonly block_number: bigint
  /** True for SUCCESS; false for REVERT, OUT_OF_ENERGY and every other failed execution. */
  readonly succeeded: boolean
  readonly logs: ReadonlyArray<TronLog>
}

/** One executed transaction of a block, as `gettransactioninfobyblocknum` reports it. */
export interface TronBlockTransactionInfo extends TronTransactionInfo {
  /** The txID, bare lower-case hex. */
  readonly tx_id: string
}

/** A block as the node holds it now: its id and its transactions' ids (lower-case hex), in order. */
export interface TronBlock {
  readonly id: Uint8Array
  readonly tx_ids: ReadonlyArray<string>
}

/** The chain parameters the fee model needs (`/wallet/getchainparameters`), all in sun. */
export interface TronResourcePrices {
  /** `getTransactionFee`: sun burned per bandwidth byte the sender has not staked for. */
  readonly bandwidth_sun_per_byte: bigint
  /** `getEnergyFee`: sun burned per energy unit the sender has not staked for. */
  readonly energy_sun_per_unit: bigint
  /** `getCreateNewAccountFeeInSystemContract` + `getCreateAccountFee`: activating a new account. */
  readonly account_activation_sun: bigint
}

/** A constant (read-only) call's outcome: the energy it would use, or why the contract refuses it. */
export type TronSimulation =
  | { readonly reverted: false; readonly energy_used: bigint; readonly result: Uint8Array }
  | { readonly reverted: true; readonly reason: string }

export interface TronTransport {
  /** The newest block, as the reference block of new transactions and the head for confirmations. */
  readonly nowBlock: () => Effect.Effect<ReferenceBlock>
  /** The block at `number` on the node's chain (`/wallet/getblockbynum`), or null when it has none. */
  readonly block: (number: bigint) => Effect.Effect<TronBlock | null>
  /**
   * The execution results of every transaction of the block at `number`, in block order
   * (`/wallet/gettransactioninfobyblocknum`); empty for an empty block. Blocks from 1 on: the node
   * answers nothing for the genesis block.
   */
  readonly blockTransactionInfos: (number: bigint) => Effect.Effect<ReadonlyArray<TronBlockTransactionInfo>>
  /** Sends signed transaction bytes (`/wallet/broadcasthex`). */
  readonly broadcastHex: (transaction_hex: string) => Effect.Effect<TronBroadcastAnswer>
  /** The executed transaction, or null while it is in no block (or unknown). */
  readonly transactionInfo: (tx_id_hex: string) => Effect.Effect<TronTransactionInfo | null>
  /**
   * The signed part (`raw_data`, protobuf bytes) of a transaction the node knows, or null when it
   * knows none by that id (`/wallet/gettransactionbyid`). The bytes hash to the id (checked).
   */
  readonly transactionRawData: (tx_id_hex: string) => Effect.Effect<Uint8Array | null>
  /** Whether the node holds the transaction in its pending pool. */
  readonly isPending: (tx_id_hex: string) => Effect.Effect<boolean>
  /** The TRX balance in sun, and whether the account exists (has ever been activated). */
  readonly account: (
    address: string,
  ) => Effect.Effect<{ readonly exists: boolean; readonly balance_sun: bigint }>
  /** Runs a contract call without a transaction (`/wallet/triggerconstantcontract`). */
  readonly simulate: (owner: string, contract: string, data: Uint8Array) => Effect.Effect<TronSimulation>
  readonly resourcePrices: () => Effect.Effect<TronResourcePrices>
}
