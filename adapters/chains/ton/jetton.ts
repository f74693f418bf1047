/**
 * The platform's TON jetton (contracts/ton/*.fc, compiled into contracts/build/ton-jetton.json): its
 * code, the layout of its messages and the rule that gives every owner's jetton wallet its address.
 * Pure: builds and reads cells, touches no network. The adapter, the sandbox chain and the tests
 * share it, so a message layout is written down once.
 *
 * A jetton wallet's address is the hash of its StateInit (wallet code, and initial data: not
 * frozen, balance 0, owner, minter), so it is computed here without asking the minter; a test checks
 * it against the minter's own `get_wallet_address`. That holds for minters running this wallet code:
 * the sandbox's. A production jetton (Tether's USDT) has its own wallet code and data layout; the
 * adapter asks such a minter instead.
 */
import { type Address, beginCell, Cell, contractAddress, type StateInit } from "@ton/core"
import artifact from "../../../contracts/build/ton-jetton.json" with { type: "json" }

/** The compiled minter (jetton master), exactly as committed. */
export const jetton_minter_code = Cell.fromBase64(artifact.contracts["jetton-minter"].code_boc)
/** The compiled jetton wallet, exactly as committed. */
export const jetton_wallet_code = Cell.fromBase64(artifact.contracts["jetton-wallet"].code_boc)

/** Operation codes: TEP-74's, and the platform's own administrative ones (see jetton-common.fc). */
export const jetton_op = {
  transfer: 0x0f8a7ea5,
  transfer_notification: 0x7362d09c,
  internal_transfer: 0x178d4519,
  excesses: 0xd53276db,
  burn: 0x595f07bc,
  burn_notification: 0x7bdd97de,
  mint: 0x6d696e74,
  set_frozen: 0x66727a6e,
} as const

/** The contract's error codes (exit codes of a failed compute phase). */
export const jetton_error = {
  not_admin: 73,
  not_owner: 74,
  not_trusted_sender: 75,
  balance_too_low: 76,
  ton_too_low: 77,
  frozen: 78,
} as const

const workchain = 0

/**
 * The address of `owner`'s jetton wallet under `minter`.
 * @example jettonWalletAddress(owner, minter).toString()
 */
export function jettonWalletAddress(owner: Address, minter: Address): Address {
  return contractAddress(workchain, jettonWalletInit(owner, minter))
}

/** The StateInit a jetton wallet is deployed with. */
export function jettonWalletInit(owner: Address, minter: Address): StateInit {
  const data = beginCell().storeUint(0, 1).storeCoins(0n).storeAddress(owner).storeAddress(minter).endCell()
  return { code: jetton_wallet_code, data }
}

/**
 * The StateInit of a minter with no supply yet, administered by `admin`; `content` is the TEP-64
 * metadata cell. `wallet_code` is the platform's unless a test stands in for another jetton.
 * @example contractAddress(0, jettonMinterInit(admin, beginCell().endCell()))
 */
export function jettonMinterInit(admin: Address, content: Cell, wallet_code = jetton_wallet_code): StateInit {
  const data = beginCell()
    .storeCoins(0n)
    .storeAddress(admin)
    .storeRef(content)
    .storeRef(wallet_code)
    .endCell()
  return { code: jetton_minter_code, data }
}

/** TEP-74's `transfer`, sent by the owner to their own jetton wallet. */
export interface JettonTransfer {
  readonly query_id: bigint
  readonly amount: bigint
  /** The recipient's owner address (not their jetton wallet). */
  readonly destination: Address
  /** Where the jetton wallets refund the TON left over (`excesses`). */
  readonly response_destination: Address
  /** The TON the recipient's jetton wallet forwards to the recipient with `transfer_notification`. */
  readonly forward_ton_amount: bigint
}

/**
 * The body of a jetton `transfer`, with no custom payload and an empty forward payload.
 * @example jettonTransferBody({ query_id: 1n, amount: 10n ** 6n, destination, response_destination: sender, forward_ton_amount: 1n })
 */
export function jettonTransferBody(transfer: JettonTransfer): Cell {
  return beginCell()
    .storeUint(jetton_op.transfer, 32)
    .storeUint(transfer.query_id, 64)
    .storeCoins(transfer.amount)
    .storeAddress(transfer.destination)
    .storeAddress(transfer.response_destination)
    .storeMaybeRef(null)
    .storeCoins(transfer.forward_ton_amount)
    .storeBit(false)
    .endCell()
}

/** Reads a jetton `transfer` body; null when `body` is not one. */
export function readJettonTransfer(body: Cell): JettonTransfer | null {
  try {
    const slice = body.beginParse()
    if (slice.loadUint(32) !== jetton_op.transfer) return null
    const query_id = slice.loadUintBig(64)
    const amount = slice.loadCoins()
    const destination = slice.loadAddress()
    const response_destination = slice.loadAddress()
    slice.loadMaybeRef()
    const forward_ton_amount = slice.loadCoins()
    return { query_id, amount, destination, response_destination, forward_ton_amount }
  } catch {
    return null
  }
}

/** What a jetton wallet was credited with: an `internal_transfer`'s amount and sender owner. */
export interface JettonCredit {
  readonly query_id: bigint
  readonly amount: bigint
  /** The sending owner, or the minter for a mint. */
  readonly from: Address
}

/** Reads an `internal_transfer` body; null when `body` is not one. */
export function readInternalTransfer(body: Cell): JettonCredit | null {
  try {
    const slice = body.beginParse()
    if (slice.loadUint(32) !== jetton_op.internal_transfer) return null
    return { query_id: slice.loadUintBig(64), amount: slice.loadCoins(), from: slice.loadAddress() }
  } catch {
    return null
  }
}

/** The admin's `mint`: `amount` to `owner`'s wallet; leftover TON goes to `response_destination`. */
export interface JettonMint {
  readonly query_id: bigint
  readonly owner: Address
  readonly amount: bigint
  readonly forward_ton_amount: bigint
  readonly response_destination: Address
}

/**
 * The body of the platform minter's `mint`.
 * @example jettonMintBody({ query_id: 0n, owner, amount: 10n ** 6n, forward_ton_amount: 0n, response_destination: admin })
 */
export function jettonMintBody(mint: JettonMint): Cell {
  return beginCell()
    .storeUint(jetton_op.mint, 32)
    .storeUint(mint.query_id, 64)
    .storeAddress(mint.owner)
    .storeCoins(mint.amount)
    .storeCoins(mint.forward_ton_amount)
    .storeAddress(mint.response_destination)
    .endCell()
}

/**
 * The body of the platform minter's `set_frozen`: freezes (or unfreezes) `owner`'s jetton wallet.
 * @example jettonFreezeBody({ query_id: 0n, owner, frozen: true })
 */
export function jettonFreezeBody(order: {
  readonly query_id: bigint
  readonly owner: Address
  readonly frozen: boolean
}): Cell {
  return beginCell()
    .storeUint(jetton_op.set_frozen, 32)
    .storeUint(order.query_id, 64)
    .storeAddress(order.owner)
    .storeBit(order.frozen)
    .endCell()
}

/**
 * The body of TEP-74's `burn`, sent by the owner to their jetton wallet.
 * @example jettonBurnBody({ query_id: 0n, amount: 5n, response_destination: owner })
 */
export function jettonBurnBody(burn: {
  readonly query_id: bigint
  readonly amount: bigint
  readonly response_destination: Address
}): Cell {
  return beginCell()
    .storeUint(jetton_op.burn, 32)
    .storeUint(burn.query_id, 64)
    .storeCoins(burn.amount)
    .storeAddress(burn.response_destination)
    .storeMaybeRef(null)
    .endCell()
}
