/**
 * A tenant's webhook endpoint for end-to-end tests: a node:http server on 127.0.0.1 that verifies
 * each request's `x-service-signature` over the raw body with the platform's own `verifySignature`,
 * answers 200 when it holds and 401 when it does not, and keeps every request for the test to read.
 * `tamper` lets a test alter the bytes the receiver verifies (as a proxy that changed the body
 * would), to prove that a bad signature is refused and the delivery retried.
 */
import { createServer, type IncomingHttpHeaders } from "node:http"
import type { AddressInfo } from "node:net"
import { verifySignature } from "../../domain/webhooks/signature.ts"

export interface ReceivedWebhook {
  readonly headers: IncomingHttpHeaders
  readonly raw: Buffer
  readonly body: {
    readonly id: string
    readonly event_type: string
    readonly created_at: string
    readonly data: Record<string, unknown>
  }
  /** The status the receiver answered: 200 when the signature verified, 401 otherwise. */
  readonly status: 200 | 401
}

export interface WebhookReceiver {
  readonly url: string
  readonly received: ReadonlyArray<ReceivedWebhook>
  /** The first request `matches` accepts (now or within `timeout_ms`). */
  readonly waitFor: (
    matches: (request: ReceivedWebhook) => boolean,
    timeout_ms?: number,
  ) => Promise<ReceivedWebhook>
  readonly close: () => Promise<void>
}

/**
 * Starts a receiver for endpoints signed with `secret`. `tamper(request)` true: the receiver
 * verifies a copy of the body with its last byte changed (so the signature cannot match).
 */
export const startWebhookReceiver = async (
  secret: string,
  tamper: (body: ReceivedWebhook["body"], headers: IncomingHttpHeaders) => boolean = () => false,
): Promise<WebhookReceiver> => {
  const received: Array<ReceivedWebhook> = []
  const waiters = new Set<() => void>()
  const server = createServer((request, response) => {
    const chunks: Array<Buffer> = []
    request.on("data", (chunk: Buffer) => chunks.push(chunk))
    request.on("end", () => {
      const raw = Buffer.concat(chunks)
      const body = JSON.parse(raw.toString("utf8")) as ReceivedWebhook["body"]
      // A copy with its last byte changed (a JSON body ends in "}") cannot match the signature.
      const verified = tamper(body, request.headers)
        ? Buffer.concat([raw.subarray(0, -1), Buffer.from("]")])
        : raw
      const verification = verifySignature({
        header: request.headers["x-service-signature"],
        body: verified,
        secret,
        now_s: Math.floor(Date.now() / 1000),
      })
      const status = verification.ok ? 200 : 401
      received.push({ headers: request.headers, raw, body, status })
      for (const wake of waiters) wake()
      response.writeHead(status, { "content-type": "text/plain" })
      response.end(verification.ok ? "ok" : `rejected: ${verification.reason}`)
    })
  })
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve))
  const { port } = server.address() as AddressInfo
  const waitFor = (matches: (request: ReceivedWebhook) => boolean, timeout_ms = 30_000) =>
    new Promise<ReceivedWebhook>((resolve, reject) => {
      const check = () => {
        const found = received.find(matches)
        if (found === undefined) return false
        clearTimeout(timer)
        waiters.delete(wake)
        resolve(found)
        return true
      }
      const wake = () => void check()
      const timer = setTimeout(() => {
        waiters.delete(wake)
        reject(new Error(`no matching webhook within ${timeout_ms} ms; got ${received.length} requests`))
      }, timeout_ms)
      if (!check()) waiters.add(wake)
    })
  return {
    url: `http://127.0.0.1:${port}/hooks`,
    received,
    waitFor,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections()
        server.close(() => resolve())
      }),
  }
}
