/**
 * The TON transport on @ton/sandbox, in process: for tests and the sandbox. The sandbox runs the
 * real TVM and TON's transaction rules, but has no blocks, no validators and no history query that
 * leaves its state alone (its `getTransactions` reverses its own list on every call), so this
 * transport adds the little the adapter needs:
 * - a record of every transaction the messages it sent caused, by account and by inbound message
 *   hash; it lives as long as the transport and holds at most `landed_record_count_max`
 *   transactions (the oldest are forgotten first);
 * - `apply`, for the sandbox's own administration (minting, freezing, topping up TON): it runs in
 *   the same queue as everything else and its transactions are recorded like a broadcast's, so
 *   that deposits made that way are seen by `incomingTransfers`;
 * - emulation for fee estimates: a snapshot of the sandbox, the message run with its signature
 *   check skipped, and the snapshot restored. Calls are serialized so that no send interleaves with
 *   an emulation;
 * - optionally (`hold_messages`), blocks: the sandbox executes a message the moment it is sent, so a
 *   transfer would land before its sender even asked for its status, unlike on any real chain. A
 *   holding transport accepts an external message into a queue (once per message hash, like a
 *   node's pool) and executes the queue only when its owner calls `produceBlock` (the sandbox chain
 *   does so on a timer). Until then the message has not landed and its wallet's seqno is unused,
 *   which the adapter reads as `seen`. The wallet's own checks (signature, seqno, `valid_until`)
 *   run at execution, as a validator runs them: a message the wallet refuses stays queued for the
 *   next block while it could still pass (its seqno not yet reached, as when a sender's next
 *   message arrived before the one before it, and its `valid_until` ahead), and is dropped
 *   otherwise, without a trace, like an expired message on a real chain.
 */
import type { Address, Cell, TupleItem } from "@ton/core"
import { type Blockchain, EmulationError, type SendMessageResult } from "@ton/sandbox"
import { assert } from "../../../domain/assert.ts"
import { summarizeMessage, summarizeTransaction } from "./transaction.ts"
import type { AccountStatus, LandedTransaction, SendOutcome, TonAccount, TonTransport } from "./transport.ts"

const landed_record_count_max = 100_000
/** The most external messages a holding transport keeps for the next block; more are rejected. */
const held_message_count_max = 10_000

export interface SandboxTransportOptions {
  /** Hold sent messages until `produceBlock` instead of executing them at once; default false. */
  readonly hold_messages?: boolean
}

/** The sandbox transport, with the extras the sandbox chain needs. */
export interface SandboxTonTransport extends TonTransport {
  /**
   * Runs `action` (messages sent straight into the sandbox, e.g. from a treasury) between the
   * transport's other calls, and records the transactions it caused. It is never held.
   */
  readonly apply: (action: () => Promise<SendMessageResult>) => Promise<SendMessageResult>
  /**
   * Produces one block `elapsed_seconds` after the previous one: a clock a test pinned
   * (`blockchain.now`) moves forward by that much (the wall clock moves by itself), then the held
   * messages run in the order they arrived. Nothing to run without `hold_messages`.
   */
  readonly produceBlock: (elapsed_seconds: number) => Promise<void>
}

/** An external message waiting for its block. */
interface HeldMessage {
  readonly message: Cell
  /** The wallet's seqno and valid_until, when it is a wallet message (`summarizeMessage`). */
  readonly wallet: { readonly address: Address; readonly seqno: number; readonly valid_until: number } | null
}

/**
 * Wraps a sandbox blockchain.
 * @example const transport = makeSandboxTransport(await Blockchain.create())
 * @example const held = makeSandboxTransport(blockchain, { hold_messages: true }); await held.produceBlock(1)
 */
export function makeSandboxTransport(
  blockchain: Blockchain,
  options: SandboxTransportOptions = {},
): SandboxTonTransport {
  const hold_messages = options.hold_messages ?? false
  // Message hash -> the message, in arrival order.
  const held = new Map<string, HeldMessage>()
  const by_message = new Map<string, LandedTransaction>()
  const by_account = new Map<string, Array<LandedTransaction>>()
  let record_count = 0
  let queue: Promise<unknown> = Promise.resolve()
  const serialized = <A>(run: () => Promise<A>): Promise<A> => {
    const next = queue.then(run)
    queue = next.catch(() => undefined)
    return next
  }

  const record = (landed: LandedTransaction) => {
    if (record_count >= landed_record_count_max) forgetOldest()
    record_count += 1
    if (landed.in_message_hash !== null) by_message.set(landed.in_message_hash, landed)
    const list = by_account.get(landed.account) ?? []
    list.push(landed)
    by_account.set(landed.account, list)
  }

  const forgetOldest = () => {
    const oldest = by_message.entries().next()
    if (oldest.done === true) return
    const [hash, landed] = oldest.value
    by_message.delete(hash)
    const list = by_account.get(landed.account)
    if (list !== undefined) list.splice(list.indexOf(landed), 1)
    record_count -= 1
  }

  const recordAll = (result: SendMessageResult) => {
    for (const transaction of result.transactions) {
      const info = transaction.inMessage?.info
      if (info === undefined || info.type === "external-out") continue
      record(summarizeTransaction(info.dest, transaction))
    }
  }

  const apply = (action: () => Promise<SendMessageResult>) =>
    serialized(async () => {
      const result = await action()
      recordAll(result)
      return result
    })

  /** Runs one external message now; a refusal by its destination (the wallet) is a value. */
  const execute = async (message: Cell): Promise<SendOutcome> => {
    try {
      recordAll(await blockchain.sendMessage(message))
      return { kind: "accepted" }
    } catch (error) {
      if (error instanceof EmulationError) return { kind: "rejected", reason: error.error }
      throw error
    }
  }

  /** Queues `message` for the next block, once per hash. */
  const hold = (message: Cell): SendOutcome => {
    const hash = message.hash().toString("hex")
    if (held.has(hash)) return { kind: "accepted" }
    if (held.size >= held_message_count_max) return { kind: "rejected", reason: "the message queue is full" }
    const summary = summarizeMessage(message.toBoc())
    const wallet =
      summary === null
        ? null
        : { address: summary.wallet, seqno: summary.seqno, valid_until: summary.valid_until }
    held.set(hash, { message, wallet })
    return { kind: "accepted" }
  }

  const send = (message: Cell) =>
    serialized(async (): Promise<SendOutcome> => (hold_messages ? hold(message) : await execute(message)))

  const chainNow = () => blockchain.now ?? Math.floor(Date.now() / 1000)

  /** Whether a refused message could pass in a later block: its seqno not reached, its time not up. */
  const mayPassLater = async (wallet: HeldMessage["wallet"]) => {
    if (wallet === null || chainNow() >= wallet.valid_until) return false
    return ((await getSeqno(wallet.address)) ?? 0) <= wallet.seqno
  }

  const produceBlock = (elapsed_seconds: number) =>
    serialized(async () => {
      assert(Number.isInteger(elapsed_seconds) && elapsed_seconds >= 0, "a block's time is whole seconds")
      if (blockchain.now !== undefined) blockchain.now += elapsed_seconds
      const block = [...held]
      held.clear()
      for (const [hash, waiting] of block) {
        const outcome = await execute(waiting.message)
        if (outcome.kind === "rejected" && (await mayPassLater(waiting.wallet))) held.set(hash, waiting)
      }
    })

  const emulate = (address: Address, message: Cell) =>
    serialized(async () => {
      const snapshot = blockchain.snapshot()
      try {
        const result = await blockchain.sendMessage(message, { ignoreChksig: true })
        const own = result.transactions.find(
          (transaction) => transaction.inMessage?.info.type === "external-in",
        )
        if (own === undefined) throw new Error("the sandbox ran an external message without its transaction")
        return { kind: "ok" as const, fee: summarizeTransaction(address, own).fee }
      } catch (error) {
        if (error instanceof EmulationError) return { kind: "rejected" as const, reason: error.error }
        throw error
      } finally {
        await blockchain.loadFrom(snapshot)
      }
    })

  const account = async (address: Address): Promise<TonAccount> => {
    const contract = await blockchain.getContract(address)
    const state = contract.accountState
    const status: AccountStatus = state === undefined ? "nonexist" : state.type
    return { status, balance: contract.balance }
  }

  const getSeqno = async (address: Address) => {
    if ((await account(address)).status !== "active") return null
    const result = await blockchain.runGetMethod(address, "seqno")
    return result.exitCode === 0 ? result.stackReader.readNumber() : null
  }

  const publicKey = async (address: Address) => {
    const result = await blockchain.runGetMethod(address, "get_public_key")
    const key = result.stackReader.readBigNumber()
    return Buffer.from(key.toString(16).padStart(64, "0"), "hex")
  }

  const runGetMethod = async (address: Address, method: string, args: ReadonlyArray<TupleItem>) => {
    if ((await account(address)).status !== "active") return null
    try {
      const result = await blockchain.runGetMethod(address, method, [...args])
      return result.exitCode === 0 || result.exitCode === 1 ? result.stackReader : null
    } catch (error) {
      // @ton/sandbox throws where a node answers the exit code (11: no such method, as on an
      // ordinary wallet asked `get_wallet_data`): answered as the HTTP transport answers it, no
      // result. Thrown, it failed every transfer to a deployed wallet, for good.
      if (error instanceof Error && "exitCode" in error) return null
      throw error
    }
  }

  return {
    now: async () => blockchain.now ?? Math.floor(Date.now() / 1000),
    newestLt: async () => blockchain.lt,
    account,
    getSeqno,
    publicKey,
    runGetMethod,
    apply,
    produceBlock,
    emulate,
    send,
    landed: async (address, message_hash) => {
      const landed = by_message.get(message_hash)
      return landed !== undefined && landed.account === address.toRawString() ? landed : null
    },
    landedMessage: async (message_hash) => by_message.get(message_hash) ?? null,
    transactionsOf: async (address, from_lt, to_lt, limit) =>
      (by_account.get(address.toRawString()) ?? [])
        .filter((landed) => landed.lt >= from_lt && landed.lt <= to_lt)
        .slice(0, limit),
  }
}
