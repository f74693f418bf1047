/**
 * The TON transport over an HTTP API (toncenter's API v2, through @ton/ton's `TonClient`), for the
 * real network: configured by URL (and an API key where the endpoint wants one). Not exercised by
 * the tests (no TON node or API runs here); the @ton/sandbox transport is.
 *
 * Limits of API v2 that shape it:
 * - The clock is this machine's: the API does not expose the chain's time.
 * - `landed` pages back through the wallet's history to the earliest time the message could have
 *   landed (`since_unix`, which the adapter gives for every message it signed), at most
 *   `landed_page_count_max` pages, and fails rather than answer "not landed" when it cannot reach
 *   it: a busy wallet must not make a landed message read as dropped, which would release funds it
 *   sent. Without `since_unix` it looks at the newest `landed_lookback_count` transactions only.
 * - A page of an account's history starts at a transaction named by lt and hash, never at an lt:
 *   `transactionsOf` starts at the lowest transaction above its range that an earlier read passed
 *   (`history-anchors.ts`), else at the newest, so that only a first read of an old range pages
 *   through the history newer than it, a bounded number of pages per read, each read going on
 *   from where the one before stopped.
 * - `landedMessage` (a message whose wallet is not known) answers null: v2 cannot search by message
 *   hash alone. The adapter remembers the wallets of the incoming transfers it read instead.
 * - The API refuses an external message the wallet would not accept with an HTTP error; an error
 *   naming the external message becomes `rejected`, any other is a fault.
 */
import { type Address, type Cell, loadMessage } from "@ton/core"
import { TonClient } from "@ton/ton"
import { historyAnchors } from "../history-anchors.ts"
import { summarizeTransaction } from "./transaction.ts"
import type { LandedTransaction, SendOutcome, TonTransport } from "./transport.ts"

export interface TonHttpConfig {
  /** The JSON-RPC endpoint, e.g. `https://toncenter.com/api/v2/jsonRPC`. */
  readonly endpoint_url: string
  readonly api_key?: string
  readonly request_timeout_ms?: number
}

const landed_lookback_count = 20
/** Pages of `transactions_page_size` that `landed` reads at most to reach `since_unix`. */
const landed_page_count_max = 50
const transactions_page_size = 100
/**
 * Pages of transactions newer than its range one `transactionsOf` reads at most (10,000
 * transactions), before it fails; the pages it read are remembered, so the next read goes on.
 */
const newer_page_count_max = 100
const request_timeout_ms_default = 10_000
/**
 * How long past its valid_until a message is still looked for (see `TonTransport.landing_lag_seconds`):
 * masterchain blocks come every few seconds, and the two clocks may differ by some more.
 */
export const ton_http_landing_lag_seconds = 60

/**
 * A transport for the API at `config.endpoint_url`.
 * @example const transport = makeHttpTransport({ endpoint_url: "https://toncenter.com/api/v2/jsonRPC" })
 */
export function makeHttpTransport(
  config: TonHttpConfig,
  /** The API client; tests give one that answers like the API from a local chain's history. */
  client: Pick<
    TonClient,
    | "getContractState"
    | "estimateExternalMessageFee"
    | "sendFile"
    | "getTransactions"
    | "getMasterchainInfo"
    | "getShardTransactions"
    | "runMethod"
  > = new TonClient({
    endpoint: config.endpoint_url,
    timeout: config.request_timeout_ms ?? request_timeout_ms_default,
    ...(config.api_key === undefined ? {} : { apiKey: config.api_key }),
  }),
): TonTransport {
  const account = async (address: Address) => {
    const state = await client.getContractState(address)
    const status = state.state === "uninitialized" ? "uninit" : state.state
    return { status, balance: state.balance } as const
  }

  const emulate = async (address: Address, message: Cell) => {
    const parsed = loadMessage(message.beginParse())
    const estimate = await client.estimateExternalMessageFee(address, {
      body: parsed.body,
      initCode: parsed.init?.code ?? null,
      initData: parsed.init?.data ?? null,
      ignoreSignature: true,
    })
    const fees = estimate.source_fees
    const fee = BigInt(fees.in_fwd_fee + fees.storage_fee + fees.gas_fee + fees.fwd_fee)
    return { kind: "ok" as const, fee }
  }

  const send = async (message: Cell): Promise<SendOutcome> => {
    try {
      await client.sendFile(message.toBoc())
      return { kind: "accepted" }
    } catch (error) {
      const reason = error instanceof Error ? error.message : String(error)
      if (/external message/i.test(reason)) return { kind: "rejected", reason }
      throw error
    }
  }

  /** The transactions reads passed, one a page: where a later read of an older range starts. */
  const anchors = historyAnchors<{ lt: string; hash: string }>()

  /**
   * `address`'s history, newest first (or from just below `start`), a page of
   * `transactions_page_size` at a time, to its start.
   */
  async function* historyPages(address: Address, start?: { lt: string; hash: string }) {
    let cursor = start
    for (;;) {
      const batch = await client.getTransactions(address, {
        limit: transactions_page_size,
        archival: true,
        ...(cursor === undefined ? {} : { ...cursor, inclusive: false }),
      })
      yield batch
      const last = batch.at(-1)
      if (last === undefined || batch.length < transactions_page_size) return
      cursor = { lt: last.lt.toString(), hash: last.hash().toString("base64") }
    }
  }

  /**
   * Pages backwards from just above `to_lt` (the lowest transaction above it that a read passed,
   * else the newest) down to `from_lt`, and stops once it has more than `limit`. At most
   * `newer_page_count_max` pages newer than the range: past them it fails, and the next read goes
   * on from where this one stopped.
   */
  const transactionsOf = async (address: Address, from_lt: bigint, to_lt: bigint, limit: number) => {
    const key = address.toRawString()
    const found: Array<LandedTransaction> = []
    let newer_pages = 0
    for await (const batch of historyPages(address, anchors.above(key, to_lt))) {
      for (const transaction of batch) {
        if (transaction.lt >= from_lt && transaction.lt <= to_lt)
          found.push(summarizeTransaction(address, transaction))
      }
      const last = batch.at(-1)
      if (last === undefined) break
      anchors.remember(key, last.lt, { lt: last.lt.toString(), hash: last.hash().toString("base64") })
      if (last.lt < from_lt || found.length > limit) break
      if (last.lt > to_lt && ++newer_pages === newer_page_count_max) {
        throw new Error(
          `more than ${newer_page_count_max * transactions_page_size} transactions of ${address.toString()} newer than lt ${to_lt}: the next read goes on from there`,
        )
      }
    }
    return found.reverse().slice(0, limit)
  }

  return {
    now: async () => Math.floor(Date.now() / 1000),
    // This machine's clock, and a block's messages visible only after a masterchain block commits it.
    landing_lag_seconds: ton_http_landing_lag_seconds,
    newestLt: async () => {
      const info = await client.getMasterchainInfo()
      const block = await client.getShardTransactions(info.workchain, info.latestSeqno, info.shard)
      return block.reduce((newest, entry) => (BigInt(entry.lt) > newest ? BigInt(entry.lt) : newest), 0n)
    },
    account,
    getSeqno: async (address) => {
      if ((await account(address)).status !== "active") return null
      return (await client.runMethod(address, "seqno")).stack.readNumber()
    },
    publicKey: async (address) => {
      const key = (await client.runMethod(address, "get_public_key")).stack.readBigNumber()
      return Buffer.from(key.toString(16).padStart(64, "0"), "hex")
    },
    runGetMethod: async (address, method, args) => {
      if ((await account(address)).status !== "active") return null
      try {
        return (await client.runMethod(address, method, [...args])).stack
      } catch (error) {
        // TonClient throws for a get method that exits with an error code; that is an answer.
        if (error instanceof Error && /exit_code/i.test(error.message)) return null
        throw error
      }
    },
    emulate,
    send,
    landed: async (address, message_hash, since_unix) => {
      if (since_unix === undefined) {
        const newest = await client.getTransactions(address, { limit: landed_lookback_count })
        const summaries = newest.map((transaction) => summarizeTransaction(address, transaction))
        return summaries.find((landed) => landed.in_message_hash === message_hash) ?? null
      }
      let pages = 0
      for await (const batch of historyPages(address)) {
        for (const transaction of batch) {
          const landed = summarizeTransaction(address, transaction)
          if (landed.in_message_hash === message_hash) return landed
        }
        const oldest = batch.at(-1)
        // Back past the earliest the message could have landed (or the whole history read).
        if (oldest === undefined || oldest.now < since_unix) return null
        if (++pages === landed_page_count_max) {
          throw new Error(
            `more than ${landed_page_count_max * transactions_page_size} transactions of ${address.toString()} since ${since_unix}: cannot tell whether the message landed`,
          )
        }
      }
      return null
    },
    // API v2 finds a transaction by its account only; toncenter's API v3 (`transactionsByMessage`)
    // could search by message hash alone.
    landedMessage: async () => null,
    transactionsOf,
  }
}
