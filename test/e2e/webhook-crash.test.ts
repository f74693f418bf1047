// Proves that a webhook attempt caught in flight by a crash of the platform (SIGKILL while the
// receiver had not answered yet) is sent again by the platform started after it, within about
// half a minute (its job's heartbeat stops; pg-boss looks for such jobs every few seconds), signed,
// with the same event and attempt, and recorded once.
import { createServer, type IncomingHttpHeaders, type ServerResponse } from "node:http"
import type { AddressInfo } from "node:net"
import { afterAll, describe, expect, it } from "vitest"
import { verifySignature } from "../../domain/webhooks/signature.ts"
import { expectOk } from "../support/api-expect.ts"
import {
  type ApiClient,
  apiClient,
  type RunningPlatform,
  registerTenant,
  startPlatform,
} from "../support/platform-process.ts"

const secret = "whsec_crash_test_secret_0123456789"
// Both processes open the endpoint's sealed secret with the same key.
const env = { CUSTODY_KEK: "7".repeat(64) }

interface Arrival {
  readonly at_ms: number
  readonly headers: IncomingHttpHeaders
  readonly body: { readonly id: string; readonly event_type: string }
  readonly verified: boolean
}

/** Holds the first request it gets unanswered (the platform dies meanwhile); answers 200 after. */
const startReceiver = async () => {
  const arrivals: Array<Arrival> = []
  const held: Array<ServerResponse> = []
  const server = createServer((request, response) => {
    const chunks: Array<Buffer> = []
    request.on("data", (chunk: Buffer) => chunks.push(chunk))
    request.on("end", () => {
      const raw = Buffer.concat(chunks)
      const header = request.headers["x-service-signature"]
      arrivals.push({
        at_ms: Date.now(),
        headers: request.headers,
        body: JSON.parse(raw.toString("utf8")),
        verified: verifySignature({
          header: typeof header === "string" ? header : "",
          body: raw,
          secret,
          now_s: Math.floor(Date.now() / 1000),
        }).ok,
      })
      if (arrivals.length === 1) held.push(response)
      else response.writeHead(200).end("ok")
    })
  })
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve))
  const waitForArrivals = async (count: number, timeout_ms: number) => {
    const deadline = Date.now() + timeout_ms
    while (arrivals.length < count && Date.now() < deadline) await new Promise((r) => setTimeout(r, 100))
    return arrivals
  }
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/hook`,
    arrivals,
    waitForArrivals,
    close: () => {
      for (const response of held) response.destroy()
      server.closeAllConnections()
      return new Promise<void>((resolve) => server.close(() => resolve()))
    },
  }
}

describe("a webhook attempt in flight when the platform is killed", () => {
  const started: Array<RunningPlatform> = []
  let receiver: Awaited<ReturnType<typeof startReceiver>> | undefined
  afterAll(async () => {
    // The restarted platform first: the first one owns the database and drops it.
    for (const platform of started.reverse()) await platform.stop()
    await receiver?.close()
  })

  it("is sent again by the next platform within about half a minute, and recorded once", async () => {
    receiver = await startReceiver()
    const first = await startPlatform(env)
    started.push(first)
    const { client, credentials } = await registerTenant(first.url)
    const hook = expectOk(
      await client.post<{ webhook_id: string }>("/api/v1/webhooks", {
        url: receiver.url,
        events: ["wallet.created"],
        secret,
      }),
      201,
    )
    expectOk(
      await client.post("/api/v1/wallets", { external_id: "crash-1", label: "", chain: "ethereum" }),
      201,
    )
    const [inFlight] = await receiver.waitForArrivals(1, 30_000)
    expect(inFlight?.body.event_type).toBe("wallet.created")
    await first.kill()
    const killed_at_ms = Date.now()

    const second = await startPlatform(env, { database: first.database })
    started.push(second)
    const arrivals = await receiver.waitForArrivals(2, 120_000)
    const again = arrivals[1]
    expect(again, "the attempt was not sent again within 120 s of the crash").toBeDefined()
    if (again === undefined || inFlight === undefined) return
    const resent_after_s = (again.at_ms - killed_at_ms) / 1000
    // Heartbeat 10 s, a look every 5-10 s, the retry 5 s later: about 15-30 s (it was 2-5 min
    // while only the job's 70 s lifetime and pg-boss's minute-long checks caught it).
    expect(resent_after_s).toBeLessThan(75)
    expect(again.body.id).toBe(inFlight.body.id)
    expect(again.headers["x-service-event-id"]).toBe(inFlight.headers["x-service-event-id"])
    expect(again.headers["x-service-delivery-attempt"]).toBe("1")
    expect(again.verified).toBe(true)

    // Recorded once: one delivery, delivered, its one attempt the 200.
    const deliveries = await settledDeliveries(apiClient(second.url, credentials), hook.webhook_id)
    expect(deliveries).toHaveLength(1)
    expect(deliveries[0]).toMatchObject({ status: "succeeded", attempt_count: 1 })
    await new Promise((resolve) => setTimeout(resolve, 2_000))
    expect(receiver.arrivals).toHaveLength(2)
  }, 180_000)
})

/** The webhook's deliveries once none is pending any more. */
const settledDeliveries = async (client: ApiClient, webhook_id: string) => {
  for (let tries = 0; tries < 50; tries++) {
    const page = expectOk(
      await client.get<{ data: Array<{ status: string; attempt_count: number }> }>(
        `/api/v1/webhooks/${webhook_id}/deliveries`,
      ),
    )
    if (page.data.every((delivery) => delivery.status !== "pending")) return page.data
    await new Promise((resolve) => setTimeout(resolve, 200))
  }
  return []
}
