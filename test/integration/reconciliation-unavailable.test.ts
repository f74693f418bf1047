// Proves that one chain whose node cannot be read does not stop reconciliation: with a tenant on two
// local anvil chains, both are matched; once one anvil is stopped, a run still reconciles the other
// (drift minted behind the platform's back is found there) and reports the stopped one `unavailable`
// with the error, its last on-chain figures and when it last matched, instead of failing; a chain
// never read completely has no on-chain figures (null) to show.
import * as net from "node:net"
import type { Address } from "viem"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { makeEvmAdapter } from "../../adapters/chains/evm/adapter.ts"
import { type AnvilNode, startAnvil } from "../../src/chains/anvil.ts"
import { deployStablecoin } from "../../src/chains/stablecoin.ts"
import type { RunningChain } from "../../src/ports/chains.ts"
import { reconcileTenant, storedReports, toReportView } from "../../src/reconciliation/reconciler.ts"
import { freshDatabase, type TestDatabase } from "../support/db.ts"
import { callStablecoin, test_mnemonic, testWallet } from "../support/evm.ts"

const tenant_id = "ten_unavailable"
const issuer = testWallet(0)
const minted = 7_000_000n
const chain_ids = { ethereum: 1, avalanche: 43114, polygon: 137 } as const
type Chain = keyof typeof chain_ids

let db: TestDatabase
const nodes = new Map<Chain, AnvilNode>()
const running = new Map<Chain, RunningChain>()

const startChain = async (chain: Chain) => {
  const node = await startAnvil({ chain_id: chain_ids[chain], mnemonic: test_mnemonic })
  nodes.set(chain, node)
  const contract = await deployStablecoin({
    rpc_url: node.rpc_url,
    issuer: issuer.key,
    name: "Sandbox USDC",
    symbol: "USDC",
    decimals: 6,
  })
  running.set(chain, {
    adapter: makeEvmAdapter({ chain_id: chain_ids[chain], rpc_url: node.rpc_url, finality_confirmations: 1 }),
    contracts: new Map([["USDC", contract]]),
    gas_probe_address: issuer.address,
    fund: null,
    finality_confirmations: 1,
    faucet_senders: new Set(),
  })
}

const reconcile = (options: { chain_read_deadline_ms?: number } = {}) =>
  reconcileTenant(
    {
      pool: db.pool,
      chains: {
        get: (environment, chain) => (environment === "sandbox" ? running.get(chain as Chain) : undefined),
      },
    },
    tenant_id,
    "sandbox",
    { recheck_delay_ms: 50, ...options },
  )

const byChain = <T extends { chain: string }>(reports: ReadonlyArray<T>, chain: Chain): T => {
  const found = reports.find((report) => report.chain === chain)
  expect(found, `a report for ${chain}`).toBeDefined()
  return found as T
}

beforeAll(async () => {
  db = await freshDatabase()
  await Promise.all([startChain("ethereum"), startChain("avalanche")])
  await db.pool.query(
    `insert into platform.tenants (tenant_id, email, password_hash, company_name, plan, custody_index, created_at)
     values ($1, 'unavailable@example.com', 'x', 'Unavailable', 'basic', 0, now())`,
    [tenant_id],
  )
  await db.pool.query(
    "insert into platform.tenant_environments (tenant_id, environment) values ($1, 'sandbox')",
    [tenant_id],
  )
  for (const [index, chain] of (["ethereum", "avalanche"] as const).entries()) {
    await db.pool.query(
      `insert into platform.wallets
         (wallet_id, tenant_id, environment, chain, address, derivation_index, external_id, label, created_at)
       values ($1, $2, 'sandbox', $3, $4, $5, $3, $3, now())`,
      [`wal_unavailable_${chain}`, tenant_id, chain, testWallet(index + 1).address, index + 1],
    )
  }
}, 60_000)

afterAll(async () => {
  for (const node of nodes.values()) await node.stop()
  await db?.drop()
})

describe("reconciliation with one chain down", () => {
  it("reconciles the healthy chain and reports the dead one unavailable", async () => {
    const before = await reconcile()
    expect(byChain(before, "ethereum")).toMatchObject({ status: "matched", error: null })
    expect(byChain(before, "avalanche")).toMatchObject({ status: "matched", error: null })
    const matched_at = byChain(before, "avalanche").checked_at

    await nodes.get("avalanche")?.stop()
    nodes.delete("avalanche")
    // The ledger side moves meanwhile (a deposit seen on the now dead chain): the unavailable report
    // must not set this fresh figure beside the last read's on-chain figure and difference.
    await db.pool.query(
      `insert into platform.chain_deposits (deposit_id, tenant_id, environment, wallet_id, chain, token,
         token_decimals, token_contract, to_address, from_address, amount, tx_hash, log_index, block_number,
         block_hash, status, seen_at)
       values ('dep_unavailable', $1, 'sandbox', 'wal_unavailable_avalanche', 'avalanche', 'USDC@avalanche', 6, $2, $3, $3,
               5000000, '0xabc', 0, 1, '0xdef', 'seen', now())`,
      [tenant_id, running.get("avalanche")?.contracts.get("USDC"), testWallet(2).address],
    )
    // Money the ledger does not know appears on the healthy chain: it must still be found.
    const ethereum = running.get("ethereum")
    const wallet = testWallet(1).address as Address
    await callStablecoin(
      nodes.get("ethereum")?.rpc_url ?? "",
      ethereum?.contracts.get("USDC") as Address,
      issuer.key,
      "mint",
      [wallet, minted],
    )

    const after = await reconcile()
    expect(byChain(after, "ethereum")).toMatchObject({
      status: "drift",
      on_chain_balance: minted,
      drift: minted,
    })
    const dead = byChain(after, "avalanche")
    expect(dead.status).toBe("unavailable")
    expect(dead.error).toEqual(expect.any(String))
    expect(dead.error?.length).toBeGreaterThan(0)
    expect(dead.checked_at.getTime()).toBeGreaterThan(matched_at.getTime())

    const stored = await storedReports(db.pool, tenant_id, "sandbox")
    expect(byChain(stored, "ethereum")).toMatchObject({ status: "drift", on_chain_balance: minted })
    const stored_dead = byChain(stored, "avalanche")
    // The run answers (and logs) what it stored: the last complete read's figures, not the fresh
    // ledger side (5 USDC now seen incoming) beside an unknown chain side.
    expect(dead).toEqual(stored_dead)
    const matched_dead = byChain(before, "avalanche")
    expect(stored_dead).toMatchObject({
      status: "unavailable",
      error: dead.error,
      ledger_balance: matched_dead.ledger_balance,
      pending_incoming: matched_dead.pending_incoming,
      difference: matched_dead.difference,
      on_chain_balance: 0n,
      last_matched_at: matched_at,
      drift_since: null,
    })
    expect(stored_dead.checked_at).toEqual(dead.checked_at)
    expect(toReportView(stored_dead)).toMatchObject({
      status: "unavailable",
      error: dead.error,
      last_matched_at: matched_at.toISOString(),
    })
  }, 60_000)

  it("gives a node that accepts but never answers a deadline, once per chain and run, not the client's retries", async () => {
    // A node that takes every request and answers none (a stopped process, a black-holed host).
    let requests = 0
    const sockets = new Set<net.Socket>()
    const hanging = net.createServer((socket) => {
      sockets.add(socket)
      socket.on("data", () => {
        requests += 1
      })
    })
    await new Promise<void>((resolve) => hanging.listen(0, "127.0.0.1", resolve))
    const { port } = hanging.address() as net.AddressInfo
    running.set("polygon", {
      adapter: makeEvmAdapter({
        chain_id: chain_ids.polygon,
        rpc_url: `http://127.0.0.1:${port}`,
        finality_confirmations: 1,
      }),
      contracts: new Map([
        ["USDC", "0x3c499c542cEF5E3811e1192ce70d8cC03d5c3359"],
        ["USDT", "0xc2132D05D31c914a87C6611C10748AEb04B58e8F"],
      ]),
      gas_probe_address: issuer.address,
      fund: null,
      finality_confirmations: 1,
      faucet_senders: new Set(),
    })
    await db.pool.query(
      `insert into platform.wallets
         (wallet_id, tenant_id, environment, chain, address, derivation_index, external_id, label, created_at)
       values ('wal_unavailable_polygon', $1, 'sandbox', 'polygon', $2, 9, 'polygon', 'polygon', now())`,
      [tenant_id, testWallet(9).address],
    )
    try {
      const reports = await reconcile({ chain_read_deadline_ms: 300 })
      const polygon = reports.filter((report) => report.chain === "polygon")
      expect(polygon.map((report) => [report.token, report.status, report.error])).toEqual([
        ["USDC", "unavailable", "the node did not answer within 0.3 s"],
        ["USDT", "unavailable", "the node did not answer within 0.3 s"],
      ])
      // The second group took the first's verdict: the node got one request, not one per group.
      expect(requests).toBe(1)
      // Never read completely: no on-chain side to show (0 would read as a real shortfall).
      for (const report of polygon) {
        expect(report).toMatchObject({
          ledger_balance: 0n,
          on_chain_balance: null,
          difference: null,
          drift: null,
        })
      }
      const stored = byChain(await storedReports(db.pool, tenant_id, "sandbox"), "polygon")
      expect(toReportView(stored)).toMatchObject({
        status: "unavailable",
        ledger_balance: "0.00",
        pending_incoming: "0.00",
        on_chain_balance: null,
        difference: null,
        drift: null,
      })
      // With no complete read to keep, a later run shows the ledger's figures as they are then.
      await db.pool.query(
        `insert into platform.chain_deposits (deposit_id, tenant_id, environment, wallet_id, chain, token,
           token_decimals, token_contract, to_address, from_address, amount, tx_hash, log_index, block_number,
           block_hash, status, seen_at)
         values ('dep_polygon', $1, 'sandbox', 'wal_unavailable_polygon', 'polygon', 'USDC@polygon', 6,
                 '0x3c499c542cEF5E3811e1192ce70d8cC03d5c3359', $2, $2, 2000000, '0xabd', 0, 1, '0xdee', 'seen', now())`,
        [tenant_id, testWallet(9).address],
      )
      await reconcile({ chain_read_deadline_ms: 300 })
      const later = byChain(await storedReports(db.pool, tenant_id, "sandbox"), "polygon")
      expect(toReportView(later)).toMatchObject({ pending_incoming: "2.00", on_chain_balance: null })
    } finally {
      running.delete("polygon")
      for (const socket of sockets) socket.destroy()
      await new Promise((resolve) => hanging.close(resolve))
    }
  }, 60_000)
})
