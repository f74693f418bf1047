/**
 * Deposits: token transfers into custody addresses, as the platform records and credits them. Pure
 * data and decisions; the watcher (watcher.ts) does the I/O.
 *
 * In the ledger, a deposit is ONE transfer custody -> wallet (the custody account stands for funds
 * between the chain and the ledger: sends credit it, deposits debit it). Its ledger id is derived
 * from where the chain put the transfer, (environment, chain, tx_hash, log_index), so the ledger
 * itself refuses to credit one chain transfer twice, whichever watcher or row asks.
 *
 * Words: a row is `seen` (in a block, maybe not for good), `credited` (final on chain and in the
 * ledger) or `orphaned` (its block was reorganised away and the transaction is in no block now, or
 * is in one where it no longer pays the custody address). The chain's words (confirmed, finalized,
 * dropped) describe transactions, never rows.
 */
import { formatAmount } from "../../domain/money/amount.ts"
import type { Asset } from "../../domain/money/asset.ts"
import type { Environment } from "../../domain/platform/scopes.ts"
import type { InclusionProof, TransactionStatus } from "../ports/chain.ts"

/** Ledger transfer code of funds that arrived from a chain (sends use 110). */
export const chain_deposit_code = 120

export type DepositStatus = "seen" | "credited" | "orphaned"

/** One row of platform.chain_deposits. */
export interface DepositRow {
  readonly deposit_id: string
  readonly tenant_id: string
  readonly environment: Environment
  readonly wallet_id: string
  readonly chain: string
  /** The asset's code, `SYMBOL@chain`. */
  readonly token: string
  readonly token_decimals: number
  readonly token_contract: string
  readonly to_address: string
  readonly from_address: string
  readonly amount: bigint
  readonly tx_hash: string
  readonly log_index: number
  readonly block_number: bigint
  readonly block_hash: string
  readonly status: DepositStatus
  /** Confirmations when it was credited; null before. */
  readonly confirmations: number | null
  readonly seen_at: Date
  readonly credited_at: Date | null
  readonly orphaned_at: Date | null
}

/** Maps a database row (numerics as strings) to a DepositRow. */
export const fromDb = (row: Record<string, unknown>): DepositRow =>
  ({
    ...row,
    amount: BigInt(String(row.amount)),
    block_number: BigInt(String(row.block_number)),
  }) as unknown as DepositRow

/** The ledger asset a row moves. */
export const depositAsset = (row: Pick<DepositRow, "token" | "token_decimals" | "chain">): Asset => ({
  code: row.token,
  symbol: row.token.split("@")[0] ?? row.token,
  chain: row.chain,
  decimals: row.token_decimals,
})

/**
 * The ledger transfer id (and idempotency key) of the deposit at this place on chain. Hashes are
 * compared in lower case: a node may spell them either way.
 * @example depositLedgerId("sandbox", "ethereum", "0xAB..", 3) // "deposit:sandbox:ethereum:0xab..:3"
 */
export const depositLedgerId = (
  environment: Environment,
  chain: string,
  tx_hash: string,
  log_index: number,
): string => `deposit:${environment}:${chain}:${tx_hash.toLowerCase()}:${log_index}`

/** The `data` of a `deposit.confirmed` webhook event. */
export const toDepositEvent = (row: DepositRow) => ({
  deposit_id: row.deposit_id,
  wallet_id: row.wallet_id,
  chain: row.chain,
  token: row.token.split("@")[0] ?? row.token,
  amount: formatAmount(row.amount, row.token_decimals),
  from_address: row.from_address,
  to_address: row.to_address,
  tx_hash: row.tx_hash,
  log_index: row.log_index,
  block_number: row.block_number.toString(),
  block_hash: row.block_hash,
  confirmations: row.confirmations,
  credited_at: row.credited_at?.toISOString() ?? null,
})

/** The deposit as the API lists it: the event's fields plus its status and when it was seen. */
export const toPublicDeposit = (row: DepositRow) => ({
  ...toDepositEvent(row),
  status: row.status,
  seen_at: row.seen_at.toISOString(),
})

/** One incoming transfer a scan found, with the custody wallet it pays. */
export interface Sighting {
  readonly tenant_id: string
  readonly wallet_id: string
  readonly asset: Asset
  readonly contract: string
  readonly from_address: string
  readonly to_address: string
  readonly amount: bigint
  readonly tx_hash: string
  readonly log_index: number
  readonly block_number: bigint
  readonly block_hash: string
}

/** What a scan writes: rows to update in place (same id, new place or content) and rows to insert. */
export interface SightingPlan {
  readonly updates: ReadonlyArray<{ readonly deposit_id: string; readonly sighting: Sighting }>
  readonly inserts: ReadonlyArray<Sighting>
}

type Existing = Pick<
  DepositRow,
  | "deposit_id"
  | "status"
  | "tx_hash"
  | "log_index"
  | "block_hash"
  | "wallet_id"
  | "token_contract"
  | "from_address"
  | "to_address"
  | "amount"
>

const sameTransfer = (row: Existing, sighting: Sighting) =>
  row.wallet_id === sighting.wallet_id &&
  row.token_contract === sighting.contract &&
  row.from_address === sighting.from_address &&
  row.to_address === sighting.to_address &&
  row.amount === sighting.amount

const unchanged = (row: Existing, sighting: Sighting) =>
  row.status === "seen" && row.block_hash === sighting.block_hash && sameTransfer(row, sighting)

/**
 * Whether all transfers of one transaction sit in one block, so that a transaction seen in another
 * block was re-included there. Not on TON: the transfers of one wallet message (an exchange's
 * batched payouts) land in several transactions, each its own `block_hash`, in blocks never
 * reorganised (see the TON adapter).
 */
const oneBlockPerTransaction = (sighting: Sighting) => sighting.asset.chain !== "ton"

/**
 * Matches one scan's sightings against the rows already held for their transactions. A credited row
 * is final and never touched; a sighting at a credited row's place, or of a transaction credited in
 * another block (a reorg deeper than finality, outside the model; not on TON, where a message's
 * transfers each have a block of their own), is ignored.
 *
 * 1. A sighting at a place (tx_hash, log_index) a row holds updates that row (block, and content if
 *    the re-executed transaction differs): one place, one row.
 * 2. Otherwise a row of the same transaction moving the same amount between the same addresses, at a
 *    place no sighting claims, moves to the sighting's place: the transaction was re-included in
 *    another block (a reorg), so it keeps its id and is credited once, at its final place. Not on
 *    TON, whose blocks are never reorganised: there such a row is another, equal transfer.
 * 3. Otherwise the sighting is a new row.
 * Rows left over keep their place; their transaction's status at depth decides them (orphaned).
 * Sightings are unique by place (pages may overlap); the rows' places stay unique: a row moves only
 * to a place no row holds, and the places it leaves are claimed by no sighting.
 * @example planSightings([sighting], []) // { updates: [], inserts: [sighting] }
 */
export function planSightings(
  sightings: ReadonlyArray<Sighting>,
  existing: ReadonlyArray<Existing>,
): SightingPlan {
  const placeOf = (tx_hash: string, log_index: number) => `${tx_hash.toLowerCase()}:${log_index}`
  const rowsByPlace = new Map(existing.map((row) => [placeOf(row.tx_hash, row.log_index), row]))
  const creditedBlock = new Map<string, string>()
  for (const row of existing)
    if (row.status === "credited") creditedBlock.set(row.tx_hash.toLowerCase(), row.block_hash)
  const unique = new Map<string, Sighting>()
  for (const sighting of sightings) unique.set(placeOf(sighting.tx_hash, sighting.log_index), sighting)

  const updates: Array<SightingPlan["updates"][number]> = []
  const inserts: Array<Sighting> = []
  const claimed = new Set<string>()
  const pending: Array<Sighting> = []
  for (const [place, sighting] of unique) {
    const credited = creditedBlock.get(sighting.tx_hash.toLowerCase())
    if (credited !== undefined && credited !== sighting.block_hash && oneBlockPerTransaction(sighting))
      continue
    const row = rowsByPlace.get(place)
    if (row === undefined) {
      pending.push(sighting)
      continue
    }
    claimed.add(row.deposit_id)
    if (row.status !== "credited" && !unchanged(row, sighting))
      updates.push({ deposit_id: row.deposit_id, sighting })
  }
  const claimable = existing.filter((row) => row.status !== "credited" && !claimed.has(row.deposit_id))
  for (const sighting of pending) {
    // On TON nothing is re-included elsewhere: a row at another place of the message is another
    // transfer (two equal payouts of one batched message), never this one moved.
    const moved = !oneBlockPerTransaction(sighting)
      ? undefined
      : claimable.find(
          (row) =>
            !claimed.has(row.deposit_id) &&
            row.tx_hash.toLowerCase() === sighting.tx_hash.toLowerCase() &&
            !unique.has(placeOf(row.tx_hash, row.log_index)) &&
            sameTransfer(row, sighting),
        )
    if (moved === undefined) {
      inserts.push(sighting)
      continue
    }
    claimed.add(moved.deposit_id)
    updates.push({ deposit_id: moved.deposit_id, sighting })
  }
  return { updates, inserts }
}

/** What to do with a `seen` row whose recorded block is at least the finality depth deep. */
export type SeenVerdict =
  | { readonly kind: "credit"; readonly proof: InclusionProof }
  | { readonly kind: "orphan"; readonly reason: string }
  | { readonly kind: "wait" }

/**
 * Judges a `seen` row from its transaction's status, read after the row's block reached the depth.
 * Credit only at finality in the very block the row records. Orphan when the transaction is in no
 * block and no pool (dropped), failed where it was re-included (reverted: no value moved), or is final
 * in another block that the watcher has scanned (`next_block` is above it) without finding this
 * transfer there. Wait otherwise: it may be re-included, or its new block is not scanned yet.
 * @example judgeSeenDeposit({ block_hash: "0xa" }, { status: "dropped", tx_hash: "0x1" }, 12, 100n).kind // "orphan"
 */
export function judgeSeenDeposit(
  row: Pick<DepositRow, "block_hash">,
  status: TransactionStatus,
  finality_confirmations: number,
  next_block: bigint,
): SeenVerdict {
  switch (status.status) {
    case "finalized":
      if (status.proof.block_hash !== row.block_hash) {
        return status.proof.block_number < next_block
          ? { kind: "orphan", reason: "final in another block that does not pay the custody address" }
          : { kind: "wait" }
      }
      return status.proof.confirmations >= finality_confirmations
        ? { kind: "credit", proof: status.proof }
        : { kind: "wait" }
    case "reverted":
      return { kind: "orphan", reason: "re-included in another block, where it reverted" }
    case "dropped":
      return { kind: "orphan", reason: "reorganised away and known to no block or pool" }
    case "seen":
    case "confirmed":
      return { kind: "wait" }
  }
}
