// Proves that token transfers into custody addresses are credited exactly once, with real parts
// (anvil mining on demand, the platform stablecoin, PostgreSQL, the ledger writer with the deposit
// hook): not before the finality depth; once, however often and by however many watchers the chain
// is scanned; never after a reorg that took the transaction away; once, at its new block, after a
// reorg that re-included it elsewhere; across a watcher restart (and listed page by page); never
// for an ignored sender; and a row the node cannot judge, or a range it cannot read, holds up no
// other row.
import { bytesToHex } from "@noble/hashes/utils.js"
import { Effect } from "effect"
import { type Address, createWalletClient, type Hex, http } from "viem"
import { privateKeyToAccount } from "viem/accounts"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { makeEvmAdapter } from "../../adapters/chains/evm/adapter.ts"
import { makePostgresEventStore } from "../../adapters/eventstore/postgres/event-store.ts"
import type { JsonObject } from "../../domain/webhooks/events.ts"
import { type AnvilNode, startAnvil } from "../../src/chains/anvil.ts"
import { deployStablecoin, stablecoin_abi } from "../../src/chains/stablecoin.ts"
import { depositHook } from "../../src/deposits/hook.ts"
import { listDeposits } from "../../src/deposits/list.ts"
import { type DepositRow, fromDb } from "../../src/deposits/model.ts"
import { type DepositWatcher, startDepositWatcher, type WatchedChain } from "../../src/deposits/watcher.ts"
import { composeHooks, type LedgerWriterService, makeLedgerWriter } from "../../src/ledger/writer.ts"
import { ledgerOf, walletAccountId } from "../../src/platform/accounts.ts"
import type { ChainAdapter } from "../../src/ports/chain.ts"
import { custodyAccountId } from "../../src/transfers/model.ts"
import { enqueueEvents } from "../../src/webhooks/store.ts"
import { freshDatabase, type TestDatabase } from "../support/db.ts"
import { callStablecoin, test_mnemonic, testWallet } from "../support/evm.ts"
import { transfer_chain_id, usdp } from "../support/transfers.ts"

const tenant_id = "ten_deposits"
const ledger = ledgerOf(tenant_id, "sandbox")
const asset = usdp()
const depth = 3
const zero_address = "0x0000000000000000000000000000000000000000"
const issuer = testWallet(0)
const sender = testWallet(1)

let db: TestDatabase
let node: AnvilNode
let contract: Address
let adapter: ChainAdapter
let store: ReturnType<typeof makePostgresEventStore>
let writer: LedgerWriterService
let watched: WatchedChain
const errors: Array<unknown> = []

const run = <A, E>(effect: Effect.Effect<A, E>) => Effect.runPromise(effect)

/** A ledger writer as one process has it; a second one stands for another process. */
const newWriter = () =>
  makeLedgerWriter(store, {
    transaction: {
      appendStreams: store.appendStreamsInTransaction,
      hook: composeHooks(
        depositHook({
          enqueue: (client, rows) =>
            enqueueEvents(
              client,
              rows.map((row) => ({ ...row, data: row.data as JsonObject })),
            ),
        }),
      ),
    },
  })

const newWatcher = (of: LedgerWriterService = writer): DepositWatcher =>
  startDepositWatcher(
    { pool: db.pool, writer: of, chains: [watched] },
    { interval_ms: null, onError: (error) => errors.push(error) },
  )

const mine = async (blocks: number) => {
  for (let i = 0; i < blocks; i++) await node.rpc("evm_mine")
}

/** A custody wallet of the tenant on the watched chain (a row in platform.wallets). */
const custodyWallet = async (index: number): Promise<{ wallet_id: string; address: Address }> => {
  const { address } = testWallet(index, 3)
  const wallet_id = `wal_deposit_${index}`
  await db.pool.query(
    `insert into platform.wallets
       (wallet_id, tenant_id, environment, chain, address, derivation_index, external_id, label, created_at)
     values ($1, $2, 'sandbox', 'ethereum', $3, $4, $1, 'deposits', now())`,
    [wallet_id, tenant_id, address, index],
  )
  return { wallet_id, address }
}

/** Sends `amount` from the sender to `to` (mined at once: anvil mines each transaction). */
const deposit = async (to: Address, amount: bigint) => {
  const receipt = await callStablecoin(node.rpc_url, contract, sender.key, "transfer", [to, amount])
  return { tx_hash: receipt.transactionHash, block_hash: receipt.blockHash }
}

const rowsOf = async (wallet_id: string): Promise<Array<DepositRow>> =>
  (
    await db.pool.query("select * from platform.chain_deposits where wallet_id = $1 order by seen_at", [
      wallet_id,
    ])
  ).rows.map(fromDb)

/** The wallet's posted balance, from a writer that loads the ledger afresh (others wrote it too). */
const balanceOf = async (wallet_id: string): Promise<bigint> => {
  const { state } = await run(newWriter().snapshot(ledger))
  const account = state.accounts.get(walletAccountId(wallet_id, asset))
  return account === undefined ? 0n : account.credits_posted - account.debits_posted
}

/** Ledger transfers crediting the wallet, counted in the event log itself. */
const ledgerCreditsOf = async (wallet_id: string): Promise<number> => {
  const found = await db.pool.query<{ count: string }>(
    `select count(*) from events where event_type = 'TransferCreated' and data->>'credit_account_id' = $1`,
    [walletAccountId(wallet_id, asset)],
  )
  return Number(found.rows[0]?.count)
}

const outboxOf = async (wallet_id: string) =>
  (
    await db.pool.query<{ data: Record<string, unknown> }>(
      "select data from platform.webhook_events where event_type = 'deposit.confirmed' and data->>'wallet_id' = $1",
      [wallet_id],
    )
  ).rows.map((row) => row.data)

beforeAll(async () => {
  db = await freshDatabase()
  node = await startAnvil({ chain_id: transfer_chain_id, mnemonic: test_mnemonic })
  contract = await deployStablecoin({
    rpc_url: node.rpc_url,
    issuer: issuer.key,
    name: "Platform USD",
    symbol: "USDP",
    decimals: 6,
  })
  await callStablecoin(node.rpc_url, contract, issuer.key, "mint", [sender.address, 1_000_000_000n])
  adapter = makeEvmAdapter({
    chain_id: transfer_chain_id,
    rpc_url: node.rpc_url,
    finality_confirmations: depth,
  })
  store = makePostgresEventStore(db.pool)
  writer = newWriter()
  watched = {
    environment: "sandbox",
    chain: "ethereum",
    adapter,
    tokens: [{ asset, contract }],
    finality_confirmations: depth,
    ignore_from: new Set([zero_address]),
  }
  await db.pool.query(
    `insert into platform.tenants (tenant_id, email, password_hash, company_name, plan, custody_index, created_at)
     values ($1, 'deposits@example.com', 'x', 'Deposits', 'basic', 3, now())`,
    [tenant_id],
  )
  await db.pool.query(
    "insert into platform.tenant_environments (tenant_id, environment) values ($1, 'sandbox')",
    [tenant_id],
  )
})

afterAll(async () => {
  if (store !== undefined) await run(store.close)
  await node?.stop()
  await db?.drop()
})

describe("deposits (EVM)", () => {
  it("credits a transfer to a custody address exactly once, only at the finality depth, however many watchers scan", async () => {
    const wallet = await custodyWallet(1)
    const amount = 25_000_000n
    const watcher = newWatcher()
    const sent = await deposit(wallet.address, amount)

    // In the newest block, then one block deeper: seen, not credited.
    for (let i = 1; i < depth; i++) {
      const reports = await watcher.scanOnce()
      expect(reports[0]).toMatchObject({ outcome: "scanned", credited: 0 })
      expect((await rowsOf(wallet.wallet_id)).map((row) => row.status)).toEqual(["seen"])
      expect(await balanceOf(wallet.wallet_id)).toBe(0n)
      await mine(1)
    }

    // At the depth: two watchers of two "processes" (own writers) and repeated scans, all at once.
    const other = newWatcher(newWriter())
    const reports = await Promise.all([
      watcher.scanOnce(),
      other.scanOnce(),
      watcher.scanOnce(),
      other.scanOnce(),
    ])
    expect(reports.flat().reduce((sum, report) => sum + report.credited, 0)).toBe(1)
    for (let i = 0; i < 3; i++) await Promise.all([watcher.scanOnce(), other.scanOnce()])
    await mine(2)
    await watcher.scanOnce()

    const rows = await rowsOf(wallet.wallet_id)
    expect(rows).toHaveLength(1)
    expect(rows[0]).toMatchObject({
      status: "credited",
      amount,
      tx_hash: sent.tx_hash,
      block_hash: sent.block_hash,
      confirmations: depth,
    })
    expect(await balanceOf(wallet.wallet_id)).toBe(amount)
    expect(await ledgerCreditsOf(wallet.wallet_id)).toBe(1)
    const { state } = await run(newWriter().snapshot(ledger))
    expect(state.accounts.get(custodyAccountId(asset))?.debits_posted).toBeGreaterThanOrEqual(amount)
    const events = await outboxOf(wallet.wallet_id)
    expect(events).toHaveLength(1)
    expect(events[0]).toMatchObject({
      deposit_id: rows[0]?.deposit_id,
      chain: "ethereum",
      token: "USDP",
      amount: "25.00",
      from_address: sender.address,
      to_address: wallet.address,
      tx_hash: sent.tx_hash,
      block_hash: sent.block_hash,
      confirmations: depth,
    })
    expect(errors).toEqual([])
  })

  it("never credits a deposit whose block a reorg shallower than the depth took away", async () => {
    const wallet = await custodyWallet(2)
    const watcher = newWatcher()
    const snapshot = await node.rpc("evm_snapshot")
    await deposit(wallet.address, 3_000_000n)
    await mine(1)
    await watcher.scanOnce()
    expect((await rowsOf(wallet.wallet_id)).map((row) => row.status)).toEqual(["seen"])

    // The two blocks are replaced by empty ones, then the chain grows past the depth.
    await node.rpc("evm_revert", [snapshot])
    await mine(depth + 2)
    for (let i = 0; i < 3; i++) await watcher.scanOnce()

    expect((await rowsOf(wallet.wallet_id)).map((row) => row.status)).toEqual(["orphaned"])
    expect(await balanceOf(wallet.wallet_id)).toBe(0n)
    expect(await ledgerCreditsOf(wallet.wallet_id)).toBe(0)
    expect(await outboxOf(wallet.wallet_id)).toEqual([])
    expect(errors).toEqual([])
  })

  it("credits a deposit re-included in another block by a reorg once, at its new block", async () => {
    const wallet = await custodyWallet(3)
    const amount = 4_000_000n
    const watcher = newWatcher()
    const snapshot = await node.rpc("evm_snapshot")
    const first = await deposit(wallet.address, amount)
    const raw = (await node.rpc("eth_getRawTransactionByHash", [first.tx_hash])) as Hex
    await mine(1)
    await watcher.scanOnce()
    const seen = await rowsOf(wallet.wallet_id)
    expect(seen.map((row) => [row.status, row.block_hash, row.log_index])).toEqual([
      ["seen", first.block_hash, 0],
    ])

    // The reorg replaces both blocks: the same signed transaction lands at the same height, behind
    // another transfer (a higher tip goes first), so its block hash and log index change. The new
    // blocks are below the watcher's cursor: only its re-read of the last `depth` blocks finds it.
    await node.rpc("evm_revert", [snapshot])
    await node.rpc("evm_setAutomine", [false])
    await callStablecoinUnmined(issuer.key, "mint", [testWallet(20).address, 1n])
    await node.rpc("eth_sendRawTransaction", [raw])
    await mine(2)
    await node.rpc("evm_setAutomine", [true])
    const receipt = (await node.rpc("eth_getTransactionReceipt", [first.tx_hash])) as {
      blockHash: string
      blockNumber: string
      logs: ReadonlyArray<{ logIndex: string }>
    }
    expect(receipt.blockHash).not.toBe(first.block_hash)
    expect(receipt.logs.map((log) => Number(log.logIndex))).toEqual([1])

    for (let i = 0; i < depth + 1; i++) {
      await watcher.scanOnce()
      await mine(1)
    }
    await watcher.scanOnce()

    const rows = await rowsOf(wallet.wallet_id)
    expect(rows).toHaveLength(1)
    expect(rows[0]).toMatchObject({
      deposit_id: seen[0]?.deposit_id,
      status: "credited",
      tx_hash: first.tx_hash,
      block_hash: receipt.blockHash,
      block_number: BigInt(receipt.blockNumber),
      log_index: 1,
    })
    expect(await balanceOf(wallet.wallet_id)).toBe(amount)
    expect(await ledgerCreditsOf(wallet.wallet_id)).toBe(1)
    const events = await outboxOf(wallet.wallet_id)
    expect(events.map((event) => event.block_hash)).toEqual([receipt.blockHash])
    expect(errors).toEqual([])
  })

  it("loses and doubles nothing when the watcher is replaced mid-way", async () => {
    const wallet = await custodyWallet(4)
    const first = newWatcher()
    await deposit(wallet.address, 1_000_000n)
    await first.scanOnce()
    await first.stop()

    // While no watcher runs: the first deposit deepens, a second one arrives and deepens too.
    await deposit(wallet.address, 2_000_000n)
    await mine(depth)
    const second = newWatcher(newWriter())
    await second.scanOnce()
    await second.scanOnce()
    await mine(1)
    await second.scanOnce()

    const rows = await rowsOf(wallet.wallet_id)
    expect(rows.map((row) => [row.status, row.amount])).toEqual([
      ["credited", 1_000_000n],
      ["credited", 2_000_000n],
    ])
    expect(await balanceOf(wallet.wallet_id)).toBe(3_000_000n)
    expect(await ledgerCreditsOf(wallet.wallet_id)).toBe(2)
    expect(await outboxOf(wallet.wallet_id)).toHaveLength(2)

    // The API's list pages through them newest first.
    const filter = { wallet_id: wallet.wallet_id, limit: 1 }
    const first_page = await listDeposits(db.pool, tenant_id, "sandbox", filter)
    expect(first_page.data.map((item) => item.amount)).toEqual(["2.00"])
    expect(first_page.has_more).toBe(true)
    const last_page = await listDeposits(db.pool, tenant_id, "sandbox", {
      ...filter,
      starting_after: first_page.next_cursor ?? "",
    })
    expect(last_page).toMatchObject({ has_more: false, next_cursor: null })
    expect(last_page.data.map((item) => [item.amount, item.status])).toEqual([["1.00", "credited"]])
    expect(errors).toEqual([])
  })

  it("holds up no row behind one whose status the node cannot give, nor behind a range it cannot read", async () => {
    const wallet = await custodyWallet(7)
    const stuck = await deposit(wallet.address, 1_000_000n)
    await deposit(wallet.address, 2_000_000n)
    await newWatcher().scanOnce()
    await mine(depth)
    // A node that cannot give the first deposit's status, nor read any range now.
    const failing: ChainAdapter = {
      ...adapter,
      transactionStatus: (tx_hash, log_index) =>
        tx_hash === stuck.tx_hash
          ? Effect.die(new Error("status read timed out"))
          : adapter.transactionStatus(tx_hash, log_index),
      incomingTransfers: () => Effect.die(new Error("range read timed out")),
    }
    const seen: Array<unknown> = []
    const faulty = startDepositWatcher(
      { pool: db.pool, writer, chains: [{ ...watched, adapter: failing }] },
      { interval_ms: null, judge_rows_max: 1, onError: (error) => seen.push(error) },
    )
    // One row judged per scan: the stuck one first (never judged, oldest), then the other.
    expect((await faulty.scanOnce())[0]).toMatchObject({ outcome: "scanned", blocks: null, credited: 0 })
    expect((await faulty.scanOnce())[0]).toMatchObject({ outcome: "scanned", credited: 1 })
    expect((await rowsOf(wallet.wallet_id)).map((row) => [row.amount, row.status])).toEqual([
      [1_000_000n, "seen"],
      [2_000_000n, "credited"],
    ])
    expect(seen.map(String).join("\n")).toContain("status read timed out")
    expect(seen.map(String).join("\n")).toContain("range read timed out")
    // With the node back, the stuck one is credited too.
    await newWatcher().scanOnce()
    expect((await rowsOf(wallet.wallet_id)).map((row) => row.status)).toEqual(["credited", "credited"])
    expect(await balanceOf(wallet.wallet_id)).toBe(3_000_000n)
  })

  it("anchors a chain's first scan at its first attempt: a deposit made while the first reads fail is credited once they work", async () => {
    // Production has no cursor yet in this database: its first scan starts 3 blocks below the head.
    await db.pool.query(
      "insert into platform.tenant_environments (tenant_id, environment) values ($1, 'production')",
      [tenant_id],
    )
    const { address } = testWallet(8, 3)
    const wallet_id = "wal_deposit_first_scan"
    await db.pool.query(
      `insert into platform.wallets
         (wallet_id, tenant_id, environment, chain, address, derivation_index, external_id, label, created_at)
       values ($1, $2, 'production', 'ethereum', $3, 8, $1, 'deposits', now())`,
      [wallet_id, tenant_id, address],
    )
    await deposit(address, 4_000_000n)
    const production: WatchedChain = { ...watched, environment: "production" }
    const watcherOver = (chain: WatchedChain) =>
      startDepositWatcher(
        { pool: db.pool, writer, chains: [chain] },
        { interval_ms: null, first_scan_blocks: 3n, onError: () => {} },
      )
    const failing = watcherOver({
      ...production,
      adapter: { ...adapter, incomingTransfers: () => Effect.die(new Error("range read timed out")) },
    })
    expect((await failing.scanOnce())[0]).toMatchObject({ outcome: "scanned", blocks: null })
    // The node fails for longer than the first scan's window.
    await mine(10)
    const healthy = watcherOver(production)
    for (let scan = 0; scan < 5; scan++) {
      await healthy.scanOnce()
      await mine(1)
    }
    const credited = await db.pool.query<{ status: string; amount: string }>(
      "select status, amount::text from platform.chain_deposits where wallet_id = $1",
      [wallet_id],
    )
    expect(credited.rows).toEqual([{ status: "credited", amount: "4000000" }])
  })

  it("skips transfers from an ignored sender (the sandbox faucet's mints)", async () => {
    const wallet = await custodyWallet(5)
    const watcher = newWatcher()
    await callStablecoin(node.rpc_url, contract, issuer.key, "mint", [wallet.address, 9_000_000n])
    await mine(depth)
    await watcher.scanOnce()
    await watcher.scanOnce()
    expect(await rowsOf(wallet.wallet_id)).toEqual([])
    expect(await balanceOf(wallet.wallet_id)).toBe(0n)
    expect(errors).toEqual([])
  })
})

/** Sends a stablecoin call without waiting for a block (automine is off). */
async function callStablecoinUnmined(
  key: ReturnType<typeof testWallet>["key"],
  function_name: string,
  args: ReadonlyArray<unknown>,
): Promise<void> {
  const account = privateKeyToAccount(`0x${bytesToHex(key.exposeSecret())}`)
  await createWalletClient({ account, transport: http(node.rpc_url) }).writeContract({
    address: contract,
    abi: stablecoin_abi,
    functionName: function_name,
    args,
    chain: null,
    gas: 200_000n,
    maxFeePerGas: 200_000_000_000n,
    maxPriorityFeePerGas: 100_000_000_000n,
  })
}
