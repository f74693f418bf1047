/**
 * Verification of a sent transfer against its chain (`GET /api/v1/transactions/{id}/verify`): the
 * chain is re-read through the adapter, never trusted from the stored proof. The chain's status and
 * proof come from `transactionStatus`; the token transfer comes from `incomingTransfers` over the
 * proof's one block, so every family's adapter answers it the same way (EVM: the Transfer log, by
 * its log index; Solana: the SPL transfer instruction in the slot, by its instruction index, its
 * sender being the owner who signed for the source account).
 *
 * The transfer matches when the chain holds it confirmed or finalized, its Transfer log moves the
 * recorded amount of the recorded token contract from the wallet's address to the recorded
 * destination, the token contract is the one the platform runs for the token on that chain, and the
 * proof recorded at completion (if any) names the same block and log: a block hash that changed
 * means a reorganisation moved the transaction after the ledger posted it; and the ledger has not
 * failed the transfer (released its funds) while the chain holds it.
 */
import { Effect } from "effect"
import { assert } from "../../domain/assert.ts"
import type { TokenSymbol } from "../../domain/chains/registry.ts"
import { evmChains } from "../../domain/custody/derive.ts"
import type { InclusionProof, IncomingTransfer, TransactionStatus } from "../ports/chain.ts"
import type { RunningChain } from "../ports/chains.ts"
import type { TransferRow } from "./model.ts"

export interface TransferChecks {
  readonly amount: boolean
  readonly token: boolean
  readonly sender: boolean
  readonly receiver: boolean
}

export interface TransferVerification {
  readonly transaction_id: string
  readonly chain: string
  readonly tx_hash: string
  readonly status: TransactionStatus["status"]
  readonly proof: {
    readonly block_number: string
    readonly block_hash: string
    readonly log_index: number | null
    readonly confirmations: number
  } | null
  readonly checks: TransferChecks
  readonly matches: boolean
}

/** EVM addresses differ only in their checksum casing; other families' addresses are exact. */
const sameAddress = (chain: string, left: string, right: string): boolean =>
  (evmChains as ReadonlyArray<string>).includes(chain)
    ? left.toLowerCase() === right.toLowerCase()
    : left === right

const sameHash = (left: string, right: string): boolean => left.toLowerCase() === right.toLowerCase()

/** The token Transfer log of the transaction that the proof names, if the chain has it. */
const transferLog = (
  running: Pick<RunningChain, "adapter" | "contracts">,
  row: TransferRow,
  proof: InclusionProof,
): Effect.Effect<IncomingTransfer | undefined> =>
  running.adapter
    .incomingTransfers({
      contract: row.token_contract,
      addresses: [row.to_address],
      from_block: proof.block_number,
      to_block: proof.block_number,
    })
    .pipe(
      // The row's contract and destination were validated when the transfer was requested.
      Effect.orDie,
      Effect.map((logs) =>
        logs.find(
          (log) =>
            sameHash(log.proof.tx_hash, proof.tx_hash) &&
            (proof.log_index === null || log.proof.log_index === proof.log_index),
        ),
      ),
    )

const checksOf = (
  running: Pick<RunningChain, "adapter" | "contracts">,
  row: TransferRow,
  log: IncomingTransfer | undefined,
): TransferChecks => {
  const symbol = (row.token.split("@")[0] ?? row.token) as TokenSymbol
  const platform_contract = running.contracts.get(symbol)
  return {
    amount: log !== undefined && log.amount === row.amount,
    token:
      log !== undefined &&
      platform_contract !== undefined &&
      sameAddress(row.chain, log.contract, row.token_contract) &&
      sameAddress(row.chain, platform_contract, row.token_contract),
    sender: log !== undefined && sameAddress(row.chain, log.from, row.from_address),
    receiver: log !== undefined && sameAddress(row.chain, log.to, row.to_address),
  }
}

/**
 * Re-reads a broadcast transfer from its chain and compares it with the ledger's record.
 * @example const verification = yield* verifyTransfer(chains.get("sandbox", "ethereum"), row)
 */
export const verifyTransfer = (
  running: Pick<RunningChain, "adapter" | "contracts">,
  row: TransferRow,
): Effect.Effect<TransferVerification> =>
  Effect.gen(function* () {
    assert(row.tx_hash !== null, "only a broadcast transfer is verified")
    const chain_status = yield* running.adapter.transactionStatus(row.tx_hash)
    const proof = "proof" in chain_status ? chain_status.proof : null
    const log = proof === null ? undefined : yield* transferLog(running, row, proof)
    const checks = checksOf(running, row, log)
    const included = chain_status.status === "confirmed" || chain_status.status === "finalized"
    const stored_proof_agrees =
      row.proof === null ||
      (proof !== null &&
        sameHash(row.proof.block_hash, proof.block_hash) &&
        row.proof.block_number === proof.block_number.toString() &&
        row.proof.log_index === proof.log_index)
    return {
      transaction_id: row.transfer_id,
      chain: row.chain,
      tx_hash: row.tx_hash,
      status: chain_status.status,
      proof:
        proof === null
          ? null
          : {
              block_number: proof.block_number.toString(),
              block_hash: proof.block_hash,
              log_index: proof.log_index,
              confirmations: proof.confirmations,
            },
      checks,
      // A transfer the ledger failed (its funds released) matches no transaction that moved money.
      matches:
        row.status !== "failed" &&
        included &&
        stored_proof_agrees &&
        Object.values(checks).every((check) => check),
    }
  })
