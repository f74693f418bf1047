/**
 * The Solana transport over the transport bridge (transport-bridge.ts), for the crash test: LiteSVM
 * runs inside the test process and the killed worker process reaches it over HTTP. Solana's
 * transport carries only JSON, bigints and byte arrays, which the bridge tags itself.
 */
import type { SolanaTransport } from "../../adapters/chains/solana/transport.ts"
import { type BridgeCodec, bridgedTransport, serveTransport } from "./transport-bridge.ts"

const methods = [
  "latestBlockhash",
  "isBlockhashValid",
  "slot",
  "lamports",
  "account",
  "rentExemptMinimum",
  "feeForMessage",
  "simulate",
  "send",
  "landed",
  "transactionsOf",
] as const satisfies ReadonlyArray<keyof SolanaTransport>

const codec: BridgeCodec = { tag: () => undefined, untag: () => undefined }

/** Serves `transport`'s calls on a local port until `close`. */
export const serveSolanaTransport = (transport: SolanaTransport) => serveTransport(transport, methods, codec)

/** A transport whose calls go to `serveSolanaTransport` at `url`. */
export const bridgedSolanaTransport = (url: string): SolanaTransport =>
  bridgedTransport<SolanaTransport>(url, methods, codec)
