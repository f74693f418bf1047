/**
 * A Solana transport carried over HTTP between two processes, for the crash test: LiteSVM runs inside
 * the process that owns it, so a worker process that is killed must reach a chain living elsewhere
 * (the test process) for the chain to survive the kill. `serveSolanaTransport` exposes a transport's
 * calls; `bridgedSolanaTransport` is a transport whose every call is one HTTP request to it. Bigints
 * and byte arrays cross as tagged JSON values.
 */
import * as http from "node:http"
import type { AddressInfo } from "node:net"
import type { SolanaTransport } from "../../adapters/chains/solana/transport.ts"

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
type Method = (typeof methods)[number]

const encode = (value: unknown): string =>
  JSON.stringify(value, (_key, item: unknown) => {
    if (typeof item === "bigint") return { $bigint: item.toString() }
    if (item instanceof Uint8Array) return { $bytes: Buffer.from(item).toString("hex") }
    return item
  })

const decode = (text: string): unknown =>
  JSON.parse(text, (_key, item: unknown) => {
    if (typeof item !== "object" || item === null) return item
    if ("$bigint" in item && typeof item.$bigint === "string") return BigInt(item.$bigint)
    if ("$bytes" in item && typeof item.$bytes === "string")
      return Uint8Array.from(Buffer.from(item.$bytes, "hex"))
    return item
  })

const isMethod = (name: unknown): name is Method => (methods as ReadonlyArray<unknown>).includes(name)

/** Serves `transport`'s calls on a local port until `close`. */
export async function serveSolanaTransport(
  transport: SolanaTransport,
): Promise<{ readonly url: string; readonly close: () => Promise<void> }> {
  const server = http.createServer((request, response) => {
    const chunks: Array<Buffer> = []
    request.on("data", (chunk: Buffer) => chunks.push(chunk))
    request.on("end", () => {
      const { method, args } = decode(Buffer.concat(chunks).toString("utf8")) as {
        readonly method: unknown
        readonly args: ReadonlyArray<unknown>
      }
      if (!isMethod(method)) {
        response.writeHead(400).end(`not a transport method: ${String(method)}`)
        return
      }
      const call = transport[method] as (...given: ReadonlyArray<unknown>) => Promise<unknown>
      call(...args).then(
        (result) => response.writeHead(200, { "content-type": "application/json" }).end(encode({ result })),
        (error: unknown) => response.writeHead(500).end(String(error)),
      )
    })
  })
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve))
  const { port } = server.address() as AddressInfo
  return {
    url: `http://127.0.0.1:${port}/`,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections()
        server.close(() => resolve())
      }),
  }
}

/** A transport whose calls go to `serveSolanaTransport` at `url`; an HTTP failure rejects the call. */
export function bridgedSolanaTransport(url: string): SolanaTransport {
  const call =
    (method: Method) =>
    async (...args: ReadonlyArray<unknown>): Promise<unknown> => {
      const response = await fetch(url, { method: "POST", body: encode({ method, args }) })
      const text = await response.text()
      if (!response.ok) throw new Error(`bridged ${method}: ${response.status} ${text}`)
      return (decode(text) as { readonly result: unknown }).result
    }
  return Object.fromEntries(methods.map((method) => [method, call(method)])) as unknown as SolanaTransport
}
