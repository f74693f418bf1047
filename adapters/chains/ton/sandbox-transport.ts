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
 *   an emulation.
 */
import type { Address, Cell, TupleItem } from "@ton/core"
import { type Blockchain, EmulationError, type SendMessageResult } from "@ton/sandbox"
import { summarizeTransaction } from "./transaction.ts"
import type { AccountStatus, LandedTransaction, SendOutcome, TonAccount, TonTransport } from "./transport.ts"

const landed_record_count_max = 100_000

/** The sandbox transport, with the one extra the sandbox chain needs. */
export interface SandboxTonTransport extends TonTransport {
  /**
   * Runs `action` (messages sent straight into the sandbox, e.g. from a treasury) between the
   * transport's other calls, and records the transactions it caused.
   */
  readonly apply: (action: () => Promise<SendMessageResult>) => Promise<SendMessageResult>
}

/**
 * Wraps a sandbox blockchain.
 * @example const transport = makeSandboxTransport(await Blockchain.create())
 */
export function makeSandboxTransport(blockchain: Blockchain): SandboxTonTransport {
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

  const send = (message: Cell) =>
    serialized(async (): Promise<SendOutcome> => {
      try {
        recordAll(await blockchain.sendMessage(message))
        return { kind: "accepted" }
      } catch (error) {
        if (error instanceof EmulationError) return { kind: "rejected", reason: error.error }
        throw error
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
    const result = await blockchain.runGetMethod(address, method, [...args])
    return result.exitCode === 0 || result.exitCode === 1 ? result.stackReader : null
  }

  return {
    now: async () => blockchain.now ?? Math.floor(Date.now() / 1000),
    newestLt: async () => blockchain.lt,
    account,
    getSeqno,
    publicKey,
    runGetMethod,
    apply,
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
