// Proves, through the API of the real platform with two local anvil chains, what happens when one
// chain's node dies: the sandbox faucet on that chain answers 503 `chain_unavailable` and writes
// nothing (no credit, no stored response, so a retry with the same key is not a replay), while a
// reconciliation run answers 200 with the healthy chain reconciled afresh and the dead one
// `unavailable`. The faucet's retries on the healthy chain mint once: reconciliation stays matched.
// A node that is alive but stops answering (SIGSTOP) holds the faucet no longer than its deadline.
// An on-chain transfer's verification answers 503 `chain_unavailable` while its node is down or
// hung (within 10 s), and a new transfer is accepted (the on-chain balance check lets it through).
import { execFileSync } from "node:child_process"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import type { Balance, ChainTransfer, ReconciliationReport, Wallet } from "../../src/http/api.ts"
import { expectOk } from "../support/api-expect.ts"
import {
  type ApiClient,
  type RunningPlatform,
  registerTenant,
  startPlatform,
} from "../support/platform-process.ts"

type Report = typeof ReconciliationReport.Type

let platform: RunningPlatform
let client: ApiClient
let ethereum: typeof Wallet.Type
let avalanche: typeof Wallet.Type
let polygon: typeof Wallet.Type
let arbitrum: typeof Wallet.Type

/** The rpc_url the platform logged for `chain`'s anvil. */
const sandboxRpcUrl = (output: string, chain: string): string => {
  const line = output
    .split("\n")
    .find((entry) => entry.includes('"sandbox chain running"') && entry.includes(`"chain":"${chain}"`))
  const match = line === undefined ? null : /"rpc_url":"([^"]+)"/.exec(line)
  if (match?.[1] === undefined) throw new Error(`no ${chain} sandbox chain in the platform's log:\n${output}`)
  return match[1]
}

/** The anvil process the platform started for `chain` (found by the port it listens on). */
const chainProcess = (chain: string): number => {
  const port = new URL(sandboxRpcUrl(platform.output(), chain)).port
  const listening = execFileSync("ss", ["-ltnpH", `sport = :${port}`], { encoding: "utf8" })
  const pid = /pid=(\d+)/.exec(listening)?.[1]
  expect(pid, `the process listening on ${port}`).toBeDefined()
  return Number(pid)
}

/** Kills `chain`'s anvil and waits until its port is closed (a signal is delivered asynchronously). */
const killChain = async (chain: string) => {
  const port = new URL(sandboxRpcUrl(platform.output(), chain)).port
  process.kill(chainProcess(chain), "SIGKILL")
  const listening = () =>
    execFileSync("ss", ["-ltnH", `sport = :${port}`], { encoding: "utf8" }).trim() !== ""
  const deadline = Date.now() + 10_000
  while (listening() && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 50))
  expect(listening(), `${chain}'s anvil still listens on ${port}`).toBe(false)
}

const usdc = async (wallet_id: string) => {
  const balance = expectOk(await client.get<typeof Balance.Type>(`/api/v1/wallets/${wallet_id}/balance`))
  return balance.tokens.find((token) => token.token === "USDC")?.amount
}

const faucet = (wallet_id: string, key: string) =>
  client.post("/api/v1/sandbox/faucet", { wallet_id, token: "USDC", amount: "1" }, { "Idempotency-Key": key })

const report = (reports: ReadonlyArray<Report>, chain: string) => {
  const found = reports.find((entry) => entry.chain === chain && entry.token === "USDC")
  expect(found, `a USDC report on ${chain}`).toBeDefined()
  return found as Report
}

beforeAll(async () => {
  platform = await startPlatform({
    SANDBOX_EVM_CHAINS: "ethereum,avalanche,polygon,arbitrum",
    RECONCILIATION_INTERVAL_SECONDS: "3600",
    LOG_LEVEL: "info",
  })
  ;({ client } = await registerTenant(platform.url))
  const wallet = async (chain: string) =>
    expectOk(
      await client.post<typeof Wallet.Type>("/api/v1/wallets", { external_id: chain, label: chain, chain }),
      201,
    )
  ethereum = await wallet("ethereum")
  avalanche = await wallet("avalanche")
  polygon = await wallet("polygon")
  arbitrum = await wallet("arbitrum")
}, 120_000)

afterAll(async () => {
  await platform?.stop()
})

describe("one chain's node down", () => {
  it("faucet: 503 and nothing written on the dead chain; mints once on the healthy one", async () => {
    const first = await faucet(ethereum.wallet_id, "eth-1")
    expectOk(first)
    expect(first.headers.get("idempotent-replayed")).toBeNull()
    const retried = await faucet(ethereum.wallet_id, "eth-1")
    expectOk(retried)
    // The retry credits nothing and says it is a replay (its balance is today's).
    expect(retried.headers.get("idempotent-replayed")).toBe("true")
    expect(retried.body).toEqual(first.body)
    expect(await usdc(ethereum.wallet_id)).toBe("1.00")
    // Concurrent duplicates: one credit, one first answer, the others replays of it.
    const together = await Promise.all(Array.from({ length: 5 }, () => faucet(ethereum.wallet_id, "eth-2")))
    expect(together.map((answer) => answer.status)).toEqual([200, 200, 200, 200, 200])
    expect(together.filter((answer) => answer.headers.get("idempotent-replayed") === "true")).toHaveLength(4)
    expect(await usdc(ethereum.wallet_id)).toBe("2.00")
    const before = await usdc(avalanche.wallet_id)

    await killChain("avalanche")
    for (const attempt of [1, 2]) {
      const refused = await faucet(avalanche.wallet_id, "ava-1")
      expect(refused.status, `attempt ${attempt}`).toBe(503)
      expect(refused.headers.get("idempotent-replayed")).toBeNull()
      expect(refused.body).toMatchObject({ error: { code: "chain_unavailable" } })
      expect(await usdc(avalanche.wallet_id)).toBe(before)
    }
    const stored = await platform.database.pool.query(
      "select 1 from platform.idempotency_keys where idempotency_key = 'ava-1'",
    )
    expect(stored.rowCount).toBe(0)
  }, 120_000)

  it("faucet: a node that stops answering is given 20 s, then 503 and nothing written", async () => {
    const before = await usdc(polygon.wallet_id)
    const pid = chainProcess("polygon")
    process.kill(pid, "SIGSTOP")
    try {
      const started = Date.now()
      const refused = await faucet(polygon.wallet_id, "pol-1")
      const waited_ms = Date.now() - started
      expect(refused.status).toBe(503)
      expect(refused.body).toMatchObject({
        error: { code: "chain_unavailable", message: expect.stringContaining("did not answer within 20 s") },
      })
      // The deadline, not the client's retries (which held such a request for over 80 s).
      expect(waited_ms).toBeGreaterThanOrEqual(19_000)
      expect(waited_ms).toBeLessThan(40_000)
      expect(await usdc(polygon.wallet_id)).toBe(before)
      const stored = await platform.database.pool.query(
        "select 1 from platform.idempotency_keys where idempotency_key = 'pol-1'",
      )
      expect(stored.rowCount).toBe(0)
    } finally {
      process.kill(pid, "SIGKILL")
    }
  }, 120_000)

  it("transfers: verify answers 503 chain_unavailable while the node hangs or is dead; a new transfer is accepted", async () => {
    expectOk(await faucet(arbitrum.wallet_id, "arb-1"))
    const transfer = (to_address: string) =>
      client.post<typeof ChainTransfer.Type>("/api/v2/transfers", {
        from_wallet: arbitrum.wallet_id,
        to_address,
        amount: "0.10",
        token: "USDC",
        chain: "arbitrum",
      })
    const sent = expectOk(await transfer("0x1111111111111111111111111111111111111111"), 202)
    const deadline = Date.now() + 60_000
    let status = sent.status
    while (status === "pending" && Date.now() < deadline) {
      await new Promise((resolve) => setTimeout(resolve, 200))
      status = expectOk(
        await client.get<typeof ChainTransfer.Type>(`/api/v2/transfers/${sent.transaction_id}`),
      ).status
    }
    expect(status).toBe("completed")
    const verify = () => client.get(`/api/v1/transactions/${sent.transaction_id}/verify`)
    expect(expectOk(await verify())).toMatchObject({ matches: true })
    const pid = chainProcess("arbitrum")
    process.kill(pid, "SIGSTOP")
    try {
      const started = Date.now()
      const hung = await verify()
      const waited_ms = Date.now() - started
      expect(hung.status).toBe(503)
      expect(hung.body).toMatchObject({ error: { code: "chain_unavailable" } })
      expect(hung.headers.get("retry-after")).toBe("5")
      expect(waited_ms).toBeGreaterThanOrEqual(9_000)
      expect(waited_ms).toBeLessThan(20_000)
    } finally {
      process.kill(pid, "SIGCONT")
    }
    await killChain("arbitrum")
    const dead = await verify()
    expect(dead.status).toBe(503)
    // The chain's node, not the database (whose refused connection it resembles).
    expect(dead.body).toMatchObject({ error: { code: "chain_unavailable" } })
    // The balance read fails at once; it lets the transfer through, as a slow one does.
    expectOk(await transfer("0x2222222222222222222222222222222222222222"), 202)
  }, 120_000)

  it("reconciliation: 200, the healthy chain reconciled, the dead one unavailable", async () => {
    const run = await client.post<{ data: ReadonlyArray<Report> }>("/api/v2/reconciliation/runs", {})
    expect(run.status).toBe(200)
    expect(report(run.body.data, "ethereum")).toMatchObject({
      status: "matched",
      on_chain_balance: "2.00",
      error: null,
    })
    const dead = report(run.body.data, "avalanche")
    expect(dead).toMatchObject({ status: "unavailable", last_matched_at: null })
    // A run asked for through the API logs what it found, as the hourly job would.
    expect(
      platform
        .output()
        .split("\n")
        .some(
          (line) =>
            line.includes("reconciliation: chain unavailable") && line.includes('"chain":"avalanche"'),
        ),
    ).toBe(true)
    expect(dead.error).toEqual(expect.any(String))
    const latest = expectOk(await client.get<{ data: ReadonlyArray<Report> }>("/api/v2/reconciliation")).data
    expect(report(latest, "avalanche")).toMatchObject({ status: "unavailable", checked_at: dead.checked_at })
  }, 120_000)
})
