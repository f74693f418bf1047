// Proves how a webhook POST uses kept-alive connections: an idle one is closed after
// `idle_connection_ms`, before a receiver's usual 5 s; one that the receiver closed while idle and
// that fails the moment it is reused is not a failed attempt (the request goes once more on a new
// connection); a connection that fails when new is the attempt's failure, sent once.
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http"
import type { AddressInfo, Socket } from "node:net"
import { afterEach, describe, expect, it } from "vitest"
import { idle_connection_ms, postWebhook } from "../../src/webhooks/delivery.ts"

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

  it("sends once more on a new connection when a reused one was closed under it, before any answer", async () => {
    // The second request on a connection finds it closed, as when the receiver's idle timer fired.
    const receiver = await startReceiver((request, response, nth) => {
      if (nth === 2) request.socket.destroy()
      else response.writeHead(200).end("ok")
    })
    expect((await post(receiver.url)).response_status).toBe(200)
    const outcome = await post(receiver.url)
    expect(outcome).toMatchObject({ response_status: 200, error: null })
    expect(receiver.connections()).toBe(2)
  })

  it("counts a new connection that fails as the attempt's failure, sent once", async () => {
    const receiver = await startReceiver((request) => request.socket.destroy())
    const outcome = await post(receiver.url)
    expect(outcome.response_status).toBeNull()
    expect(outcome.error).toMatch(/socket hang up|ECONNRESET/)
    expect(receiver.ports).toHaveLength(1)
    expect(receiver.connections()).toBe(1)
  })
})
