/**
 * A chain transport carried over HTTP between two processes, for the crash tests: an in-process
 * chain (LiteSVM, @ton/sandbox) lives inside the process that owns it, so a worker process that is
 * killed must reach a chain living elsewhere (the test process) for the chain to survive the kill.
 * `serveTransport` exposes a transport's calls; `bridgedTransport` is a transport whose every call
 * is one HTTP request to it. Values cross as JSON; what JSON cannot carry (bigints, bytes, a
 * family's own classes) crosses as tagged objects by the family's codec (solana-bridge.ts,
 * ton-bridge.ts).
 */
import * as http from "node:http"
import type { AddressInfo } from "node:net"

/** Turns one value JSON cannot carry into a tagged plain object, or answers undefined. */
export type Tagger = (item: unknown) => object | undefined
/** Turns a tagged plain object back into its value, or answers undefined when it is not tagged. */
export type Untagger = (item: object) => unknown

export interface BridgeCodec {
  readonly tag: Tagger
  readonly untag: Untagger
}

/** Tags bigints and byte arrays: the values every family's transport carries. */
const tagCommon: Tagger = (item) => {
  if (typeof item === "bigint") return { $bigint: item.toString() }
  if (item instanceof Uint8Array) return { $bytes: Buffer.from(item).toString("hex") }
  return undefined
}

const untagCommon: Untagger = (item) => {
  if ("$bigint" in item && typeof item.$bigint === "string") return BigInt(item.$bigint)
  if ("$bytes" in item && typeof item.$bytes === "string")
    return Uint8Array.from(Buffer.from(item.$bytes, "hex"))
  return undefined
}

const encode = (codec: BridgeCodec, value: unknown): string =>
  JSON.stringify(value, function (this: Record<string, unknown>, key, item: unknown) {
    // The holder's own value: JSON.stringify has already applied `toJSON` (a Buffer's) to `item`.
    const raw = this[key]
    return tagCommon(raw) ?? codec.tag(raw) ?? item
  })

const decode = (codec: BridgeCodec, text: string): unknown =>
  JSON.parse(text, (_key, item: unknown) => {
    if (typeof item !== "object" || item === null) return item
    return untagCommon(item) ?? codec.untag(item) ?? item
  })

/** Serves `transport`'s `methods` on a local port until `close`. */
export async function serveTransport<T extends object>(
  transport: T,
  methods: ReadonlyArray<keyof T & string>,
  codec: BridgeCodec,
): Promise<{ readonly url: string; readonly close: () => Promise<void> }> {
  const isMethod = (name: unknown): name is keyof T & string =>
    (methods as ReadonlyArray<unknown>).includes(name)
  const server = http.createServer((request, response) => {
    const chunks: Array<Buffer> = []
    request.on("data", (chunk: Buffer) => chunks.push(chunk))
    request.on("end", () => {
      const { method, args } = decode(codec, Buffer.concat(chunks).toString("utf8")) as {
        readonly method: unknown
        readonly args: ReadonlyArray<unknown>
      }
      if (!isMethod(method)) {
        response.writeHead(400).end(`not a transport method: ${String(method)}`)
        return
      }
      const call = transport[method] as (...given: ReadonlyArray<unknown>) => Promise<unknown>
      call(...args).then(
        (result) =>
          response.writeHead(200, { "content-type": "application/json" }).end(encode(codec, { result })),
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

/** A transport whose `methods` go to `serveTransport` at `url`; an HTTP failure rejects the call. */
export function bridgedTransport<T extends object>(
  url: string,
  methods: ReadonlyArray<keyof T & string>,
  codec: BridgeCodec,
): T {
  const call =
    (method: string) =>
    async (...args: ReadonlyArray<unknown>): Promise<unknown> => {
      const response = await fetch(url, { method: "POST", body: encode(codec, { method, args }) })
      const text = await response.text()
      if (!response.ok) throw new Error(`bridged ${method}: ${response.status} ${text}`)
      return (decode(codec, text) as { readonly result: unknown }).result
    }
  return Object.fromEntries(methods.map((method) => [method, call(method)])) as T
}
