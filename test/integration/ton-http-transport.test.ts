// The TON HTTP transport's `landed` (adapters/chains/ton/http-transport.ts), which the production
// adapter relies on to tell a landed wallet message from a dropped one. No TON API runs here, so the
// API client is a stand-in that answers `getTransactions` as toncenter's API v2 does (newest first,
// pages by `lt`/`hash`, exclusive), from the real transactions of a @ton/sandbox chain. A message
// that landed before a few hundred newer transactions of its wallet is still found when the caller
// says since when it could have landed; without that bound, only the newest 20 are looked at.
import { Address, Cell, loadMessage, type Transaction, toNano } from "@ton/core"
import { Blockchain } from "@ton/sandbox"
import { Effect } from "effect"
import { beforeAll, describe, expect, test } from "vitest"
import { makeTonAdapter } from "../../adapters/chains/ton/adapter.ts"
import { makeHttpTransport } from "../../adapters/chains/ton/http-transport.ts"
import { makeSandboxTransport } from "../../adapters/chains/ton/sandbox-transport.ts"
import { deriveAddress, deriveSigningKey } from "../../domain/custody/derive.ts"

const seed = new Uint8Array(64).fill(3)
const ref = { chain: "ton", tenant_index: 0, wallet_index: 0 } as const

describe("the TON HTTP transport's landed", () => {
  const history: Array<Transaction> = []
  const wallet = Address.parse(deriveAddress(seed, ref))
  let message_hash = ""
  let pages_read = 0

  /** API v2's getTransactions over the chain's history of `wallet`: newest first, exclusive cursor. */
  const client = {
    getTransactions: async (address: Address, opts: { limit: number; lt?: string; hash?: string }) => {
      pages_read += 1
      const newest_first = address.equals(wallet) ? [...history].sort((a, b) => (a.lt > b.lt ? -1 : 1)) : []
      const start = opts.lt === undefined ? 0 : newest_first.findIndex((t) => t.lt < BigInt(opts.lt ?? 0))
      return start < 0 ? [] : newest_first.slice(start, start + opts.limit)
    },
  }
  const transport = makeHttpTransport(
    { endpoint_url: "http://stand-in.invalid" },
    client as unknown as Parameters<typeof makeHttpTransport>[1],
  )

  beforeAll(async () => {
    const blockchain = await Blockchain.create()
    const account = BigInt(`0x${wallet.hash.toString("hex")}`)
    const keep = (transactions: ReadonlyArray<Transaction>) => {
      for (const transaction of transactions) if (transaction.address === account) history.push(transaction)
    }
    const funder = await blockchain.treasury("funder")
    blockchain.now = 1_800_000_000
    keep((await funder.send({ to: wallet, value: toNano("5"), bounce: false })).transactions)
    // The wallet's own message, signed and sent at 1_800_000_100.
    blockchain.now = 1_800_000_100
    const adapter = makeTonAdapter(makeSandboxTransport(blockchain))
    const signed = await Effect.runPromise(
      adapter.signTransfer(deriveSigningKey(seed, ref), {
        asset: { kind: "native" },
        to: funder.address.toString(),
        amount: toNano("0.1"),
      }),
    )
    message_hash = signed.tx_hash
    const [message_cell] = Cell.fromBoc(Buffer.from(signed.raw.slice(2), "hex"))
    if (message_cell === undefined) throw new Error("a signed message is one cell")
    const external = loadMessage(message_cell.beginParse())
    keep((await blockchain.sendMessage(external)).transactions)
    // Then 250 deposits to the wallet, each a transaction newer than the message's.
    for (let index = 0; index < 250; index++) {
      blockchain.now = 1_800_000_200 + index
      keep((await funder.send({ to: wallet, value: toNano("0.01"), bounce: false })).transactions)
    }
  }, 120_000)

  test("finds a message behind hundreds of newer transactions when told since when it could have landed", async () => {
    expect(history.length).toBe(252)
    pages_read = 0
    const found = await transport.landed(wallet, message_hash, 1_800_000_040)
    expect(found?.in_message_hash).toBe(message_hash)
    expect(pages_read).toBe(3)
    // Without the bound, only the newest 20: the message reads as not landed.
    expect(await transport.landed(wallet, message_hash)).toBeNull()
  })

  test("answers null for a message that did not land, paging no further back than the bound", async () => {
    pages_read = 0
    expect(await transport.landed(wallet, "ab".repeat(32), 1_800_000_300)).toBeNull()
    // 250 deposits from 1_800_000_200: the first page's oldest (1_800_000_350) is after the bound,
    // the second's (1_800_000_250) is not.
    expect(pages_read).toBe(2)
  })
})
