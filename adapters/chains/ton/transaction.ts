/**
 * Building, signing and reading TON wallet messages: the one code path every transport shares.
 * Pure apart from the signature; no network.
 *
 * A transfer is an external message to the sender's wallet v4R2 (@ton/ton's `WalletContractV4`,
 * wallet id 698983191, workchain 0, as custody derives it) whose body, signed by the wallet's key,
 * carries the wallet's `seqno` (the nonce: the wallet accepts exactly the message with its current
 * seqno and then increments it), a `valid_until` time, and one internal message to send. While the
 * wallet's seqno is 0 (never used), the external message also carries the wallet's StateInit so
 * that the first transfer deploys it.
 *
 * The send mode is PAY_GAS_SEPARATELY + IGNORE_ERRORS, as every standard wallet uses: the forward
 * fee is paid on top of the amount, and a send that fails in the action phase (not enough coins)
 * still commits the new seqno, so the signed message can never be replayed to retry it.
 */

import {
  type Address,
  beginCell,
  Cell,
  external,
  internal,
  loadMessage,
  loadMessageRelaxed,
  type Message,
  SendMode,
  type Slice,
  storeMessage,
  type Transaction,
} from "@ton/core"
import { keyPairFromSeed } from "@ton/crypto"
import { WalletContractV4 } from "@ton/ton"
import { assert } from "../../../domain/assert.ts"
import type { SigningKey } from "../../../domain/custody/derive.ts"
import { type JettonTransfer, readJettonTransfer } from "./jetton.ts"
import type { LandedTransaction, OutgoingValue } from "./transport.ts"

const wallet_workchain = 0
const wallet_send_mode = SendMode.PAY_GAS_SEPARATELY + SendMode.IGNORE_ERRORS
/** A v4 body starts with the 512-bit signature, then wallet id, valid_until and seqno, 32 bits each. */
const signature_bits = 512

/**
 * The one internal message a wallet transfer sends: for native TON, `amount` to the recipient as
 * the user wrote it (its bounceable flag kept) and no body; for a jetton, `amount` TON attached to
 * the sender's jetton wallet, bounceable, with the jetton `transfer` as body.
 */
export interface WalletTransfer {
  readonly to: Address
  readonly bounce: boolean
  /** The TON the internal message carries, in nanotons. */
  readonly amount: bigint
  readonly body: Cell | null
  readonly seqno: number
  /** Unix seconds after which the wallet refuses the message. */
  readonly valid_until: number
}

/** The fields of a signed external wallet message the adapter needs after it was persisted. */
export interface WalletMessageSummary {
  readonly message: Cell
  readonly message_hash: string
  readonly wallet: Address
  readonly seqno: number
  readonly valid_until: number
  /** The jetton transfer the message carries, and the sender's jetton wallet it goes to; or null. */
  readonly jetton: { readonly wallet: Address; readonly transfer: JettonTransfer } | null
}

/**
 * The v4R2 wallet of an ed25519 public key, in workchain 0.
 * @example walletOf(key.public_key).address.toString({ bounceable: false })
 */
export function walletOf(public_key: Uint8Array): WalletContractV4 {
  return WalletContractV4.create({ workchain: wallet_workchain, publicKey: Buffer.from(public_key) })
}

/**
 * The external message carrying `transfer`, signed by `key` (or, with `key` null, carrying a zero
 * signature: for emulation with the signature check skipped).
 * @example const message = signedTransfer(wallet, key, { to, bounce: false, amount: 10n ** 9n, seqno: 0, valid_until })
 */
export function signedTransfer(
  wallet: WalletContractV4,
  key: SigningKey | null,
  transfer: WalletTransfer,
): Cell {
  const args = {
    seqno: transfer.seqno,
    timeout: transfer.valid_until,
    sendMode: wallet_send_mode,
    messages: [
      internal({ to: transfer.to, value: transfer.amount, bounce: transfer.bounce, body: transfer.body }),
    ],
  }
  const body =
    key === null
      ? wallet.createTransfer({ ...args, secretKey: Buffer.alloc(64) })
      : wallet.createTransfer({ ...args, secretKey: secretKeyOf(key, wallet) })
  const init = transfer.seqno === 0 ? wallet.init : null
  return beginCell()
    .store(storeMessage(external({ to: wallet.address, init, body })))
    .endCell()
}

/** TweetNaCl's 64-byte secret key (seed and public key), as @ton/crypto signs with. */
function secretKeyOf(key: SigningKey, wallet: WalletContractV4): Buffer {
  assert(key.curve === "ed25519", "a TON wallet signs with ed25519")
  const pair = keyPairFromSeed(Buffer.from(key.exposeSecret()))
  assert(pair.publicKey.equals(wallet.publicKey), "the key belongs to the wallet it signs for")
  return pair.secretKey
}

/**
 * Reads back a signed external wallet message; null when `boc` is not one.
 * @example summarizeMessage(Buffer.from(raw.slice(2), "hex"))?.seqno
 */
export function summarizeMessage(boc: Buffer): WalletMessageSummary | null {
  try {
    const roots = Cell.fromBoc(boc)
    const root = roots[0]
    if (roots.length !== 1 || root === undefined) return null
    const message = loadMessage(root.beginParse())
    if (message.info.type !== "external-in") return null
    const body = message.body.beginParse()
    body.skip(signature_bits + 32)
    const valid_until = body.loadUint(32)
    const seqno = body.loadUint(32)
    return {
      jetton: jettonOf(body),
      message: root,
      message_hash: root.hash().toString("hex"),
      wallet: message.info.dest,
      seqno,
      valid_until,
    }
  } catch {
    return null
  }
}

/** The jetton transfer inside a v4 body after its seqno (op 0: a plain send), or null. */
function jettonOf(rest: Slice): WalletMessageSummary["jetton"] {
  if (rest.remainingBits < 16 || rest.remainingRefs < 1 || rest.loadUint(8) !== 0) return null
  rest.skip(8) // send mode
  const message = loadMessageRelaxed(rest.loadRef().beginParse())
  if (message.info.type !== "internal") return null
  const transfer = readJettonTransfer(message.body)
  return transfer === null ? null : { wallet: message.info.dest, transfer }
}

/**
 * The hash of a message's cell as it is stored in a transaction, hex: equal to the hash of the
 * external message bytes that were sent.
 * @example messageHash(transaction.inMessage)
 */
export function messageHash(message: Message): string {
  return beginCell().store(storeMessage(message)).endCell().hash().toString("hex")
}

/**
 * A transaction of `account` as the adapter reads it.
 * @example summarizeTransaction(account, transaction).failed
 */
export function summarizeTransaction(account: Address, transaction: Transaction): LandedTransaction {
  const inbound = transaction.inMessage ?? null
  const internal_in = inbound?.info.type === "internal" ? inbound.info : null
  const outgoing: Array<OutgoingValue> = []
  let forward_fees = 0n
  for (const out of transaction.outMessages.values()) {
    if (out.info.type !== "internal") continue
    outgoing.push({
      to: out.info.dest.toRawString(),
      value: out.info.value.coins,
      message_hash: messageHash(out),
    })
    forward_fees += out.info.forwardFee
  }
  return {
    hash: transaction.hash().toString("hex"),
    lt: transaction.lt,
    account: account.toRawString(),
    in_message_hash: inbound === null ? null : messageHash(inbound),
    in_message_from: internal_in === null ? null : internal_in.src.toRawString(),
    in_message_value: internal_in === null ? 0n : internal_in.value.coins,
    in_message_created_lt: internal_in === null ? 0n : internal_in.createdLt,
    in_message_body: internal_in === null || inbound === null ? null : inbound.body,
    in_message_bounced: internal_in?.bounced ?? false,
    in_message_returned:
      transaction.description.type === "generic" && transaction.description.bouncePhase?.type === "ok",
    failed: failedTransaction(transaction),
    fee: transaction.totalFees.coins + forward_fees,
    outgoing,
  }
}

function failedTransaction(transaction: Transaction): boolean {
  const description = transaction.description
  if (description.type !== "generic") return false
  const compute = description.computePhase
  if (description.aborted || compute.type === "skipped" || !compute.success) return true
  return description.actionPhase !== undefined && description.actionPhase !== null
    ? !description.actionPhase.success
    : false
}
