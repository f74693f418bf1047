/**
 * A network partition between the platform and its database, healed after the platform gave up on
 * its connections (DATABASE_QUERY_TIMEOUT_SECONDS). The platform closes them on its side; the
 * server never hears of it (no FIN crosses the partition), so their sessions, and the session
 * locks they hold, live on. The projection's, the webhook dispatcher's and the sandbox chains'
 * leadership are such locks: the platform must take them back from its own lost sessions, not
 * stand by behind itself for ever (balance reads 503 `read_model_behind`, no webhook dispatched)
 * nor stop because "another process" took the chains.
 *
 * The partition is a TCP proxy that, while on, forwards nothing and passes no close: a connection
 * that tried to talk through it is cut for good, its server side left open.
 */
import * as http from "node:http"
import * as net from "node:net"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { expectOk } from "../support/api-expect.ts"
import { createWallet } from "../support/api-fixtures.ts"
import { freshDatabase, type TestDatabase } from "../support/db.ts"
import { type RunningPlatform, registerTenant, startPlatform } from "../support/platform-process.ts"

let partitioned = false
let proxy: net.Server | undefined
let receiver: http.Server | undefined
let database: TestDatabase | undefined
let platform: RunningPlatform | undefined
const received: Array<string> = []

/** A proxy to `target`; answers its port. */
const startProxy = async (target: net.NetConnectOpts): Promise<number> => {
  proxy = net.createServer((near) => {
    const far = net.connect(target)
    let cut = false
    const forward = (to: net.Socket) => (data: Buffer) => {
      if (partitioned) cut = true
      if (!cut) to.write(data)
    }
    near.on("data", forward(far))
    far.on("data", forward(near))
    near.on("close", () => {
      if (!cut && !partitioned) far.end()
    })
    far.on("close", () => {
      if (!cut && !partitioned) near.end()
    })
    near.on("error", () => {})
    far.on("error", () => {})
  })
  await new Promise<void>((resolve) => proxy?.listen(0, "127.0.0.1", resolve))
  return (proxy.address() as net.AddressInfo).port
}

beforeAll(async () => {
  receiver = http.createServer((request, response) => {
    let body = ""
    request.on("data", (chunk) => (body += chunk))
    request.on("end", () => {
      received.push(body)
      response.end("ok")
    })
  })
  await new Promise<void>((resolve) => receiver?.listen(0, "127.0.0.1", resolve))
  database = await freshDatabase()
  const url = new URL(database.url)
  const host = decodeURIComponent(url.hostname || (url.searchParams.get("host") ?? ""))
  const target = host.startsWith("/")
    ? { path: `${host}/.s.PGSQL.${url.port || "5432"}` }
    : { host, port: Number(url.port || "5432") }
  const port = await startProxy(target)
  const through = `postgres://${url.username}:${url.password}@127.0.0.1:${port}${url.pathname}`
  platform = await startPlatform(
    { DATABASE_QUERY_TIMEOUT_SECONDS: "3", SANDBOX_SOLANA: "true" },
    { database: { ...database, url: through } },
  )
}, 120_000)

afterAll(async () => {
  await platform?.kill()
  proxy?.close()
  receiver?.close()
  await database?.drop()
})

describe("a partition healed after the platform gave up on its connections", () => {
  it("leads again: balances are read, webhooks dispatched, the sandbox chains kept", async () => {
    if (platform === undefined || receiver === undefined) throw new Error("not started")
    const { client } = await registerTenant(platform.url)
    const payer = await createWallet(client, "ethereum", "payer")
    const payee = await createWallet(client, "ethereum", "payee")
    expectOk(
      await client.post("/api/v1/sandbox/faucet", {
        wallet_id: payer.wallet_id,
        token: "USDC",
        amount: "100",
      }),
    )
    expectOk(
      await client.post("/api/v1/identities", {
        wallet_id: payee.wallet_id,
        kind: "phone",
        value: "+14155550100",
      }),
      201,
    )
    expectOk(await client.get(`/api/v1/wallets/${payee.wallet_id}/balance`))
    const port = (receiver.address() as net.AddressInfo).port
    expectOk(
      await client.post("/api/v1/webhooks", {
        url: `http://127.0.0.1:${port}/hooks`,
        events: ["payment.completed"],
        secret: "whsec_partition_test_secret_0123456789",
      }),
      201,
    )

    partitioned = true
    await new Promise((resolve) => setTimeout(resolve, 12_000))
    partitioned = false

    const deadline = Date.now() + 60_000
    const until = async (done: () => Promise<boolean>, what: string) => {
      for (;;) {
        if (await done()) return
        if (Date.now() > deadline)
          throw new Error(`${what} did not come back: ${platform?.output().slice(-3_000)}`)
        await new Promise((resolve) => setTimeout(resolve, 500))
      }
    }
    await until(
      async () =>
        (await fetch(`${platform?.url}/health`).then(
          (r) => r.status,
          () => 0,
        )) === 200,
      "health",
    )
    await until(
      async () =>
        (
          await client.post("/api/social-payments/pay", {
            recipient: "+14155550100",
            amount: "2",
            token: "USDC",
            from_wallet: payer.wallet_id,
          })
        ).status === 200,
      "payments",
    )
    // The projection leads again: the balance is read (not 503 read_model_behind).
    await until(async () => {
      const balance = await client.get<{ tokens: Array<{ token: string; chain: string; amount: string }> }>(
        `/api/v1/wallets/${payee.wallet_id}/balance`,
      )
      return (
        balance.status === 200 && balance.body.tokens.some((t) => t.token === "USDC" && t.amount === "2.00")
      )
    }, "the ledger projection")
    // The dispatcher leads again: the payment's webhook arrives.
    await until(async () => received.some((body) => body.includes('"payment.completed"')), "webhook dispatch")
    // The platform kept its sandbox chains: it did not stop (as it did when its own lost session
    // held their lock, which it took for another process's).
    await new Promise((resolve) => setTimeout(resolve, 2_000))
    expect(
      await fetch(`${platform.url}/health`).then(
        (r) => r.status,
        () => 0,
      ),
    ).toBe(200)
    expect(platform.output()).not.toContain("another process took the sandbox chains")
    const chains = expectOk(
      await client.get<{ data: Array<{ chain: string; status?: string }> }>("/api/v2/chains"),
    )
    expect(chains.data.some((chain) => chain.chain === "solana")).toBe(true)
  }, 180_000)
})
