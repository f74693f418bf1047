/**
 * The TON chain adapter, on @ton/ton's wallet v4R2: one code path builds, signs and reads wallet
 * messages (`transaction.ts`); a `TonTransport` (@ton/sandbox in process, or a TonClient over an
 * HTTP API) carries them. Native TON transfers only: jetton transfers are not implemented yet (see
 * the README's Chains section); a token intent is refused with `TransferWouldRevert`.
 *
 * How the port's words map onto TON:
 * - `raw` is the external message to the sender's wallet as a bag of cells, 0x-hex; `tx_hash` is the
 *   hash of that message's cell, hex. That hash, not a transaction hash, identifies a TON transfer
 *   before and after it lands: the wallet's transaction is found by its inbound message hash.
 * - `nonce` is the wallet's seqno. The wallet accepts one message per seqno, so a rebroadcast of an
 *   applied message is refused by the wallet and reads as "already applied": success.
 * - `block_number` is the wallet transaction's logical time (lt), `block_hash` that transaction's
 *   hash: (account, lt, hash) is how TON locates a transaction, and the sandbox has no blocks.
 *   `blockNumber()` is the newest lt, and incoming transfer queries range over lt.
 * - `confirmations` is always 1 and a landed transaction is `finalized` at once: TON's masterchain
 *   commits shard blocks with BFT finality and never reorganises a committed block.
 * - `reverted`: the wallet's transaction failed, or it ran but sent nothing (IGNORE_ERRORS mode: the
 *   seqno is spent and the fee paid, no coins moved). A bounce by the recipient (a bounceable
 *   transfer to a contract that fails) is not followed: see the README.
 * - A recipient's user-friendly form decides `bounce`: bounceable (`EQ...`) bounces, non-bounceable
 *   (`UQ...`) and raw (`0:...`) do not, so coins sent to a wallet not yet deployed stay there.
 */
import { Address } from "@ton/core"
import { Effect } from "effect"
import { isValidAddress, type SigningKey } from "../../../domain/custody/derive.ts"
import {
  BroadcastRejected,
  type ChainAdapter,
  type ChainAsset,
  type InclusionProof,
  type IncomingTransfer,
  type IncomingTransfersQuery,
  InsufficientFundsForFee,
  InvalidChainAddress,
  incoming_addresses_max,
  NonceTooLow,
  QueryTooWide,
  type SignedTransfer,
  type SignOptions,
  type TransactionStatus,
  type TransferIntent,
  TransferWouldRevert,
} from "../../../src/ports/chain.ts"
import {
  type NativeTransfer,
  signedTransfer,
  summarizeMessage,
  type WalletMessageSummary,
  walletOf,
} from "./transaction.ts"
import type { LandedTransaction, TonTransport } from "./transport.ts"

/** What `IncomingTransfer.contract` and the query's `contract` say for native TON. */
export const ton_native_contract = "TON"
/** How long a signed message stays valid: a persisted message can be rebroadcast within it. */
export const message_ttl_seconds = 600
/**
 * Headroom over the emulated fee: the storage fee grows with the time since the wallet's last
 * transaction, and the forward fee with network configuration changes. Rounded up.
 */
const fee_margin_percent = 10n
/**
 * The fee bound of a transfer from a wallet not yet deployed, when only its address is known
 * (`estimateTransferFee`): its StateInit holds the public key, which an address does not reveal, so
 * its deployment cannot be emulated. 0.01 TON; the tests check it covers a real deploying transfer.
 * `signTransfer`, which has the key, emulates it exactly.
 */
const undeployed_fee_bound_nanotons = 10_000_000n
/** The most transactions one watched address may have in one `incomingTransfers` range. */
const incoming_transactions_per_address_max = 1_000
/** Messages signed or broadcast by this process, remembered to find their wallet by hash. */
const message_memory_count_max = 10_000

/**
 * Makes the adapter for TON over `transport`.
 * @example const adapter = makeTonAdapter(makeSandboxTransport(await Blockchain.create()))
 */
export function makeTonAdapter(transport: TonTransport): ChainAdapter {
  const call = <A>(run: () => Promise<A>) => Effect.promise(run)
  const messages = new Map<string, WalletMessageSummary>()

  const parseAddress = (text: string) =>
    isValidAddress("ton", text)
      ? Effect.succeed(Address.isRaw(text) ? Address.parseRaw(text) : Address.parse(text))
      : Effect.fail(new InvalidChainAddress({ address: text }))

  const nativeOnly = (asset: ChainAsset) =>
    asset.kind === "native"
      ? Effect.void
      : Effect.fail(new TransferWouldRevert({ reason: "jetton transfers are not implemented on TON yet" }))

  const planTransfer = (wallet_address: Address, intent: TransferIntent, seqno_given?: number) =>
    Effect.gen(function* () {
      yield* nativeOnly(intent.asset)
      if (intent.amount <= 0n)
        return yield* Effect.fail(new TransferWouldRevert({ reason: "amount must be positive" }))
      const to = yield* parseAddress(intent.to)
      const bounce = Address.isFriendly(intent.to) && Address.parseFriendly(intent.to).isBounceable
      const seqno = seqno_given ?? (yield* call(() => transport.getSeqno(wallet_address))) ?? 0
      const valid_until = (yield* call(() => transport.now())) + message_ttl_seconds
      const transfer: NativeTransfer = { to, bounce, amount: intent.amount, seqno, valid_until }
      return transfer
    })

  /** The emulated fee of `transfer` from `wallet`, with its margin. */
  const feeBound = (wallet: ReturnType<typeof walletOf>, transfer: NativeTransfer) =>
    Effect.gen(function* () {
      const unsigned = signedTransfer(wallet, null, transfer)
      const outcome = yield* call(() => transport.emulate(wallet.address, unsigned))
      if (outcome.kind === "rejected")
        return yield* Effect.fail(new TransferWouldRevert({ reason: outcome.reason }))
      return outcome.fee + ceilPercent(outcome.fee, fee_margin_percent)
    })

  const estimateTransferFee = (from: string, intent: TransferIntent) =>
    Effect.gen(function* () {
      const sender = yield* parseAddress(from)
      const transfer = yield* planTransfer(sender, intent)
      if (transfer.seqno === 0) return undeployed_fee_bound_nanotons
      const public_key = yield* call(() => transport.publicKey(sender))
      return yield* feeBound(walletOf(public_key), transfer)
    })

  const signTransfer = (key: SigningKey, intent: TransferIntent, options?: SignOptions) =>
    Effect.gen(function* () {
      const wallet = walletOf(key.public_key)
      const transfer = yield* planTransfer(wallet.address, intent, options?.nonce)
      const from = friendly(wallet.address)
      const { balance: available } = yield* call(() => transport.account(wallet.address))
      const short = (fee_max: bigint) =>
        new InsufficientFundsForFee({ address: from, required: fee_max + transfer.amount, available })
      // An empty account cannot pay for even the emulation; the deploying transfer's bound stands in.
      if (available === 0n) return yield* Effect.fail(short(undeployed_fee_bound_nanotons))
      const fee_max = yield* feeBound(wallet, transfer)
      if (available < fee_max + transfer.amount) return yield* Effect.fail(short(fee_max))
      const message = signedTransfer(wallet, key, transfer)
      const summary = summarizeMessage(message.toBoc())
      if (summary === null) throw new Error("a signed wallet message must read back")
      remember(messages, summary)
      const signed: SignedTransfer = {
        raw: `0x${message.toBoc().toString("hex")}`,
        tx_hash: summary.message_hash,
        from,
        nonce: transfer.seqno,
        fee_max,
      }
      return signed
    })

  const broadcast = (raw: string) =>
    Effect.gen(function* () {
      const summary = /^0x([0-9a-fA-F]{2})+$/.test(raw)
        ? summarizeMessage(Buffer.from(raw.slice(2), "hex"))
        : null
      if (summary === null) {
        return yield* Effect.fail(
          new BroadcastRejected({ tx_hash: "", reason: "not an external TON message" }),
        )
      }
      const tx_hash = summary.message_hash
      remember(messages, summary)
      if ((yield* call(() => transport.landed(summary.wallet, tx_hash))) !== null) return { tx_hash }
      const seqno = (yield* call(() => transport.getSeqno(summary.wallet))) ?? 0
      if (seqno > summary.seqno) return yield* Effect.fail(new NonceTooLow({ tx_hash, nonce: summary.seqno }))
      if ((yield* call(() => transport.now())) > summary.valid_until) {
        return yield* Effect.fail(
          new BroadcastRejected({ tx_hash, reason: "the message's valid_until has passed" }),
        )
      }
      const outcome = yield* call(() => transport.send(summary.message))
      if (outcome.kind === "accepted") return { tx_hash }
      const { balance } = yield* call(() => transport.account(summary.wallet))
      if (balance === 0n) {
        const address = friendly(summary.wallet)
        return yield* Effect.fail(new InsufficientFundsForFee({ address, required: 1n, available: 0n }))
      }
      return yield* Effect.fail(new BroadcastRejected({ tx_hash, reason: outcome.reason }))
    })

  /**
   * A message this process never signed nor broadcast reads `dropped`: its hash alone does not name
   * its wallet (see the port change recommended in the README). Otherwise: landed, or `seen` while
   * its seqno is unused and its `valid_until` not passed, else `dropped`.
   */
  const transactionStatus = (tx_hash: string): Effect.Effect<TransactionStatus> =>
    Effect.gen(function* () {
      const summary = messages.get(tx_hash)
      if (summary === undefined) return { status: "dropped", tx_hash }
      const landedNow = () => call(() => transport.landed(summary.wallet, tx_hash))
      const landed = yield* landedNow()
      if (landed !== null) return statusOf(tx_hash, landed)
      const seqno = (yield* call(() => transport.getSeqno(summary.wallet))) ?? 0
      const expired = (yield* call(() => transport.now())) > summary.valid_until
      if (seqno <= summary.seqno && !expired) return { status: "seen", tx_hash }
      // It may have landed between the two reads.
      const late = yield* landedNow()
      return late === null ? { status: "dropped", tx_hash } : statusOf(tx_hash, late)
    })

  const balance = (address: string, asset: ChainAsset) =>
    Effect.gen(function* () {
      const owner = yield* parseAddress(address)
      if (asset.kind !== "native")
        return yield* Effect.die(new Error("jetton balances are not implemented on TON yet"))
      return (yield* call(() => transport.account(owner))).balance
    })

  const incomingTransfers = (query: IncomingTransfersQuery) =>
    Effect.gen(function* () {
      if (query.to_block < query.from_block) {
        return yield* Effect.fail(new QueryTooWide({ reason: "the lt range is empty" }))
      }
      if (query.addresses.length > incoming_addresses_max) {
        return yield* Effect.fail(new QueryTooWide({ reason: "too many addresses" }))
      }
      if (query.contract !== ton_native_contract) {
        return yield* Effect.die(new Error("jetton deposits are not implemented on TON yet"))
      }
      const found: Array<IncomingTransfer> = []
      for (const text of query.addresses) {
        const owner = yield* parseAddress(text)
        const limit = incoming_transactions_per_address_max + 1
        const landed = yield* call(() =>
          transport.transactionsOf(owner, query.from_block, query.to_block, limit),
        )
        if (landed.length > incoming_transactions_per_address_max) {
          return yield* Effect.fail(
            new QueryTooWide({ reason: `too many transactions for ${text}; narrow the range` }),
          )
        }
        for (const transaction of landed) {
          const from = transaction.in_message_from
          if (from === null || transaction.in_message_bounced || transaction.in_message_returned) continue
          if (transaction.in_message_value === 0n) continue
          found.push({
            contract: ton_native_contract,
            from: friendly(Address.parseRaw(from)),
            to: text,
            amount: transaction.in_message_value,
            proof: proofOf(transaction.hash, transaction),
          })
        }
      }
      return found.sort((a, b) => (a.proof.block_number < b.proof.block_number ? -1 : 1))
    })

  return {
    estimateTransferFee,
    signTransfer,
    broadcast,
    transactionStatus,
    balance,
    blockNumber: () => call(() => transport.newestLt()),
    incomingTransfers,
  }
}

function statusOf(tx_hash: string, landed: LandedTransaction): TransactionStatus {
  const proof = proofOf(tx_hash, landed)
  return landed.failed || landed.outgoing.length === 0
    ? { status: "reverted", proof }
    : { status: "finalized", proof }
}

function proofOf(tx_hash: string, landed: LandedTransaction): InclusionProof {
  return { tx_hash, block_number: landed.lt, block_hash: landed.hash, log_index: null, confirmations: 1 }
}

/** The user-friendly, URL-safe, non-bounceable form custody uses (`UQ...`). */
function friendly(address: Address): string {
  return address.toString({ urlSafe: true, bounceable: false, testOnly: false })
}

function ceilPercent(value: bigint, percent: bigint): bigint {
  return (value * percent + 99n) / 100n
}

function remember(memory: Map<string, WalletMessageSummary>, summary: WalletMessageSummary): void {
  if (memory.size >= message_memory_count_max && !memory.has(summary.message_hash)) {
    const oldest = memory.keys().next()
    if (oldest.done !== true) memory.delete(oldest.value)
  }
  memory.set(summary.message_hash, summary)
}
