/**
 * On-chain transfers: what the platform records about a transfer it sends from a custody wallet to
 * an address on a chain, the ledger accounts and ids it uses, and its public view.
 *
 * In the ledger, a transfer is one linked group of pending (two-phase) transfers: wallet -> custody
 * `amount` and wallet -> fee revenue `fee` (0.3 %). The custody account stands for the funds that
 * left for the chain. Once the chain has the transaction deep enough, both are posted; on a revert,
 * a drop or a timeout, both are voided and the wallet gets every unit back.
 *
 * Words: the row's `status` uses the ledger's outcome words for the API (`pending`, `completed`,
 * `failed`); the chain's words (seen, confirmed, finalized, reverted, dropped) appear only in
 * failure codes and proofs.
 */
import { Data } from "effect"
import type { AccountFlags } from "../../domain/ledger/events.ts"
import { formatAmount } from "../../domain/money/amount.ts"
import type { Asset } from "../../domain/money/asset.ts"
import type { Environment } from "../../domain/platform/scopes.ts"
import type { AccountSpec } from "../platform/accounts.ts"
import type { InclusionProof } from "../ports/chain.ts"

/** Ledger account code of a custody account (wallets 1 .. escrow 4 live in platform/accounts.ts). */
export const custody_account_code = 5
/** Ledger transfer code of funds sent to a chain; the fee keeps the platform's fee code. */
export const chain_transfer_code = 110

const noFlags: AccountFlags = { debits_must_not_exceed_credits: false, credits_must_not_exceed_debits: false }

export const custodyAccountId = (asset: Asset) => `custody:${asset.code}`

/** Funds that left for the chain, per asset: credited by every posted on-chain transfer. */
export const custodyAccount = (asset: Asset): AccountSpec => ({
  account_id: custodyAccountId(asset),
  asset,
  kind: "chain_custody",
  flags: noFlags,
  code: custody_account_code,
  user_data: null,
})

/** The ledger ids of a transfer's two pending transfers and of their resolutions. */
export const ledgerIds = (transfer_id: string) => ({
  amount: transfer_id,
  fee: `${transfer_id}:fee`,
  post_amount: `${transfer_id}:post`,
  post_fee: `${transfer_id}:post-fee`,
  void_amount: `${transfer_id}:void`,
  void_fee: `${transfer_id}:void-fee`,
})

export type TransferStatus = "pending" | "completed" | "failed"

/** Why a transfer failed; each is a reason the funds were released. */
export type FailureCode =
  | "reverted"
  | "dropped"
  | "would_revert"
  | "insufficient_gas"
  | "broadcast_rejected"
  | "confirmation_timeout"
  | "node_unavailable"

/** A persisted proof: the adapter's InclusionProof with its block number as a decimal string. */
export interface StoredProof {
  readonly tx_hash: string
  readonly block_number: string
  readonly block_hash: string
  readonly log_index: number | null
  readonly confirmations: number
}

export const storedProof = (proof: InclusionProof): StoredProof => ({
  tx_hash: proof.tx_hash,
  block_number: proof.block_number.toString(),
  block_hash: proof.block_hash,
  log_index: proof.log_index,
  confirmations: proof.confirmations,
})

/** One row of platform.chain_transfers. */
export interface TransferRow {
  readonly transfer_id: string
  readonly tenant_id: string
  readonly environment: Environment
  readonly wallet_id: string
  readonly chain: string
  /** The asset's code, `SYMBOL@chain`. */
  readonly token: string
  readonly token_decimals: number
  readonly token_contract: string
  readonly from_address: string
  readonly key_tenant_index: number
  readonly key_wallet_index: number
  readonly to_address: string
  readonly amount: bigint
  readonly fee: bigint
  readonly status: TransferStatus
  readonly raw_transaction: string | null
  readonly tx_hash: string | null
  readonly nonce: number | null
  /** When the signed bytes were first accepted by a node; null while never broadcast. */
  readonly broadcast_at: Date | null
  /**
   * When the signed bytes were first handed to a node, recorded before it answers; null while
   * never. Once set, a node's refusal does not prove the transaction can never land.
   */
  readonly broadcast_attempted_at: Date | null
  /**
   * A transaction at the same nonce that moves nothing, signed when the transfer's own transaction
   * outlived its confirmation budget (counter families with a pool: EVM); null until then.
   */
  readonly replacement_raw_transaction: string | null
  readonly replacement_tx_hash: string | null
  readonly poll_count: number
  readonly proof: StoredProof | null
  readonly failure_code: FailureCode | null
  readonly failure_message: string | null
  readonly idempotency_key: string | null
  /** The request's `metadata` ({} without; rows from before migration 505 have {}). */
  readonly metadata: Readonly<Record<string, string>>
  readonly created_at: Date
  readonly completed_at: Date | null
  readonly failed_at: Date | null
}

/** Maps a database row (numerics as strings) to a TransferRow. */
export const fromDb = (row: Record<string, unknown>): TransferRow =>
  ({
    ...row,
    amount: BigInt(String(row.amount)),
    fee: BigInt(String(row.fee)),
    nonce: row.nonce === null ? null : Number(row.nonce),
  }) as unknown as TransferRow

/** The transfer as the API and the webhooks show it. */
export const toPublicTransfer = (row: TransferRow) => ({
  transaction_id: row.transfer_id,
  type: "chain_transfer" as const,
  status: row.status,
  amount: formatAmount(row.amount, row.token_decimals),
  fee: formatAmount(row.fee, row.token_decimals),
  token: row.token.split("@")[0] ?? row.token,
  chain: row.chain,
  from_wallet: row.wallet_id,
  from_address: row.from_address,
  to_address: row.to_address,
  tx_hash: row.tx_hash,
  proof: row.proof,
  failure:
    row.status !== "failed" || row.failure_code === null
      ? null
      : { code: row.failure_code, message: row.failure_message },
  metadata: row.metadata,
  created_at: row.created_at.toISOString(),
  completed_at: row.completed_at?.toISOString() ?? null,
  failed_at: row.failed_at?.toISOString() ?? null,
})

/** The destination is not an address of the transfer's chain. */
export class InvalidDestinationAddress extends Data.TaggedError("InvalidDestinationAddress")<{
  readonly chain: string
  readonly address: string
}> {}

/**
 * The destination is an address of the chain where tokens would be lost or nothing would move: the
 * sending wallet itself, the token's own contract (or mint), or the chain's null account.
 */
export class UnusableDestination extends Data.TaggedError("UnusableDestination")<{
  readonly chain: string
  readonly address: string
  readonly reason: "own_address" | "token_contract" | "program_address" | "null_address" | "other_workchain"
}> {}

/** The amount is zero or negative. */
export class TransferAmountNotPositive extends Data.TaggedError("TransferAmountNotPositive")<{
  readonly amount: bigint
}> {}

/** No adapter serves this chain here, or the token or wallet belongs to another chain. */
export class UnsupportedChain extends Data.TaggedError("UnsupportedChain")<{
  readonly chain: string
  readonly reason: string
}> {}
