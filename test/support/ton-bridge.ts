/**
 * The TON transport over the transport bridge (transport-bridge.ts), for the crash test: @ton/sandbox
 * runs inside the process that owns it, so the chain stays in the test process (with its block
 * clock) and the worker process that is killed reaches it over HTTP, as the Solana crash test does
 * with LiteSVM. Beyond bigints and bytes, TON's transport carries @ton/core values: addresses (as
 * raw `0:...` text), cells (as a bag of cells) and the stacks get methods answer (`TupleReader`, as
 * its items; a reader is read to its end when it crosses).
 */
import { Address, Cell, TupleReader } from "@ton/core"
import type { SandboxTonTransport } from "../../adapters/chains/ton/sandbox-transport.ts"
import type { TonTransport } from "../../adapters/chains/ton/transport.ts"
import { type BridgeCodec, bridgedTransport, serveTransport } from "./transport-bridge.ts"

const methods = [
  "now",
  "newestLt",
  "account",
  "getSeqno",
  "publicKey",
  "runGetMethod",
  "emulate",
  "send",
  "landed",
  "transactionsOf",
] as const satisfies ReadonlyArray<keyof TonTransport>

const itemsOf = (reader: TupleReader) => {
  const items = []
  while (reader.remaining > 0) items.push(reader.pop())
  return items
}

const codec: BridgeCodec = {
  tag: (item) => {
    if (item instanceof Address) return { $address: item.toRawString() }
    if (item instanceof Cell) return { $cell: item.toBoc().toString("base64") }
    if (item instanceof TupleReader) return { $tuple: itemsOf(item) }
    return undefined
  },
  untag: (item) => {
    if ("$address" in item && typeof item.$address === "string") return Address.parseRaw(item.$address)
    if ("$cell" in item && typeof item.$cell === "string") return Cell.fromBase64(item.$cell)
    if ("$tuple" in item && Array.isArray(item.$tuple)) return new TupleReader(item.$tuple)
    return undefined
  },
}

/** Serves `transport`'s calls on a local port until `close`. */
export const serveTonTransport = (transport: SandboxTonTransport) => serveTransport(transport, methods, codec)

/** A transport whose calls go to `serveTonTransport` at `url`. */
export const bridgedTonTransport = (url: string): TonTransport =>
  bridgedTransport<TonTransport>(url, methods, codec)
