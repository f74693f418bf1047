/**
 * Clients that hold connections without finishing their request: a body said to be too large is
 * refused before any of it arrives, and the connection closed; a request trickled in (slow-loris)
 * is cut at its deadline (15 s for the headers, 30 s for the whole request), not after Node's 60
 * and 300 s.
 */
import * as net from "node:net"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { type RunningPlatform, startPlatform } from "../support/platform-process.ts"

let platform: RunningPlatform

beforeAll(async () => {
  platform = await startPlatform()
}, 120_000)
afterAll(async () => {
  await platform?.stop()
})

/**
 * Opens a connection, writes `first`, then `trickle` every 2 s until the server closes it; answers
 * what the server sent and when it closed, in ms after the start.
 */
const hold = (first: string, trickle?: string) =>
  new Promise<{ answer: string; closed_after_ms: number }>((resolve, reject) => {
    const started = Date.now()
    const socket = net.connect(Number(new URL(platform.url).port), "127.0.0.1")
    let answer = ""
    let timer: NodeJS.Timeout | undefined
    socket.on("connect", () => {
      socket.write(first)
      if (trickle !== undefined) timer = setInterval(() => socket.writable && socket.write(trickle), 2_000)
    })
    socket.on("data", (chunk) => (answer += chunk))
    socket.on("error", () => {})
    socket.on("close", () => {
      clearInterval(timer)
      resolve({ answer, closed_after_ms: Date.now() - started })
    })
    setTimeout(() => {
      socket.destroy()
      reject(new Error(`still open after 60 s; got ${JSON.stringify(answer)}`))
    }, 60_000)
  })

const status = (answer: string) => Number(/^HTTP\/1\.1 (\d{3})/.exec(answer)?.[1])

describe("a client that holds its request", () => {
  it("is answered at once and cut loose when its Content-Length is over 1 MiB, before any body", async () => {
    const held = await hold(
      "POST /api/tenant/register HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 10000000000\r\n\r\n",
    )
    expect(status(held.answer)).toBe(413)
    expect(held.answer).toContain('"code":"body_too_large"')
    expect(held.answer.toLowerCase()).toContain("x-request-id: ")
    expect(held.closed_after_ms).toBeLessThan(5_000)
  })

  it("is cut at the deadlines when it trickles its headers or its body", async () => {
    const [headers, body] = await Promise.all([
      hold("GET /api/v1/wallets HTTP/1.1\r\nHost: x\r\n", "X-Slow: 1\r\n"),
      hold(
        'POST /api/tenant/register HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{"',
        " ",
      ),
    ])
    expect(status(headers.answer)).toBe(408)
    expect(headers.answer).toContain('"code":"request_timeout"')
    expect(headers.closed_after_ms).toBeGreaterThanOrEqual(14_000)
    expect(headers.closed_after_ms).toBeLessThan(25_000)
    // Its headers arrived; the body never finished: cut at the request's deadline.
    expect(body.closed_after_ms).toBeGreaterThanOrEqual(29_000)
    expect(body.closed_after_ms).toBeLessThan(40_000)
  }, 60_000)
})
