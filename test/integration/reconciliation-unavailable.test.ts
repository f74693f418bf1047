// Proves that one chain whose node cannot be read does not stop reconciliation: with a tenant on two
// local anvil chains, both are matched; once one anvil is stopped, a run still reconciles the other
// (drift minted behind the platform's back is found there) and reports the stopped one `unavailable`
// with the error, its last on-chain figures and when it last matched, instead of failing.
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
const chain_ids = { ethereum: 1, avalanche: 43114 } as const
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

const reconcile = () =>
  reconcileTenant(
    {
      pool: db.pool,
      chains: {
        get: (environment, chain) => (environment === "sandbox" ? running.get(chain as Chain) : undefined),
      },
    },
    tenant_id,
    "sandbox",
    { recheck_delay_ms: 50 },
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
    expect(stored_dead).toMatchObject({
      status: "unavailable",
      error: dead.error,
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
})
