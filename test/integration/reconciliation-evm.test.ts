// Proves the reconciliation job's reading of money in flight on anvil, with the real transfer flow,
// ledger projection and PostgreSQL: a transfer broadcast but not yet mined leaves both sides equal
// (matched, the reservation shown as pending_outgoing); once it is mined and before the worker settles
// it, the chain holds less than the ledger by exactly the reserved amount (in_flight, no drift); once
// settled, matched again. A transfer between two custody wallets is in flight until the deposit
// watcher takes it (here none runs). Tokens minted straight to a custody address, which no ledger
// entry backs, are drift, found on the recheck too and reported with the address.
import { Effect } from "effect"
import type { Address } from "viem"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { makePostgresEventStore } from "../../adapters/eventstore/postgres/event-store.ts"
import type { Asset } from "../../domain/money/asset.ts"
import { type AnvilNode, startAnvil } from "../../src/chains/anvil.ts"
import { makeMintTally, mintTallyKey } from "../../src/chains/mint-tally.ts"
import { deployStablecoin } from "../../src/chains/stablecoin.ts"
import type { MintTally, RunningChain } from "../../src/ports/chains.ts"
import { startProjection } from "../../src/projections/runner.ts"
import { reconcileTenant, report_stale_ms } from "../../src/reconciliation/reconciler.ts"
import type { SourceWallet } from "../../src/transfers/request.ts"
import { freshDatabase, type TestDatabase } from "../support/db.ts"
import { callStablecoin, test_mnemonic, testWallet } from "../support/evm.ts"
import { transferKit } from "../support/transfer-kit.ts"
import {
  composeTransfers,
  job_expire_seconds,
  type TransferHarness,
  transfer_chain_id,
} from "../support/transfers.ts"

const tenant_id = "ten_reconcile"
/** The registry's asset code: the reconciler reads the ledger by it. */
const asset: Asset = { code: "USDC@ethereum", symbol: "USDC", chain: "ethereum", decimals: 6 }
const issuer = testWallet(0)
const funding = 100_000_000n
const amount = 10_000_000n

let db: TestDatabase
let node: AnvilNode
let harness: TransferHarness
let contract: Address
let projection: { stop: () => Promise<void> }
let closeStore: () => Promise<void>
let sender: SourceWallet

const kit = transferKit(
  {
    tenant_id,
    asset,
    funding,
    worker_options: { poll_interval_ms: 100, poll_count_max: 200, worker_count: 2, job_expire_seconds },
  },
  () => ({ db, flow: harness, contract }),
)

const reconcile = async (faucet_mints?: MintTally) => {
  const running: RunningChain = {
    adapter: harness.adapter,
    contracts: new Map([["USDC", contract]]),
    gas_probe_address: issuer.address,
    fund: null,
    ...(faucet_mints === undefined ? {} : { faucet_mints }),
    finality_confirmations: 1,
    faucet_senders: new Set(),
  }
  const chains = {
    get: (environment: string, chain: string) =>
      environment === "sandbox" && chain === "ethereum" ? running : undefined,
  }
  const reports = await reconcileTenant({ pool: db.pool, chains }, tenant_id, "sandbox", {
    recheck_delay_ms: 50,
  })
  expect(reports).toHaveLength(1)
  // The chain is up here: every report is of a complete read, with its on-chain side.
  const report = reports[0] as (typeof reports)[number]
  expect(report.on_chain_balance, "a complete read").not.toBeNull()
  return report as typeof report & { on_chain_balance: bigint; difference: bigint; drift: bigint }
}

const rpc = (method: string, params: ReadonlyArray<unknown> = []) => node.rpc(method, params)

/** A custody wallet of the tenant on ethereum; `label` is its external id too. */
const insertWallet = (wallet_id: string, address: string, derivation_index: number, label: string) =>
  db.pool.query(
    `insert into platform.wallets
       (wallet_id, tenant_id, environment, chain, address, derivation_index, external_id, label, created_at)
     values ($1, $2, 'sandbox', 'ethereum', $3, $4, $5, $5, now())`,
    [wallet_id, tenant_id, address, derivation_index, label],
  )

beforeAll(async () => {
  db = await freshDatabase()
  node = await startAnvil({ chain_id: transfer_chain_id, mnemonic: test_mnemonic })
  contract = await deployStablecoin({
    rpc_url: node.rpc_url,
    issuer: issuer.key,
    name: "Sandbox USDC",
    symbol: "USDC",
    decimals: 6,
  })
  harness = await composeTransfers(db.pool, node.rpc_url)
  const store = makePostgresEventStore(db.pool)
  closeStore = () => Effect.runPromise(store.close)
  projection = startProjection(db.pool, store)
  await db.pool.query(
    `insert into platform.tenants (tenant_id, email, password_hash, company_name, plan, custody_index, created_at)
     values ($1, 'reconcile@example.com', 'x', 'Reconcile', 'basic', 0, now())`,
    [tenant_id],
  )
  await db.pool.query(
    "insert into platform.tenant_environments (tenant_id, environment) values ($1, 'sandbox')",
    [tenant_id],
  )
  const { address } = testWallet(1)
  sender = { wallet_id: "wal_reconcile_1", chain: "ethereum", address, tenant_index: 0, wallet_index: 1 }
  await insertWallet(sender.wallet_id, address, 1, "sender")
  await callStablecoin(node.rpc_url, contract, issuer.key, "mint", [address, funding])
  await kit.creditLedger(sender)
})

afterAll(async () => {
  await projection?.stop()
  await harness?.stop()
  await closeStore?.()
  await node?.stop()
  await db?.drop()
})

describe("reconciliation with money in flight (EVM)", () => {
  it("matches before, counts a mined but unsettled transfer as in flight, matches after", async () => {
    expect(await reconcile()).toMatchObject({
      status: "matched",
      ledger_balance: funding,
      on_chain_balance: funding,
    })

    await rpc("evm_setAutomine", [false])
    const recipient = testWallet(9).address
    const requested = await kit.request(sender, recipient, amount)
    // A worker signs and broadcasts; it stops before the chain mines anything.
    await kit.withWorker(async () => {
      for (let i = 0; i < 200 && (await kit.loadRow(requested.transfer_id)).broadcast_at === null; i++)
        await new Promise((resolve) => setTimeout(resolve, 50))
    })
    expect((await kit.loadRow(requested.transfer_id)).status).toBe("pending")
    expect(await reconcile()).toMatchObject({
      status: "matched",
      ledger_balance: funding,
      on_chain_balance: funding,
      pending_outgoing: amount,
      difference: 0n,
    })

    await rpc("evm_mine")
    expect(await reconcile()).toMatchObject({
      status: "in_flight",
      ledger_balance: funding,
      on_chain_balance: funding - amount,
      pending_outgoing: amount,
      difference: -amount,
      drift: 0n,
    })

    await rpc("evm_setAutomine", [true])
    const row = await kit.withWorker(() => kit.settled(requested.transfer_id))
    expect(row.status).toBe("completed")
    expect(await reconcile()).toMatchObject({
      status: "matched",
      ledger_balance: funding - amount,
      on_chain_balance: funding - amount,
      pending_outgoing: 0n,
    })
  })

  it("counts a transfer between two custody wallets as in flight until the watcher takes it as a deposit", async () => {
    const { address } = testWallet(2)
    await insertWallet("wal_reconcile_2", address, 2, "recipient")
    const before = await reconcile()
    expect(before.status).toBe("matched")
    const requested = await kit.request(sender, address.toLowerCase(), amount)
    expect((await kit.withWorker(() => kit.settled(requested.transfer_id))).status).toBe("completed")
    // Settled: the sender's ledger paid it; no deposit watcher runs here, so no ledger entry holds it
    // at the recipient, while the chain has it at the recipient's address all along.
    expect(await reconcile()).toMatchObject({
      status: "in_flight",
      ledger_balance: before.ledger_balance - amount,
      on_chain_balance: before.on_chain_balance,
      pending_incoming: amount,
      difference: amount,
      drift: 0n,
    })
  })

  it("counts the faucet's mints between chain and ledger as incoming, not drift, until the credit is in the ledger", async () => {
    const tally = makeMintTally()
    const { address } = testWallet(3)
    await insertWallet("wal_reconcile_3", address, 3, "faucet")
    const funded: SourceWallet = {
      wallet_id: "wal_reconcile_3",
      chain: "ethereum",
      address,
      tenant_index: 0,
      wallet_index: 3,
    }
    const before = await reconcile(tally)
    expect(before.drift).toBe(0n)
    // As the faucet does: counted, minted on chain, then (later) credited in the ledger.
    const finished = tally.begin(mintTallyKey(tenant_id, "USDC"), funding)
    await callStablecoin(node.rpc_url, contract, issuer.key, "mint", [address, funding])
    expect(await reconcile(tally)).toMatchObject({
      status: before.status,
      ledger_balance: before.ledger_balance,
      on_chain_balance: before.on_chain_balance + funding,
      pending_incoming: before.pending_incoming + funding,
      difference: before.difference + funding,
      drift: 0n,
    })
    await kit.creditLedger(funded)
    finished()
    expect(await reconcile(tally)).toMatchObject({
      status: before.status,
      ledger_balance: before.ledger_balance + funding,
      on_chain_balance: before.on_chain_balance + funding,
      pending_incoming: before.pending_incoming,
      difference: before.difference,
      drift: 0n,
    })
  })

  it("reports tokens no ledger entry backs as drift, with the address holding them", async () => {
    await callStablecoin(node.rpc_url, contract, issuer.key, "mint", [sender.address, 1_500_000n])
    const report = await reconcile()
    expect(report).toMatchObject({ status: "drift", drift: 1_500_000n })
    // As stored (and logged): since when it drifts, and when it last matched (the first test).
    expect(report.drift_since).toEqual(report.checked_at)
    expect(report.last_matched_at).toBeInstanceOf(Date)
    expect(report.last_matched_at?.getTime()).toBeLessThan(report.checked_at.getTime())
    expect(report.accounts).toContainEqual(
      expect.objectContaining({
        wallet_id: sender.wallet_id,
        address: sender.address,
        on_chain_balance: funding - 2n * amount + 1_500_000n,
      }),
    )
  })
  it("reports a shortfall as drift, not explained by a reservation that was never signed", async () => {
    const before = await reconcile()
    // A transfer reserved in the ledger, not signed (no worker runs): nothing left the chain for it.
    const requested = await kit.request(sender, testWallet(9).address, 1_000n)
    expect((await kit.loadRow(requested.transfer_id)).tx_hash).toBeNull()
    // Tokens leave the custody address outside the platform, as much as the reservation.
    await callStablecoin(node.rpc_url, contract, testWallet(1).key, "transfer", [
      testWallet(8).address,
      1_000n,
    ])
    const report = await reconcile()
    // The ledger reserved 1,000 (custody credits pending), which the chain never sent: it explains
    // nothing of the shortfall.
    expect(report).toMatchObject({
      status: "drift",
      pending_outgoing: 0n,
      on_chain_balance: before.on_chain_balance - 1_000n,
      ledger_balance: before.ledger_balance,
    })
    // Put back: the chain holds the tokens again, the reservation is signed, sent and settled.
    await callStablecoin(node.rpc_url, contract, issuer.key, "mint", [sender.address, 1_000n])
    expect((await kit.withWorker(() => kit.settled(requested.transfer_id))).status).toBe("completed")
  })

  it("never stores an older check over a newer one (two runs at once)", async () => {
    // A report stored by a run that checked after this one will (its checked_at a minute ahead).
    const ahead = new Date(Date.now() + 60_000)
    await db.pool.query(
      "update platform.reconciliation_reports set checked_at = $2, status = 'matched' where tenant_id = $1",
      [tenant_id, ahead],
    )
    const report = await reconcile()
    expect(report).toMatchObject({ status: "matched", checked_at: ahead })
    const stored = await db.pool.query(
      "select status, checked_at from platform.reconciliation_reports where tenant_id = $1",
      [tenant_id],
    )
    expect(stored.rows).toEqual([{ status: "matched", checked_at: ahead }])
  })
  it("keeps the report of a chain another process reconciles, and none once no process has for the stale period", async () => {
    // An earlier run's report (the test before left one dated ahead).
    await db.pool.query(
      "update platform.reconciliation_reports set checked_at = now() - interval '1 minute' where tenant_id = $1",
      [tenant_id],
    )
    expect((await reconcile()).chain).toBe("ethereum")
    const stored = async () =>
      (
        await db.pool.query<{ n: number }>(
          "select count(*)::int as n from platform.reconciliation_reports where tenant_id = $1",
          [tenant_id],
        )
      ).rows[0]?.n
    // A process that does not run the chain (another one does: its report is a minute old).
    const elsewhere = () =>
      reconcileTenant({ pool: db.pool, chains: { get: () => undefined } }, tenant_id, "sandbox")
    await db.pool.query(
      "update platform.reconciliation_reports set checked_at = now() - interval '1 minute' where tenant_id = $1",
      [tenant_id],
    )
    expect(await elsewhere()).toEqual([])
    expect(await stored()).toBe(1)
    // Its node turned off everywhere: no run has stored the report for longer than the stale period.
    await db.pool.query(
      "update platform.reconciliation_reports set checked_at = now() - make_interval(secs => $2) - interval '1 minute' where tenant_id = $1",
      [tenant_id, report_stale_ms / 1000],
    )
    expect(await elsewhere()).toEqual([])
    expect(await stored()).toBe(0)
  })

  it("keeps no report for a token no longer reconciled on a chain it runs", async () => {
    const report = await reconcile()
    // A token reconciled before, no longer configured on this chain.
    await db.pool.query(
      `insert into platform.reconciliation_reports (tenant_id, environment, chain, token, token_decimals,
         status, ledger_balance, on_chain_balance, pending_outgoing, pending_incoming, difference, drift,
         accounts, checked_at, drift_since, error, last_matched_at)
       select tenant_id, environment, chain, 'DROPPED', token_decimals, status, ledger_balance,
              on_chain_balance, pending_outgoing, pending_incoming, difference, drift, accounts,
              checked_at - interval '1 minute', drift_since, error, last_matched_at
         from platform.reconciliation_reports where tenant_id = $1`,
      [tenant_id],
    )
    expect((await reconcile()).token).toBe(report.token)
    const tokens = await db.pool.query<{ token: string }>(
      "select token from platform.reconciliation_reports where tenant_id = $1",
      [tenant_id],
    )
    expect(tokens.rows.map((row) => row.token)).toEqual([report.token])
  })
})
