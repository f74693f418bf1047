// Proves how a webhook POST uses kept-alive connections: an idle one is closed after
// `idle_connection_ms`, before a receiver's usual 5 s; a request on one that closes before any
// answer is sent once, never again within the attempt, and says so (`closed_under_reuse`: the next
// attempt follows at once), and the pool's other idle connections to that receiver are closed with
// it; a connection that fails when new is the attempt's failure, sent once; a failure at every address of
// a host that has several is logged with each address's error.
import {
  createServer,
  request as httpRequest,
  type IncomingMessage,
  type Server,
  type ServerResponse,
} from "node:http"
import type { AddressInfo, Socket } from "node:net"
import { afterEach, describe, expect, it } from "vitest"
import { describeError, idle_connection_ms, postWebhook } from "../../src/webhooks/delivery.ts"

interface Receiver {
  readonly url: string
  /** Per request that reached the handler: the client's port (one per connection). */
  readonly ports: Array<number>
  readonly connections: () => number
}

const servers: Array<Server> = []
afterEach(async () => {
  for (const server of servers.splice(0)) {
    server.closeAllConnections()
    await new Promise<void>((resolve) => server.close(() => resolve()))
  }
})

/** `handle` answers each request; `keepAliveTimeout` 0 keeps idle connections open for ever. */
const startReceiver = async (
  handle: (request: IncomingMessage, response: ServerResponse, nth_on_connection: number) => void,
): Promise<Receiver> => {
  const ports: Array<number> = []
  const seen = new WeakMap<Socket, number>()
  let connections = 0
  const server = createServer((request, response) => {
    const nth = (seen.get(request.socket) ?? 0) + 1
    seen.set(request.socket, nth)
    request.resume()
    request.on("end", () => {
      ports.push(request.socket.remotePort ?? 0)
      handle(request, response, nth)
    })
  })
  server.on("connection", () => connections++)
  server.keepAliveTimeout = 0
  servers.push(server)
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve))
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/hook`,
    ports,
    connections: () => connections,
  }
}

const post = (url: string) =>
  postWebhook({
    url,
    body: '{"id":"evt_1"}',
    headers: { "content-type": "application/json" },
    timeout_ms: 5_000,
    signal: new AbortController().signal,
    environment: "sandbox",
  })

describe("postWebhook's connections", () => {
  it("reuses a kept-alive connection while it is fresh, and not once it has been idle for idle_connection_ms", async () => {
    const receiver = await startReceiver((_, response) => response.writeHead(200).end("ok"))
    expect((await post(receiver.url)).response_status).toBe(200)
    expect((await post(receiver.url)).response_status).toBe(200)
    expect(receiver.ports[1]).toBe(receiver.ports[0])
    await new Promise((resolve) => setTimeout(resolve, idle_connection_ms + 500))
    expect((await post(receiver.url)).response_status).toBe(200)
    expect(receiver.ports[2]).not.toBe(receiver.ports[1])
    expect(receiver.connections()).toBe(2)
  })

  it("sends a request once when a reused connection closes before any answer, says so, and closes the receiver's other idle connections", async () => {
    // The second request on a connection finds it closed after the receiver read it: whether the
    // receiver acted on it only the receiver knows, so it is not sent again within the attempt.
    const receiver = await startReceiver((request, response, nth) => {
      if (nth === 2) request.socket.destroy()
      else response.writeHead(200).end("ok")
    })
    // Two at once: two connections, both idle afterwards.
    const first = await Promise.all([post(receiver.url), post(receiver.url)])
    expect(first.map((outcome) => outcome.response_status)).toEqual([200, 200])
    expect(receiver.connections()).toBe(2)
    const outcome = await post(receiver.url)
    expect(outcome).toMatchObject({ response_status: null, closed_under_reuse: true })
    expect(outcome.error).toMatch(/closed before any answer.*next attempt follows at once/)
    expect(receiver.ports).toHaveLength(3)
    // The other idle connection was closed too: the next request opens a new one.
    expect(await post(receiver.url)).toMatchObject({ response_status: 200, closed_under_reuse: false })
    expect(receiver.ports).toHaveLength(4)
    expect(receiver.connections()).toBe(3)
  })

  it("counts a new connection that fails as the attempt's failure, sent once", async () => {
    const receiver = await startReceiver((request) => request.socket.destroy())
    const outcome = await post(receiver.url)
    expect(outcome).toMatchObject({ response_status: null, closed_under_reuse: false })
    expect(outcome.error).toMatch(/socket hang up|ECONNRESET/)
    expect(receiver.ports).toHaveLength(1)
    expect(receiver.connections()).toBe(1)
  })

  it("says each address's error when a host with several addresses refuses at all of them", async () => {
    // Node tries the addresses in turn and fails with an AggregateError whose own message is empty.
    const addresses = [
      { address: "127.0.0.1", family: 4 },
      { address: "::1", family: 6 },
    ]
    const error = await new Promise<unknown>((resolve) => {
      const outgoing = httpRequest("http://both-families.test:1/", {
        method: "POST",
        lookup: (_host, options, callback) =>
          options.all
            ? (callback as (e: null, a: typeof addresses) => void)(null, addresses)
            : callback(null, "127.0.0.1", 4),
      })
      outgoing.on("error", resolve)
      outgoing.end("{}")
    })
    expect(error).toBeInstanceOf(AggregateError)
    expect((error as Error).message).toBe("")
    expect(describeError(error)).toMatch(/ECONNREFUSED 127\.0\.0\.1:1.*; .*ECONNREFUSED ::1:1/)
  })
})
