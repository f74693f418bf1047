/**
 * The TON chain adapter, on @ton/ton's wallet v4R2: one code path builds, signs and reads wallet
 * messages (`transaction.ts`); a `TonTransport` (@ton/sandbox in process, or a TonClient over an
 * HTTP API) carries them. Native TON and jettons (TEP-74): a token asset's `contract` is the jetton
 * minter's address, and a jetton transfer is a wallet message whose one internal message carries
 * TEP-74's `transfer` to the sender's own jetton wallet (see `jetton.ts`). Jetton wallet addresses
 * are computed locally for the platform's jetton (the sandbox's USDT) and asked of the minter's
 * `get_wallet_address` for any other (production USDT), see `jettonWalletOf`.
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
 * - `TransactionExpired`: a message at or past its `valid_until` (the wallet refuses it from that
 *   second on) is refused on broadcast: its persisted bytes can never land. Where the chain is read
 *   with a lag (`landing_lag_seconds`: the production HTTP transport), that is said only once the lag
 *   has passed too; until then the message reads `seen` and a rebroadcast is `BroadcastRejected`
 *   (no proof either way), since it may have landed just before its `valid_until`, unseen yet.
 * - `confirmations` is always 1 and a landed transaction is `finalized` at once: TON's masterchain
 *   commits shard blocks with BFT finality and never reorganises a committed block.
 * - `reverted`: the wallet's transaction failed, or it ran but sent nothing (IGNORE_ERRORS mode: the
 *   seqno is spent and the fee paid, no coins moved). For a jetton transfer, also when a jetton
 *   wallet refused it (see `jettonStatus`). A bounce by the recipient of native TON (a bounceable
 *   transfer to a contract that fails) is not followed: see the README.
 * - A jetton transfer's proof is the recipient jetton wallet's crediting transaction (its lt and
 *   hash): the TON counterpart of an EVM token's Transfer log. `tx_hash` stays the external
 *   message's hash; `log_index` is the index, among the wallet transaction's internal messages, of
 *   the one the transfer went out by: 0 for the platform's one-message transfers, each its own for
 *   a wallet message carrying several (an exchange's batched payouts), which land in several
 *   transactions; `transactionStatus` follows the one its `log_index` names.
 * - A recipient's user-friendly form decides `bounce`: bounceable (`EQ...`) bounces, non-bounceable
 *   (`UQ...`) and raw (`0:...`) do not, so coins sent to a wallet not yet deployed stay there.
 */
import { Address, beginCell } from "@ton/core"
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
  TransactionExpired,
  type TransactionStatus,
  type TransferIntent,
  TransferWouldRevert,
} from "../../../src/ports/chain.ts"
import {
  jetton_wallet_code,
  jettonTransferBody,
  jettonWalletAddress,
  readInternalTransfer,
  readJettonTransfer,
} from "./jetton.ts"
import {
  signedTransfer,
  summarizeMessage,
  type WalletMessageSummary,
  type WalletTransfer,
  walletOf,
} from "./transaction.ts"
import type { LandedTransaction, TonTransport } from "./transport.ts"

/** What `IncomingTransfer.contract` and the query's `contract` say for native TON. */
export const ton_native_contract = "TON"
/** How long a signed message stays valid: a persisted message can be rebroadcast within it. */
export const message_ttl_seconds = 600
/**
 * The widest range of `incomingTransfers`, in logical time: TON's "blocks" are lt, which grows by
 * about a million per transaction, so the port's default of 10,000 would have a deposit watcher fall
 * further behind with every scan. The adapter reads any range (a busy address answers
 * `QueryTooWide`, and the watcher halves the range).
 */
export const ton_incoming_lt_range_max = 1n << 62n
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
/**
 * The TON a jetton transfer attaches to the sender's jetton wallet (0.05 TON): it pays both jetton
 * wallets' gas, the forward fees, the notification and a new recipient wallet's storage reserve
 * (0.01 TON, contracts/ton/jetton-common.fc); the rest comes back to the sender as `excesses`.
 */
export const jetton_attached_nanotons = 50_000_000n
/** The TON forwarded to the recipient with `transfer_notification`: 1 nanoton, enough to notify. */
export const jetton_forward_nanotons = 1n
/** The jetton wallets a jetton transfer passes after the sender's wallet: the sender's, the recipient's. */
const jetton_hop_count = 2
/**
 * How far before a message's `created_lt` its sending transaction is looked for: created_lt is that
 * transaction's lt plus one plus the message's index, and a transaction sends at most 255 messages.
 */
const origin_search_lt_window = 256n
/**
 * Messages signed or broadcast by this process, remembered to find their wallet by hash; also the
 * bound of each jetton lookup memory (minters, foreign jetton wallets).
 */
const message_memory_count_max = 10_000

/**
 * Makes the adapter for TON over `transport`.
 * @example const adapter = makeTonAdapter(makeSandboxTransport(await Blockchain.create()))
 */
export function makeTonAdapter(transport: TonTransport): ChainAdapter {
  const call = <A>(run: () => Promise<A>) => Effect.promise(run)
  const landing_lag = transport.landing_lag_seconds ?? 0
  const messages = new Map<string, WalletMessageSummary>()
  // Origin message hash -> the wallet that took it, for the incoming transfers read (see originOf).
  const origins = new Map<string, Address>()
  const platform_minters = new Map<string, boolean>()
  const foreign_wallets = new Map<string, Address>()

  const parseAddress = (text: string) =>
    isValidAddress("ton", text)
      ? Effect.succeed(Address.isRaw(text) ? Address.parseRaw(text) : Address.parse(text))
      : Effect.fail(new InvalidChainAddress({ address: text }))

  /**
   * Whether `minter` runs the platform jetton's wallet code (asked once per minter with
   * `get_jetton_data`); a minter not deployed counts as the platform's, its wallets hold nothing.
   */
  const platformMinter = (minter: Address) =>
    Effect.gen(function* () {
      const key = minter.toRawString()
      const known = platform_minters.get(key)
      if (known !== undefined) return known
      const data = yield* call(() => transport.runGetMethod(minter, "get_jetton_data", []))
      if (data === null) return true
      for (let skipped = 0; skipped < 4; skipped++) data.pop()
      const platform = data.readCell().equals(jetton_wallet_code)
      remember(platform_minters, key, platform)
      return platform
    })

  /**
   * `owner`'s jetton wallet under `minter`: computed locally for the platform's jetton; for any
   * other jetton (production USDT runs Tether's wallet code) asked of the minter's
   * `get_wallet_address` once and remembered.
   */
  const jettonWalletOf = (owner: Address, minter: Address) =>
    Effect.gen(function* () {
      if (yield* platformMinter(minter)) return jettonWalletAddress(owner, minter)
      const key = `${owner.toRawString()} ${minter.toRawString()}`
      const known = foreign_wallets.get(key)
      if (known !== undefined) return known
      const args = [{ type: "slice", cell: beginCell().storeAddress(owner).endCell() }] as const
      const answer = yield* call(() => transport.runGetMethod(minter, "get_wallet_address", [...args]))
      if (answer === null) return yield* Effect.die(new Error(`${minter} answers no get_wallet_address`))
      const wallet = answer.readAddress()
      remember(foreign_wallets, key, wallet)
      return wallet
    })

  /** The jetton balance of `owner` under `minter`: its jetton wallet's; 0 before it is deployed. */
  const jettonBalance = (owner: Address, minter: Address) =>
    Effect.gen(function* () {
      const wallet = yield* jettonWalletOf(owner, minter)
      const data = yield* call(() => transport.runGetMethod(wallet, "get_wallet_data", []))
      return data === null ? 0n : data.readBigNumber()
    })

  /**
   * The owner and minter of `address` when it is a jetton wallet (of any jetton: it answers TEP-74's
   * `get_wallet_data` with a balance, an owner, a minter and a code cell); undefined for anything
   * else (a wallet, an account not deployed yet).
   */
  const jettonWalletOwner = (address: Address) =>
    Effect.gen(function* () {
      const data = yield* call(() => transport.runGetMethod(address, "get_wallet_data", []))
      if (data === null) return undefined
      try {
        data.readBigNumber()
        const owner = data.readAddress()
        const minter = data.readAddress()
        data.readCell()
        return { owner, minter }
      } catch {
        return undefined
      }
    })

  /**
   * Whether the platform jetton's admin froze `owner`'s wallet (its `is_frozen` get method); false
   * for a jetton without that method. A frozen recipient is not checked here: the transfer then
   * reverts on chain and its jettons come back, as the tests show.
   */
  const jettonWalletFrozen = (owner: Address, minter: Address) =>
    Effect.gen(function* () {
      const wallet = yield* jettonWalletOf(owner, minter)
      const state = yield* call(() => transport.runGetMethod(wallet, "is_frozen", []))
      return state?.readBoolean() === true
    })

  /**
   * The internal message of a jetton transfer: `jetton_attached_nanotons` to the sender's jetton
   * wallet carrying TEP-74's `transfer`. Refused before signing when the sender's jetton balance is
   * short, since the jetton wallet would refuse it on chain and only the fee would be spent.
   */
  const planJetton = (
    sender: Address,
    minter_text: string,
    intent: TransferIntent,
    seqno: number,
    valid_until: number,
  ) =>
    Effect.gen(function* () {
      const minter = yield* parseAddress(minter_text)
      const destination = yield* parseAddress(intent.to)
      const holder = yield* jettonWalletOwner(destination)
      if (holder !== undefined) {
        // Jettons sent to a jetton wallet go to a new jetton wallet that this contract owns and can
        // never send from: lost. The owner's address is what a sender means.
        const reason = `the destination ${friendly(destination)} is a jetton wallet (it keeps jettons for ${friendly(holder.owner)}), not a wallet: send to its owner's address`
        return yield* Effect.fail(new TransferWouldRevert({ reason }))
      }
      const held = yield* jettonBalance(sender, minter)
      if (held < intent.amount) {
        const reason = `the jetton balance ${held} is below the amount ${intent.amount}`
        return yield* Effect.fail(new TransferWouldRevert({ reason }))
      }
      if (yield* jettonWalletFrozen(sender, minter)) {
        const reason = "the sender's jetton wallet is frozen by the jetton's admin"
        return yield* Effect.fail(new TransferWouldRevert({ reason }))
      }
      const body = jettonTransferBody({
        query_id: jettonQueryId(seqno, valid_until),
        amount: intent.amount,
        destination,
        response_destination: sender,
        forward_ton_amount: jetton_forward_nanotons,
      })
      const to = yield* jettonWalletOf(sender, minter)
      return { to, bounce: true, amount: jetton_attached_nanotons, body }
    })

  const planTransfer = (wallet_address: Address, intent: TransferIntent, seqno_given?: number) =>
    Effect.gen(function* () {
      if (intent.amount <= 0n)
        return yield* Effect.fail(new TransferWouldRevert({ reason: "amount must be positive" }))
      const to = yield* parseAddress(intent.to)
      const seqno = seqno_given ?? (yield* call(() => transport.getSeqno(wallet_address))) ?? 0
      const valid_until = (yield* call(() => transport.now())) + message_ttl_seconds
      if (intent.asset.kind === "token") {
        const message = yield* planJetton(wallet_address, intent.asset.contract, intent, seqno, valid_until)
        const transfer: WalletTransfer = { ...message, seqno, valid_until }
        return transfer
      }
      const bounce = Address.isFriendly(intent.to) && Address.parseFriendly(intent.to).isBounceable
      const transfer: WalletTransfer = { to, bounce, amount: intent.amount, body: null, seqno, valid_until }
      return transfer
    })

  /**
   * The most `transfer` from `wallet` can cost in TON: the emulated fee with its margin, plus, for
   * a jetton, all the TON attached to it (the jetton wallets refund what their gas and storage
   * leave, but the bound cannot count on the refund).
   */
  const feeBound = (wallet: ReturnType<typeof walletOf>, transfer: WalletTransfer) =>
    Effect.gen(function* () {
      // A message signed ahead of the wallet's seqno (the messages before it not landed yet) would be
      // refused now for its seqno alone: its fee is emulated at the seqno the wallet expects.
      const expected = (yield* call(() => transport.getSeqno(wallet.address))) ?? 0
      const emulated = transfer.seqno > expected ? { ...transfer, seqno: expected } : transfer
      const unsigned = signedTransfer(wallet, null, emulated)
      const outcome = yield* call(() => transport.emulate(wallet.address, unsigned))
      if (outcome.kind === "rejected")
        return yield* Effect.fail(new TransferWouldRevert({ reason: outcome.reason }))
      return outcome.fee + ceilPercent(outcome.fee, fee_margin_percent) + attachedTon(transfer)
    })

  const estimateTransferFee = (from: string, intent: TransferIntent) =>
    Effect.gen(function* () {
      const sender = yield* parseAddress(from)
      const transfer = yield* planTransfer(sender, intent)
      if (transfer.seqno === 0) return undeployed_fee_bound_nanotons + attachedTon(transfer)
      const public_key = yield* call(() => transport.publicKey(sender))
      return yield* feeBound(walletOf(public_key), transfer)
    })

  const signTransfer = (key: SigningKey, intent: TransferIntent, options?: SignOptions) =>
    Effect.gen(function* () {
      const wallet = walletOf(key.public_key)
      const transfer = yield* planTransfer(wallet.address, intent, options?.nonce)
      const from = friendly(wallet.address)
      const { balance: available } = yield* call(() => transport.account(wallet.address))
      const moved = transfer.amount - attachedTon(transfer)
      const short = (fee_max: bigint) =>
        new InsufficientFundsForFee({ address: from, required: fee_max + moved, available })
      // An account that cannot cover even the coins it sends cannot pay for the emulation either;
      // the deploying transfer's bound stands in for the fee.
      if (available <= moved + attachedTon(transfer))
        return yield* Effect.fail(short(undeployed_fee_bound_nanotons + attachedTon(transfer)))
      const fee_max = yield* feeBound(wallet, transfer)
      if (available < fee_max + moved) return yield* Effect.fail(short(fee_max))
      const message = signedTransfer(wallet, key, transfer)
      const summary = summarizeMessage(message.toBoc())
      if (summary === null) throw new Error("a signed wallet message must read back")
      remember(messages, summary.message_hash, summary)
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
      remember(messages, summary.message_hash, summary)
      const landed = () => call(() => transport.landed(summary.wallet, tx_hash, signedAt(summary)))
      if ((yield* landed()) !== null) return { tx_hash }
      const seqno = (yield* call(() => transport.getSeqno(summary.wallet))) ?? 0
      const too_late = seqno > summary.seqno
      const now = yield* call(() => transport.now())
      if (too_late || expired(now, summary.valid_until)) {
        // Read again: this very message may have taken the seqno, or landed before its
        // `valid_until`, since the first read. Only then is it a rebroadcast that moves nothing.
        if ((yield* landed()) !== null) return { tx_hash }
        if (too_late) return yield* Effect.fail(new NonceTooLow({ tx_hash, nonce: summary.seqno }))
        if (expired(now - landing_lag, summary.valid_until))
          return yield* Effect.fail(new TransactionExpired({ tx_hash }))
        // Past its valid_until, it cannot be taken now; whether an earlier send of it landed just
        // before is not known until the chain's newest blocks can be read: no proof either way.
        return yield* Effect.fail(
          new BroadcastRejected({
            tx_hash,
            reason: `its valid_until passed ${now - summary.valid_until} s ago; whether it landed just before is not known yet`,
          }),
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
   * A message this process signed or broadcast: landed, or `seen` while its seqno is unused and its
   * `valid_until` not reached, else `dropped`. Any other message: see `foreignStatus`.
   */
  const transactionStatus = (tx_hash: string, log_index = 0): Effect.Effect<TransactionStatus> =>
    Effect.gen(function* () {
      const summary = messages.get(tx_hash)
      if (summary === undefined) return yield* foreignStatus(tx_hash, log_index)
      const landedNow = () => call(() => transport.landed(summary.wallet, tx_hash, signedAt(summary)))
      const landed = yield* landedNow()
      if (landed !== null) return yield* settledStatus(tx_hash, summary, landed, log_index)
      const seqno = (yield* call(() => transport.getSeqno(summary.wallet))) ?? 0
      const now = yield* call(() => transport.now())
      // Within the landing lag past its valid_until, a message may have landed unseen yet.
      if (seqno <= summary.seqno && !expired(now - landing_lag, summary.valid_until))
        return { status: "seen", tx_hash }
      // It may have landed between the two reads.
      const late = yield* landedNow()
      return late === null
        ? { status: "dropped", tx_hash }
        : yield* settledStatus(tx_hash, summary, late, log_index)
    })

  /**
   * A message this process neither signed nor broadcast: an outside sender's jetton transfer to a
   * custody address, whose `tx_hash` is that sender's wallet message (`originOf`), or one signed
   * before a restart. Its account is the one `incomingTransfers` walked back to; else the transport
   * looks the message up by hash alone (the sandbox can, API v2 cannot). A landed wallet message
   * settles as a signed one does, as a jetton transfer when its message at `log_index` carries
   * TEP-74's `transfer`; while that message has not landed, `confirmed`. A landed
   * `internal_transfer` (a transfer a contract started, see `originOf`) is its own credit. Not
   * found, it reads `dropped`: its seqno and expiry are not known here.
   */
  const foreignStatus = (tx_hash: string, log_index: number) =>
    Effect.gen(function* () {
      const wallet = origins.get(tx_hash)
      const known = wallet === undefined ? null : yield* call(() => transport.landed(wallet, tx_hash))
      const landed = known ?? (yield* call(() => transport.landedMessage(tx_hash)))
      if (landed === null) return { status: "dropped", tx_hash } as const
      if (landed.in_message_from !== null) return creditStatus(tx_hash, landed)
      const sent = landed.outgoing[log_index]
      if (landed.failed || sent === undefined) return statusOf(tx_hash, landed)
      const next = yield* call(() => transport.landed(Address.parseRaw(sent.to), sent.message_hash))
      if (next === null) return { status: "confirmed", proof: proofOf(tx_hash, landed) } as const
      const jetton = next.in_message_body !== null && readJettonTransfer(next.in_message_body) !== null
      return jetton ? yield* jettonStatus(tx_hash, landed, log_index) : statusOf(tx_hash, landed)
    })

  /** A landed wallet message's status; a jetton transfer's follows its chain of messages. */
  const settledStatus = (
    tx_hash: string,
    summary: WalletMessageSummary,
    landed: LandedTransaction,
    log_index: number,
  ) =>
    summary.jetton === null || landed.failed || landed.outgoing.length === 0
      ? Effect.succeed(statusOf(tx_hash, landed))
      : jettonStatus(tx_hash, landed, log_index, signedAt(summary))

  /**
   * A jetton transfer is two hops past the sender's wallet: the sender's jetton wallet (which
   * debits and sends `internal_transfer`), then the recipient's jetton wallet (which credits). It is
   * `finalized` once the recipient's jetton wallet credited without failing, with that credit's
   * transaction as the proof (the TON counterpart of an EVM Transfer log); `reverted` when either
   * jetton wallet refused (the jettons bounced back, or never left), with the refusing transaction
   * as the proof; `confirmed` while a hop has not landed yet (the sender's wallet transaction is in
   * a block, the outcome is not known). The wallet's message at `log_index` starts the chain.
   * `since_unix`, when known (a message this process signed), is the earliest any hop can have
   * landed: each hop is then looked for back to it, however many transactions its account has had
   * since (without it a transport may look at the newest ones only, and a busy recipient's credit
   * could read `confirmed` for ever).
   */
  const jettonStatus = (
    tx_hash: string,
    wallet_transaction: LandedTransaction,
    log_index: number,
    since_unix?: number,
  ) =>
    Effect.gen(function* () {
      let current = wallet_transaction
      for (let hop = 0; hop < jetton_hop_count; hop++) {
        const message = current.outgoing[hop === 0 ? log_index : 0]
        if (message === undefined) return { status: "reverted", proof: proofOf(tx_hash, current) } as const
        const next = yield* call(() =>
          transport.landed(Address.parseRaw(message.to), message.message_hash, since_unix),
        )
        if (next === null) return { status: "confirmed", proof: proofOf(tx_hash, current) } as const
        if (next.failed) return { status: "reverted", proof: proofOf(tx_hash, next) } as const
        current = next
      }
      const credit = current.in_message_body === null ? null : readInternalTransfer(current.in_message_body)
      if (credit === null) return { status: "reverted", proof: proofOf(tx_hash, current) } as const
      return { status: "finalized", proof: { ...proofOf(tx_hash, current), log_index } } as const
    })

  const balance = (address: string, asset: ChainAsset) =>
    Effect.gen(function* () {
      const owner = yield* parseAddress(address)
      if (asset.kind === "token") return yield* jettonBalance(owner, yield* parseAddress(asset.contract))
      return (yield* call(() => transport.account(owner))).balance
    })

  /**
   * The `tx_hash` a jetton credit is known by: the hash of the external message that started its
   * chain (the sender's wallet message, as `signTransfer` returned it), found by walking back from
   * the credit through the sending jetton wallet's transaction to the owner wallet's. Each parent
   * is found among its account's transactions just before the message's `created_lt`. A mint walks
   * back to the issuer's message the same way. A chain that cannot be walked back to a wallet
   * message in two hops (a contract that owns jettons started it) is known by the credit's own
   * inbound message, the `internal_transfer`. `log_index` is the index of the message the wallet
   * sent it by (see the module comment); 0 for a chain not walked. The message's account is
   * remembered: `transactionStatus` finds a message through it, its hash does not name it.
   */
  const originOf = (credit: LandedTransaction) =>
    Effect.gen(function* () {
      const unwalked = () => {
        const own = credit.in_message_hash
        if (own === null) return { tx_hash: credit.hash, log_index: 0 }
        remember(origins, own, Address.parseRaw(credit.account))
        return { tx_hash: own, log_index: 0 }
      }
      let current = credit
      let log_index = 0
      for (let hop = 0; hop < jetton_hop_count; hop++) {
        const source = current.in_message_from
        const message_hash = current.in_message_hash
        if (source === null || message_hash === null) break
        const created_lt = current.in_message_created_lt
        const window = yield* call(() =>
          transport.transactionsOf(
            Address.parseRaw(source),
            created_lt - origin_search_lt_window,
            created_lt,
            incoming_transactions_per_address_max,
          ),
        )
        const parent = window.find((landed) =>
          landed.outgoing.some((out) => out.message_hash === message_hash),
        )
        if (parent === undefined) return unwalked()
        log_index = parent.outgoing.findIndex((out) => out.message_hash === message_hash)
        current = parent
      }
      if (current.in_message_from !== null || current.in_message_hash === null) return unwalked()
      remember(origins, current.in_message_hash, Address.parseRaw(current.account))
      return { tx_hash: current.in_message_hash, log_index }
    })

  /**
   * Native TON: the coins of every internal message credited to the owner's wallet. A jetton:
   * every `internal_transfer` the owner's jetton wallet accepted (from a sibling wallet or, for a
   * mint, the minter), which is exactly when the wallet's balance grew; the sender is the owner
   * the message names, which the jetton wallet checked against the sending wallet's address.
   */
  const incomingTransfers = (query: IncomingTransfersQuery) =>
    Effect.gen(function* () {
      if (query.to_block < query.from_block) {
        return yield* Effect.fail(new QueryTooWide({ reason: "the lt range is empty" }))
      }
      if (query.addresses.length > incoming_addresses_max) {
        return yield* Effect.fail(new QueryTooWide({ reason: "too many addresses" }))
      }
      const minter = query.contract === ton_native_contract ? null : yield* parseAddress(query.contract)
      const found: Array<IncomingTransfer> = []
      for (const text of query.addresses) {
        const owner = yield* parseAddress(text)
        const watched = minter === null ? owner : yield* jettonWalletOf(owner, minter)
        const limit = incoming_transactions_per_address_max + 1
        const landed = yield* call(() =>
          transport.transactionsOf(watched, query.from_block, query.to_block, limit),
        )
        if (landed.length > incoming_transactions_per_address_max) {
          return yield* Effect.fail(
            new QueryTooWide({ reason: `too many transactions for ${text}; narrow the range` }),
          )
        }
        for (const transaction of landed) {
          const credit = minter === null ? nativeCredit(transaction) : jettonCredit(transaction)
          if (credit === null) continue
          const origin =
            minter === null
              ? { tx_hash: credit.proof.tx_hash, log_index: credit.proof.log_index }
              : yield* originOf(transaction)
          found.push({ contract: query.contract, to: text, ...credit, proof: { ...credit.proof, ...origin } })
        }
      }
      return found.sort((a, b) => (a.proof.block_number < b.proof.block_number ? -1 : 1))
    })

  /**
   * `owner`'s jetton wallet under `minter`, deployed or not: computed for the platform's jetton,
   * asked of any other minter once (see `jettonWalletOf`).
   */
  const tokenAccountOf = (owner: string, minter: string) =>
    Effect.gen(function* () {
      const wallet = yield* jettonWalletOf(yield* parseAddress(owner), yield* parseAddress(minter))
      return friendly(wallet)
    })

  return {
    estimateTransferFee,
    signTransfer,
    broadcast,
    transactionStatus,
    balance,
    tokenAccountOf,
    blockNumber: () => call(() => transport.newestLt()),
    incomingTransfers,
  }
}

/**
 * The status of an internal message taken as a jetton credit: `finalized` where the jetton wallet
 * accepted the `internal_transfer`, `reverted` where it refused it; any other message is no
 * transfer this adapter reported, `dropped`.
 */
function creditStatus(tx_hash: string, landed: LandedTransaction): TransactionStatus {
  const body = landed.in_message_body
  if (body === null || landed.in_message_bounced || readInternalTransfer(body) === null)
    return { status: "dropped", tx_hash }
  if (landed.failed) return { status: "reverted", proof: proofOf(tx_hash, landed) }
  return { status: "finalized", proof: { ...proofOf(tx_hash, landed), log_index: 0 } }
}

function statusOf(tx_hash: string, landed: LandedTransaction): TransactionStatus {
  const proof = proofOf(tx_hash, landed)
  return landed.failed || landed.outgoing.length === 0
    ? { status: "reverted", proof }
    : { status: "finalized", proof }
}

type Credit = Pick<IncomingTransfer, "from" | "amount" | "proof">

function nativeCredit(transaction: LandedTransaction): Credit | null {
  const from = transaction.in_message_from
  if (from === null || transaction.in_message_bounced || transaction.in_message_returned) return null
  if (transaction.in_message_value === 0n) return null
  const proof = proofOf(transaction.hash, transaction)
  return { from: friendly(Address.parseRaw(from)), amount: transaction.in_message_value, proof }
}

function jettonCredit(transaction: LandedTransaction): Credit | null {
  if (transaction.failed || transaction.in_message_bounced || transaction.in_message_body === null)
    return null
  const credit = readInternalTransfer(transaction.in_message_body)
  if (credit === null) return null
  const proof = { ...proofOf(transaction.hash, transaction), log_index: 0 }
  return { from: friendly(credit.from), amount: credit.amount, proof }
}

/**
 * A jetton transfer's query id: the wallet message's `valid_until` and seqno, which no two
 * messages of one wallet share, so the id is unique per sender and known before signing.
 */
function jettonQueryId(seqno: number, valid_until: number): bigint {
  return (BigInt(valid_until) << 32n) | BigInt(seqno)
}

/** The TON a transfer attaches for a jetton wallet to spend, counted in the fee; 0 for native. */
function attachedTon(transfer: WalletTransfer): bigint {
  return transfer.body === null ? 0n : transfer.amount
}

function proofOf(tx_hash: string, landed: LandedTransaction): InclusionProof {
  return { tx_hash, block_number: landed.lt, block_hash: landed.hash, log_index: null, confirmations: 1 }
}

/** The user-friendly, URL-safe, non-bounceable form custody uses (`UQ...`). */
function friendly(address: Address): string {
  return address.toString({ urlSafe: true, bounceable: false, testOnly: false })
}

/**
 * The earliest time (Unix seconds) a message could have landed: when it was signed, `valid_until`
 * less the lifetime it was given, with a minute's margin for clocks.
 */
function signedAt(summary: { readonly valid_until: number }): number {
  return summary.valid_until - message_ttl_seconds - 60
}

/** The wallet refuses a message from its `valid_until` on (`valid_until <= now()` in its code). */
function expired(now: number, valid_until: number): boolean {
  return now >= valid_until
}

function ceilPercent(value: bigint, percent: bigint): bigint {
  return (value * percent + 99n) / 100n
}

function remember<V>(memory: Map<string, V>, key: string, value: V): void {
  if (memory.size >= message_memory_count_max && !memory.has(key)) {
    const oldest = memory.keys().next()
    if (oldest.done !== true) memory.delete(oldest.value)
  }
  memory.set(key, value)
}
