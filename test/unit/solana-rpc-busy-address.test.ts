// Proves that the production Solana transport (adapters/chains/solana/rpc-transport.ts) reads an old
// slot range of a busy address. No cluster runs here, so the RPC client is a stand-in that answers
// `getSignaturesForAddress` as a node does (newest first, or from just below the signature named by
// `before`, which it must know). A range behind 2,100 newer signatures is read (it used to fail on
// every read past 20 pages); one behind more than a read's bound of newer pages is read by the next
// read, which goes on from where the first stopped; and only finalized signatures are started from.
import type { Address, Signature } from "@solana/kit"
import { describe, expect, test } from "vitest"
import { makeRpcTransport } from "../../adapters/chains/solana/rpc-transport.ts"

const watched = "Watched1111111111111111111111111111111111111" as Address
const signatureAt = (slot: bigint) => `signature-${slot}` as Signature
const answer = <T>(value: T) => ({ send: async () => value })

/** A node whose history of `watched` is one signature at slot 1,000, then `newer` from slot 10,000. */
const standIn = (newer: number, confirmation: "confirmed" | "finalized") => {
  const slots = [...Array.from({ length: newer }, (_, i) => 10_000n + BigInt(newer - 1 - i)), 1_000n]
  const entries = slots.map((slot) => ({
    signature: signatureAt(slot),
    slot,
    err: null,
    confirmationStatus: confirmation,
    blockTime: null,
    memo: null,
  }))
  const rpc = {
    pages_read: 0,
    getSignaturesForAddress: (address: Address, config: { limit: number; before?: Signature }) => {
      rpc.pages_read += 1
      if (address !== watched) return answer([])
      const at = config.before === undefined ? -1 : entries.findIndex((e) => e.signature === config.before)
      if (config.before !== undefined && at < 0) throw new Error("the node does not know `before`")
      return answer(entries.slice(at + 1, at + 1 + config.limit))
    },
    getSignatureStatuses: () => answer({ value: [{ confirmationStatus: "finalized" }] }),
    getTransaction: (signature: Signature) =>
      answer({
        slot: BigInt(signature.slice("signature-".length)),
        transaction: ["AA==", "base64"],
        meta: { err: null, loadedAddresses: { writable: [], readonly: [] }, innerInstructions: [] },
      }),
    getBlock: (slot: bigint) => answer({ blockhash: `block-${slot}` }),
  }
  const transport = makeRpcTransport(
    "http://stand-in.invalid",
    rpc as unknown as Parameters<typeof makeRpcTransport>[1],
  )
  return { rpc, transport }
}

const slotsOf = async (transport: ReturnType<typeof makeRpcTransport>) =>
  (await transport.transactionsOf(watched, 1_000n, 1_000n, 1_001)).map((landed) => landed.slot)

describe("the Solana RPC transport, a busy address", () => {
  test("reads a range behind 2,100 newer signatures", async () => {
    const { rpc, transport } = standIn(2_100, "finalized")
    expect(await slotsOf(transport)).toEqual([1_000n])
    expect(rpc.pages_read).toBe(3)
  })

  test("behind more newer signatures than one read pages through, the next read goes on and reads the range", async () => {
    const { rpc, transport } = standIn(20_500, "finalized")
    await expect(slotsOf(transport)).rejects.toThrow(/more than 20000 signatures .* newer than slot 1000/)
    expect(rpc.pages_read).toBe(20)
    rpc.pages_read = 0
    expect(await slotsOf(transport)).toEqual([1_000n])
    expect(rpc.pages_read).toBe(1)
  })

  test("starts from no signature that is not finalized (a fork may drop it): reads from the newest again", async () => {
    const { rpc, transport } = standIn(2_100, "confirmed")
    expect(await slotsOf(transport)).toEqual([1_000n])
    rpc.pages_read = 0
    expect(await slotsOf(transport)).toEqual([1_000n])
    expect(rpc.pages_read).toBe(3)
  })
})
