// Proves the on-chain transfer flow on the EVM family with real parts (anvil, the platform
// stablecoin, PostgreSQL, pg-boss, the ledger writer): a transfer that completes with the chain's
// proof, one refused by the token (recipient blocked after the request), one whose sender cannot pay
// gas, and one whose worker is killed right after the broadcast, which a new worker completes
// exactly once. Failed transfers release the reservation to the last unit.
import { Effect, Result } from "effect"
import pg from "pg"
import { type Address, createPublicClient, http } from "viem"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { makeEvmAdapter } from "../../adapters/chains/evm/adapter.ts"
import { paymentFee } from "../../domain/ledger/fee.ts"
import type { Environment } from "../../domain/platform/scopes.ts"
import { type AnvilNode, startAnvil } from "../../src/chains/anvil.ts"
import { deployStablecoin } from "../../src/chains/stablecoin.ts"
import { ledgerOf, walletAccountId } from "../../src/platform/accounts.ts"
import type { ChainAdapter } from "../../src/ports/chain.ts"
import { type TransferAttachment, transfer_queue } from "../../src/transfers/hook.ts"
import { custodyAccountId, ledgerIds, type TransferRow } from "../../src/transfers/model.ts"
import { type RequestDeps, requestTransfer, type SourceWallet } from "../../src/transfers/request.ts"
import { type ChainRoutes, chainRoutes } from "../../src/transfers/routes.ts"
import {
  startTransferWorker,
  type TransferWorker,
  type TransferWorkerOptions,
} from "../../src/transfers/worker.ts"
import { freshDatabase, type TestDatabase } from "../support/db.ts"
import { callStablecoin, test_mnemonic, testWallet } from "../support/evm.ts"
import { transferKit } from "../support/transfer-kit.ts"
import {
  composeTransfers,
  killWorkerProcess,
  type TransferHarness,
  transfer_chain_id,
  usdp,
  workerProcessUntilBroadcast,
} from "../support/transfers.ts"

const tenant_id = "ten_transfers"
const asset = usdp()
const issuer = testWallet(0)
const funding = 1_000_000_000n
const settle_wait_ms_max = 30_000

let db: TestDatabase
let node: AnvilNode
let harness: TransferHarness
let contract: Address
let deps: RequestDeps

const run = <A, E>(effect: Effect.Effect<A, E>) => Effect.runPromise(effect)
const chain = () => createPublicClient({ transport: http(node.rpc_url) })
const tokenBalance = (address: string) => run(harness.adapter.balance(address, { kind: "token", contract }))
const issuerCall = (fn: string, args: ReadonlyArray<unknown>) =>
  callStablecoin(node.rpc_url, contract, issuer.key, fn, args)

const kit = transferKit({ tenant_id, asset, funding, settle_wait_ms_max, worker_options: {} }, () => ({
  db,
  flow: harness,
  contract,
}))
const { account, loadRow } = kit

/** A custody wallet (tenant `tenant_index`, wallet `wallet_index`) with tokens on chain and in the ledger. */
const fundedWallet = async (
  wallet_index: number,
  tenant_index = 0,
  environment: Environment = "sandbox",
): Promise<SourceWallet> => {
  const { address } = testWallet(wallet_index, tenant_index)
  const wallet: SourceWallet = {
    wallet_id: `wal_${tenant_index}_${wallet_index}`,
    chain: "ethereum",
    address,
    tenant_index,
    wallet_index,
  }
  await issuerCall("mint", [address, funding])
  await kit.creditLedger(wallet, environment)
  return wallet
}

const request = (
  wallet: SourceWallet,
  to_address: string,
  amount: bigint,
  idempotency_key: string | null = null,
  environment: Environment = "sandbox",
  request_deps: RequestDeps = deps,
) =>
  run(
    requestTransfer(request_deps, {
      tenant_id,
      environment,
      wallet,
      to_address,
      amount,
      token: { asset, contract },
      idempotency_key,
      actor: "test",
      correlation_id: "transfer",
      now_ms: Date.now(),
    }).pipe(Effect.map(({ row }) => row)),
  )

/** Waits until the transfer's row satisfies `done`; bounded. */
const until = async (transfer_id: string, done: (row: TransferRow) => boolean): Promise<TransferRow> => {
  const deadline = Date.now() + settle_wait_ms_max
  for (;;) {
    const row = await loadRow(transfer_id)
    if (done(row)) return row
    if (Date.now() > deadline)
      throw new Error(
        `transfer ${transfer_id} did not get there in time: ${JSON.stringify({ status: row.status, broadcast_at: row.broadcast_at, poll_count: row.poll_count, failure: row.failure_code })}`,
      )
    await new Promise((resolve) => setTimeout(resolve, 100))
  }
}

/** Waits until the worker settled the transfer; bounded. */
const settled = (transfer_id: string): Promise<TransferRow> =>
  until(transfer_id, (row) => row.status !== "pending")

/** Runs `body` while the node leaves transactions in its pool until the test mines them. */
const withoutAutomine = async <A>(body: () => Promise<A>): Promise<A> => {
  await node.rpc("evm_setAutomine", [false])
  try {
    return await body()
  } finally {
    await node.rpc("evm_setAutomine", [true])
  }
}

/** A transfer's budget before replacement, in polls (200 ms apart). */
const short_poll_count_max = 5

const startWorker = (routes: ChainRoutes, options: TransferWorkerOptions, writer = harness.writer) =>
  startTransferWorker(
    {
      pool: db.pool,
      boss: harness.boss,
      writer,
      routes,
      signingKey: harness.signingKey,
    },
    { poll_interval_ms: 200, poll_count_max: 50, worker_count: 2, job_expire_seconds: 3, ...options },
  )

/** Runs `body` while a worker of this process works the queue. */
const withWorker = async <A>(
  body: () => Promise<A>,
  routes = harness.routes,
  options: TransferWorkerOptions = {},
  writer = harness.writer,
): Promise<A> => {
  const worker: TransferWorker = await startWorker(routes, options, writer)
  try {
    return await body()
  } finally {
    await worker.stop()
  }
}

const outboxEvents = async (transfer_id: string) =>
  (
    await db.pool.query<{ event_type: string; data: { status: string; tx_hash: string | null } }>(
      "select event_type, data from platform.webhook_events where data->>'transaction_id' = $1",
      [transfer_id],
    )
  ).rows

/** The ledger transfers of one on-chain transfer, by event type. */
const ledgerEventsOf = async (transfer_id: string) =>
  (
    await db.pool.query<{ event_type: string }>(
      `select event_type from events
        where data->>'transfer_id' like $1 || '%' or data->>'pending_id' like $1 || '%' order by global_position`,
      [transfer_id],
    )
  ).rows.map((row) => row.event_type)

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
  harness = await composeTransfers(db.pool, node.rpc_url)
  deps = { writer: harness.writer, pool: db.pool, routes: harness.routes }
})

afterAll(async () => {
  await harness?.stop()
  await node?.stop()
  await db?.drop()
})

describe("on-chain transfers (EVM)", () => {
  it("completes: wallet debited amount + fee, custody credited, proof matches the receipt, recipient gets exactly the amount", async () => {
    const wallet = await fundedWallet(1)
    const recipient = testWallet(11).address
    const amount = 12_345_678n
    const fee = paymentFee(amount)
    const before = await tokenBalance(recipient)
    const requested = await request(wallet, recipient, amount)
    expect(requested.status).toBe("pending")
    expect((await account(walletAccountId(wallet.wallet_id, asset))).debits_pending).toBe(amount + fee)

    const row = await withWorker(() => settled(requested.transfer_id))
    expect(row.status).toBe("completed")
    expect(await tokenBalance(recipient)).toBe(before + amount)

    const receipt = await chain().getTransactionReceipt({ hash: row.tx_hash as `0x${string}` })
    expect(row.proof).toMatchObject({
      tx_hash: receipt.transactionHash,
      block_number: receipt.blockNumber.toString(),
      block_hash: receipt.blockHash,
      log_index: receipt.logs[0]?.logIndex,
    })
    expect(row.proof?.confirmations).toBeGreaterThanOrEqual(1)

    const payer = await account(walletAccountId(wallet.wallet_id, asset))
    expect(payer.debits_posted).toBe(amount + fee)
    expect(payer.debits_pending).toBe(0n)
    expect(payer.credits_posted - payer.debits_posted - payer.debits_pending).toBe(funding - amount - fee)
    const custody = await account(custodyAccountId(asset))
    expect(custody.credits_pending).toBe(0n)
    expect(custody.credits_posted).toBeGreaterThanOrEqual(amount)

    const events = await outboxEvents(row.transfer_id)
    expect(events.map((event) => event.event_type)).toEqual(["payment.completed"])
    expect(events[0]?.data.tx_hash).toBe(row.tx_hash)
  })

  it("refuses bad input before any money moves", async () => {
    const wallet = await fundedWallet(2)
    const bad = await Effect.runPromise(
      Effect.flip(
        requestTransfer(deps, {
          tenant_id,
          environment: "sandbox",
          wallet,
          to_address: "0x1234",
          amount: 1n,
          token: { asset, contract },
          idempotency_key: null,
          actor: "test",
          correlation_id: "c",
          now_ms: Date.now(),
        }),
      ),
    )
    expect(bad._tag).toBe("InvalidDestinationAddress")
    const zero = await Effect.runPromise(
      Effect.result(
        requestTransfer(deps, {
          tenant_id,
          environment: "sandbox",
          wallet,
          to_address: testWallet(12).address,
          amount: 0n,
          token: { asset, contract },
          idempotency_key: null,
          actor: "test",
          correlation_id: "c",
          now_ms: Date.now(),
        }),
      ),
    )
    expect(Result.isFailure(zero) && zero.failure._tag).toBe("TransferAmountNotPositive")
    const payer = await account(walletAccountId(wallet.wallet_id, asset))
    expect(payer.debits_pending + payer.debits_posted).toBe(0n)
  })

  it("answers a repeated idempotency key with the first transfer and reserves once", async () => {
    const wallet = await fundedWallet(3)
    const first = await request(wallet, testWallet(13).address, 1_000n, "idem-1")
    const again = await run(
      requestTransfer(deps, {
        tenant_id,
        environment: "sandbox",
        wallet,
        to_address: testWallet(13).address,
        amount: 1_000n,
        token: { asset, contract },
        idempotency_key: "idem-1",
        actor: "test",
        correlation_id: "transfer",
        now_ms: Date.now(),
      }),
    )
    expect(again).toMatchObject({ replayed: true, row: { transfer_id: first.transfer_id } })
    const payer = await account(walletAccountId(wallet.wallet_id, asset))
    expect(payer.debits_pending).toBe(1_000n + paymentFee(1_000n))
    expect(await withWorker(() => settled(first.transfer_id))).toMatchObject({ status: "completed" })
  })

  it("stores an all-upper-case or all-lower-case destination checksummed, and the signer sends to it", async () => {
    const wallet = await fundedWallet(6)
    const recipient = testWallet(22).address
    const upper = `0x${recipient.slice(2).toUpperCase()}`
    const lower = recipient.toLowerCase()
    const first = await request(wallet, upper, 1_000n)
    const second = await request(wallet, lower, 2_000n)
    expect([first.to_address, second.to_address]).toEqual([recipient, recipient])
    const rows = await withWorker(() =>
      Promise.all([settled(first.transfer_id), settled(second.transfer_id)]),
    )
    expect(rows.map((row) => row.status)).toEqual(["completed", "completed"])
    expect(await tokenBalance(recipient)).toBe(3_000n)
    // A mixed-case address whose checksum is wrong stays refused.
    const wrong = recipient.replace(/[a-fA-F]/, (letter) =>
      letter === letter.toUpperCase() ? letter.toLowerCase() : letter.toUpperCase(),
    )
    const refused = await Effect.runPromise(
      Effect.flip(
        requestTransfer(deps, {
          tenant_id,
          environment: "sandbox",
          wallet,
          to_address: wrong,
          amount: 1n,
          token: { asset, contract },
          idempotency_key: null,
          actor: "test",
          correlation_id: "c",
          now_ms: Date.now(),
        }),
      ),
    )
    expect(refused._tag).toBe("InvalidDestinationAddress")
  })

  it("fails and releases the funds exactly when the recipient is blocked after the request", async () => {
    const wallet = await fundedWallet(4)
    const recipient = testWallet(14).address
    const requested = await request(wallet, recipient, 5_000_000n)
    await issuerCall("blockAccount", [recipient])
    const row = await withWorker(() => settled(requested.transfer_id))
    expect(row).toMatchObject({ status: "failed", failure_code: "would_revert", tx_hash: null })
    expect(await tokenBalance(recipient)).toBe(0n)
    const payer = await account(walletAccountId(wallet.wallet_id, asset))
    expect(payer.debits_pending).toBe(0n)
    expect(payer.debits_posted).toBe(0n)
    expect(payer.credits_posted - payer.debits_posted - payer.debits_pending).toBe(funding)
    expect((await outboxEvents(row.transfer_id)).map((event) => event.event_type)).toEqual(["payment.failed"])
  })

  it("fails and releases the funds when the custody sender cannot pay gas", async () => {
    // Tenant 1's wallets are not anvil dev accounts: no ETH.
    const wallet = await fundedWallet(0, 1)
    const recipient = testWallet(15).address
    const requested = await request(wallet, recipient, 2_000_000n)
    const row = await withWorker(() => settled(requested.transfer_id))
    expect(row).toMatchObject({ status: "failed", failure_code: "insufficient_gas" })
    expect(await tokenBalance(recipient)).toBe(0n)
    const payer = await account(walletAccountId(wallet.wallet_id, asset))
    expect(payer.credits_posted - payer.debits_posted - payer.debits_pending).toBe(funding)
    expect(payer.debits_pending).toBe(0n)
  })

  it("routes by environment: a production transfer goes to the production adapter, and is refused where none runs", async () => {
    // The sandbox's ethereum adapter points at a port nothing listens on: a transfer sent through it
    // could never complete, so completing proves the production adapter (on anvil) sent it.
    const unreachable = makeEvmAdapter({
      chain_id: transfer_chain_id,
      rpc_url: "http://127.0.0.1:9/",
      finality_confirmations: 1,
    })
    const routes = chainRoutes({
      sandbox: new Map([["ethereum", unreachable]]),
      production: new Map([["ethereum", harness.adapter]]),
    })
    const wallet = await fundedWallet(6, 0, "production")
    const recipient = testWallet(17).address
    const before = await tokenBalance(recipient)
    const production_deps: RequestDeps = { ...deps, routes }
    const requested = await request(wallet, recipient, 3_000_000n, null, "production", production_deps)
    const row = await withWorker(() => settled(requested.transfer_id), routes)
    expect(row).toMatchObject({ status: "completed", environment: "production" })
    expect(await tokenBalance(recipient)).toBe(before + 3_000_000n)
    expect((await account(walletAccountId(wallet.wallet_id, asset), "production")).debits_posted).toBe(
      3_000_000n + paymentFee(3_000_000n),
    )

    const sandbox_only: RequestDeps = { ...deps, routes: chainRoutes({ sandbox: harness.routes.sandbox }) }
    const refused = await Effect.runPromise(
      Effect.flip(
        requestTransfer(sandbox_only, {
          tenant_id,
          environment: "production",
          wallet,
          to_address: recipient,
          amount: 1n,
          token: { asset, contract },
          idempotency_key: null,
          actor: "test",
          correlation_id: "c",
          now_ms: Date.now(),
        }),
      ),
    )
    expect(refused).toMatchObject({ _tag: "UnsupportedChain", chain: "ethereum" })
    expect((await account(walletAccountId(wallet.wallet_id, asset), "production")).debits_pending).toBe(0n)
  })

  it("replaces a transaction stuck in the pool past its budget, and voids only once the replacement is final", async () => {
    const wallet = await fundedWallet(7)
    const recipient = testWallet(18).address
    const nonce_before = await chain().getTransactionCount({ address: wallet.address as Address })
    const row = await withoutAutomine(async () => {
      const requested = await request(wallet, recipient, 4_000_000n)
      return await withWorker(
        async () => {
          const replacing = await until(requested.transfer_id, (row) => row.replacement_tx_hash !== null)
          // Still pending: the replacement is in the pool, not final.
          await new Promise((resolve) => setTimeout(resolve, 600))
          expect((await loadRow(requested.transfer_id)).status).toBe("pending")
          expect(replacing.nonce).toBe(nonce_before)
          await node.rpc("evm_mine", [])
          return await settled(requested.transfer_id)
        },
        harness.routes,
        { poll_count_max: short_poll_count_max },
      )
    })
    expect(row).toMatchObject({ status: "failed", failure_code: "confirmation_timeout" })
    expect(row.failure_message).toContain(row.replacement_tx_hash)
    const replacement = await chain().getTransaction({ hash: row.replacement_tx_hash as `0x${string}` })
    expect(replacement).toMatchObject({ nonce: nonce_before, to: wallet.address.toLowerCase(), value: 0n })
    expect(replacement.blockNumber).not.toBeNull()
    expect(await chain().getTransactionCount({ address: wallet.address as Address })).toBe(nonce_before + 1)
    await expect(chain().getTransactionReceipt({ hash: row.tx_hash as `0x${string}` })).rejects.toThrow()
    expect(await tokenBalance(recipient)).toBe(0n)
    const payer = await account(walletAccountId(wallet.wallet_id, asset))
    expect(payer.debits_pending).toBe(0n)
    expect(payer.credits_posted - payer.debits_posted - payer.debits_pending).toBe(funding)
    expect((await outboxEvents(row.transfer_id)).map((event) => event.event_type)).toEqual(["payment.failed"])
  })

  it("never voids a transaction that is in a block: past its budget it waits for finality, then completes", async () => {
    // An adapter that wants 4 confirmations, on a chain that mines only when told to.
    const deep = makeEvmAdapter({
      chain_id: transfer_chain_id,
      rpc_url: node.rpc_url,
      finality_confirmations: 4,
    })
    const routes = chainRoutes({ sandbox: new Map([["ethereum", deep]]) })
    const wallet = await fundedWallet(9)
    const recipient = testWallet(21).address
    const row = await withoutAutomine(async () => {
      const requested = await request(wallet, recipient, 3_000_000n)
      return await withWorker(
        async () => {
          await until(requested.transfer_id, (current) => current.broadcast_at !== null)
          await node.rpc("evm_mine", [])
          // In a block (1 confirmation of 4), polled well past the budget: still pending, not voided.
          await until(requested.transfer_id, (current) => current.poll_count > short_poll_count_max + 2)
          expect((await loadRow(requested.transfer_id)).status).toBe("pending")
          for (let i = 0; i < 3; i++) await node.rpc("evm_mine", [])
          return await settled(requested.transfer_id)
        },
        routes,
        { poll_count_max: short_poll_count_max, poll_interval_ms: 50 },
      )
    })
    expect(row).toMatchObject({ status: "completed", replacement_tx_hash: null })
    expect(row.proof?.confirmations).toBeGreaterThanOrEqual(4)
    expect(await tokenBalance(recipient)).toBe(3_000_000n)
  })

  it("never voids on a node's refusal of bytes it was handed before: they may still land, and here they do", async () => {
    const wallet = await fundedWallet(30)
    await node.setBalance(wallet.address, 10n ** 19n)
    const recipient = testWallet(31).address
    const row = await withoutAutomine(async () => {
      const requested = await request(wallet, recipient, 2_000_000n)
      return await withWorker(
        async () => {
          const sent = await until(requested.transfer_id, (current) => current.broadcast_at !== null)
          expect(sent.broadcast_attempted_at).not.toBeNull()
          // This node forgets the transaction (another pool may still hold it) and its fee floor
          // rises above what the transaction pays: every rebroadcast is refused.
          await node.rpc("anvil_dropTransaction", [sent.tx_hash])
          await node.rpc("anvil_setNextBlockBaseFeePerGas", [`0x${(10n ** 13n).toString(16)}`])
          await node.rpc("evm_mine", [])
          const polled = sent.poll_count
          await until(requested.transfer_id, (current) => current.poll_count >= polled + 5)
          expect(await loadRow(requested.transfer_id)).toMatchObject({
            status: "pending",
            failure_code: null,
          })
          // The spike passes: the worker's next rebroadcast is taken, and the transaction lands.
          await node.rpc("anvil_setNextBlockBaseFeePerGas", ["0x1"])
          await node.rpc("evm_mine", [])
          await until(requested.transfer_id, (current) => current.poll_count >= polled + 8)
          await node.rpc("evm_mine", [])
          return await settled(requested.transfer_id)
        },
        harness.routes,
        { poll_interval_ms: 50 },
      )
    })
    expect(row).toMatchObject({ status: "completed", replacement_tx_hash: null })
    expect(await tokenBalance(recipient)).toBe(2_000_000n)
    const payer = await account(walletAccountId(wallet.wallet_id, asset))
    expect(payer.debits_pending).toBe(0n)
    expect(payer.credits_posted - payer.debits_posted).toBe(funding - 2_000_000n - paymentFee(2_000_000n))
  })

  it("signs the next transfer at a nonce left unused by one refused at its first broadcast, so the transfers queued above it land", async () => {
    const wallet = await fundedWallet(40)
    const gas = 10n ** 19n
    await node.setBalance(wallet.address, gas)
    const first = await request(wallet, testWallet(41).address, 1_000_000n)
    let above: TransferRow | undefined
    const [refused, queued, next] = await withWorker(
      async () => {
        const refused = await settled(first.transfer_id)
        // Gas is back at once; a transfer requested now must take the nonce left unused.
        await node.setBalance(wallet.address, gas)
        const next = await request(wallet, testWallet(43).address, 3_000_000n)
        return [
          refused,
          await settled((above as TransferRow).transfer_id),
          await settled(next.transfer_id),
        ] as const
      },
      harness.routes,
      {
        poll_interval_ms: 100,
        beforeBroadcast: async (row) => {
          if (row.transfer_id !== first.transfer_id || above !== undefined) return
          // Another transfer of the sender is signed (above the first's nonce) and broadcast first,
          // as concurrent jobs may do; the node queues it behind the missing nonce.
          above = await request(wallet, testWallet(42).address, 2_000_000n)
          await until(above.transfer_id, (current) => current.broadcast_at !== null)
          // Then the node refuses the first one's first broadcast: the sender's gas is short.
          await node.setBalance(wallet.address, 0n)
        },
      },
    )
    expect(refused).toMatchObject({ status: "failed", failure_code: "insufficient_gas" })
    expect(queued.nonce).toBe((refused.nonce ?? 0) + 1)
    expect(next.nonce).toBe(refused.nonce)
    expect([queued.status, next.status]).toEqual(["completed", "completed"])
    expect(await tokenBalance(testWallet(41).address)).toBe(0n)
    expect(await tokenBalance(testWallet(42).address)).toBe(2_000_000n)
    expect(await tokenBalance(testWallet(43).address)).toBe(3_000_000n)
  })

  it("completes a replaced transfer when its own transaction lands instead of the replacement", async () => {
    const wallet = await fundedWallet(8)
    const recipient = testWallet(19).address
    const amount = 6_000_000n
    const nonce_before = await chain().getTransactionCount({ address: wallet.address as Address })
    const requested = await withoutAutomine(async () => {
      const requested = await request(wallet, recipient, amount)
      const replacing = await withWorker(
        () => until(requested.transfer_id, (row) => row.replacement_tx_hash !== null),
        harness.routes,
        { poll_count_max: short_poll_count_max },
      )
      // Another node still held the original and a block producer took it: the replacement never lands.
      await node.rpc("anvil_dropTransaction", [replacing.replacement_tx_hash])
      await node.rpc("eth_sendRawTransaction", [replacing.raw_transaction])
      await node.rpc("evm_mine", [])
      return requested
    })
    const row = await withWorker(() => settled(requested.transfer_id), harness.routes, {
      poll_count_max: short_poll_count_max,
    })
    expect(row.status).toBe("completed")
    expect(row.proof?.tx_hash).toBe(row.tx_hash)
    expect(await tokenBalance(recipient)).toBe(amount)
    expect(await chain().getTransactionCount({ address: wallet.address as Address })).toBe(nonce_before + 1)
    await expect(
      chain().getTransactionReceipt({ hash: row.replacement_tx_hash as `0x${string}` }),
    ).rejects.toThrow()
    const payer = await account(walletAccountId(wallet.wallet_id, asset))
    expect(payer.debits_posted).toBe(amount + paymentFee(amount))
    expect((await outboxEvents(row.transfer_id)).map((event) => event.event_type)).toEqual([
      "payment.completed",
    ])
  })

  it("completes exactly once after the worker is killed right after the broadcast", async () => {
    const wallet = await fundedWallet(5)
    const recipient = testWallet(16).address
    const amount = 7_000_000n
    const nonce_before = await chain().getTransactionCount({ address: wallet.address as Address })
    const balance_before = await tokenBalance(recipient)
    const requested = await request(wallet, recipient, amount)

    const { child, broadcast: broadcast_hash } = await workerProcessUntilBroadcast(
      db.url,
      { rpc_url: node.rpc_url },
      settle_wait_ms_max,
    )
    await killWorkerProcess(child)

    const interrupted = await loadRow(requested.transfer_id)
    expect(interrupted.status).toBe("pending")
    expect(interrupted.tx_hash).toBe(broadcast_hash)
    expect(await ledgerEventsOf(requested.transfer_id)).not.toContain("PendingTransferPosted")

    const row = await withWorker(() => settled(requested.transfer_id))
    expect(row.status).toBe("completed")
    expect(row.tx_hash).toBe(broadcast_hash)
    expect(await tokenBalance(recipient)).toBe(balance_before + amount)
    expect(await chain().getTransactionCount({ address: wallet.address as Address })).toBe(nonce_before + 1)
    const ledger_events = await ledgerEventsOf(requested.transfer_id)
    expect(ledger_events.filter((type) => type === "PendingTransferPosted")).toHaveLength(2)
    expect(ledger_events.filter((type) => type === "PendingTransferCreated")).toHaveLength(2)
    expect((await outboxEvents(row.transfer_id)).map((event) => event.event_type)).toEqual([
      "payment.completed",
    ])
    const payer = await account(walletAccountId(wallet.wallet_id, asset))
    expect(payer.debits_posted).toBe(amount + paymentFee(amount))
  }, 180_000)

  it("fails a transfer it could never sign (its node down) as node_unavailable after its attempts, and releases the funds", async () => {
    const unreachable = makeEvmAdapter({
      chain_id: transfer_chain_id,
      rpc_url: "http://127.0.0.1:9/",
      finality_confirmations: 1,
    })
    const routes = chainRoutes({ sandbox: new Map([["ethereum", unreachable]]) })
    const wallet = await fundedWallet(10)
    const requested = await request(wallet, testWallet(23).address, 4_000_000n, null, "sandbox", {
      ...deps,
      routes,
    })
    const errors: Array<unknown> = []
    const row = await withWorker(() => settled(requested.transfer_id), routes, {
      sign_attempts_max: 3,
      onError: (error) => errors.push(error),
    })
    expect(row).toMatchObject({
      status: "failed",
      failure_code: "node_unavailable",
      tx_hash: null,
      raw_transaction: null,
    })
    expect(row.failure_message).toBe(
      "The ethereum node could not be reached or failed on 3 attempts in a row to prepare the transfer; nothing was sent, and the funds were released.",
    )
    // The node's own errors (which name its URL) reach the operator's log, never the tenant.
    expect(String(errors[0])).toContain("127.0.0.1:9")
    expect(row.failure_message).not.toContain("127.0.0.1")
    expect(errors).toHaveLength(3)
    await kit.expectReleased(wallet)
    expect((await outboxEvents(row.transfer_id)).map((event) => event.event_type)).toEqual(["payment.failed"])
  }, 180_000)

  it("counts the attempts of a job handed back by a process that does not run the chain towards the give-up", async () => {
    const unreachable = makeEvmAdapter({
      chain_id: transfer_chain_id,
      rpc_url: "http://127.0.0.1:9/",
      finality_confirmations: 1,
    })
    const routes = chainRoutes({ sandbox: new Map([["ethereum", unreachable]]) })
    const wallet = await fundedWallet(60)
    const requested = await request(wallet, testWallet(61).address, 4_000_000n, null, "sandbox", {
      ...deps,
      routes,
    })
    const options = { sign_attempts_max: 3, step_retry_delay_max_seconds: 1 }
    const queued = async (since: Date) =>
      (
        await db.pool.query<{ n: number }>(
          `select count(*)::int as n from pgboss.job
            where name = $1 and data->>'transfer_id' = $2 and state = 'created' and created_on >= $3`,
          [transfer_queue, requested.transfer_id, since],
        )
      ).rows[0]?.n ?? 0
    const waitFor = async (done: () => Promise<boolean>) => {
      const deadline = Date.now() + settle_wait_ms_max
      while (!(await done())) {
        if (Date.now() > deadline) throw new Error("timed out")
        await new Promise((resolve) => setTimeout(resolve, 50))
      }
    }
    // Two attempts fail in the process that runs the chain (its node unreachable)...
    const first: Array<unknown> = []
    await withWorker(() => waitFor(async () => first.length >= 2), routes, {
      ...options,
      onError: (error) => first.push(error),
    })
    expect(first).toHaveLength(2)
    // ...then a process without the chain takes the retry and hands the job back...
    const since = new Date()
    await withWorker(
      () => waitFor(async () => (await queued(since)) > 0),
      chainRoutes({ sandbox: new Map() }),
      options,
    )
    // ...and the third attempt in a row, wherever it runs, is the last.
    const last: Array<unknown> = []
    const row = await withWorker(() => settled(requested.transfer_id), routes, {
      ...options,
      onError: (error) => last.push(error),
    })
    expect(row).toMatchObject({ status: "failed", failure_code: "node_unavailable", tx_hash: null })
    expect(row.failure_message).toContain("failed on 3 attempts in a row")
    expect(last).toHaveLength(1)
    await kit.expectReleased(wallet)
  }, 180_000)

  it("never signs a transfer whose give-up was claimed (the worker stopped before settling it): the next job settles the failure", async () => {
    const wallet = await fundedWallet(13)
    const requested = await request(wallet, testWallet(25).address, 2_000_000n)
    // What `giveUpUnsigned` writes before it settles; a worker that died right after leaves this.
    await db.pool.query(
      "update platform.chain_transfers set failure_code = 'node_unavailable', failure_message = 'gave up' where transfer_id = $1",
      [requested.transfer_id],
    )
    const row = await withWorker(() => settled(requested.transfer_id))
    expect(row).toMatchObject({ status: "failed", failure_code: "node_unavailable", tx_hash: null })
    await kit.expectReleased(wallet)
    expect(await tokenBalance(testWallet(25).address)).toBe(0n)
  })

  it("reserves without a lapse, and gives a pending transfer whose job was lost a new one", async () => {
    const wallet = await fundedWallet(27)
    await node.setBalance(wallet.address, 10n ** 19n)
    const recipient = testWallet(26).address
    const before = await tokenBalance(recipient)
    const requested = await request(wallet, recipient, 3_000_000n)
    const reservations = await db.pool.query<{ expires_at: string | null }>(
      "select data->>'expires_at' as expires_at from events where event_type = 'PendingTransferCreated' and data->>'transfer_id' like $1 || '%'",
      [requested.transfer_id],
    )
    expect(reservations.rows.map((row) => row.expires_at)).toEqual([null, null])
    // The job lost (as if the database failed while it was replaced), and the request an hour old.
    await db.pool.query("delete from pgboss.job where name = $1 and data->>'transfer_id' = $2", [
      transfer_queue,
      requested.transfer_id,
    ])
    await db.pool.query(
      "update platform.chain_transfers set created_at = created_at - interval '1 hour' where transfer_id = $1",
      [requested.transfer_id],
    )
    const row = await withWorker(() => settled(requested.transfer_id), harness.routes, {
      orphan_sweep_interval_ms: 200,
    })
    expect(row.status).toBe("completed")
    expect(await tokenBalance(recipient)).toBe(before + 3_000_000n)
  })

  it("fails the transfers left pending by chains that were started anew, signed or not, and leaves newer ones alone", async () => {
    const wallet = await fundedWallet(28)
    await node.setBalance(wallet.address, 10n ** 19n)
    const recipient = testWallet(29).address
    const before = await tokenBalance(recipient)
    const signed = await withoutAutomine(async () => {
      const requested = await request(wallet, recipient, 1_000_000n)
      const broadcast = await withWorker(() =>
        until(requested.transfer_id, (row) => row.broadcast_at !== null),
      )
      // The chain that had it is gone: nothing of it lands anywhere.
      await node.rpc("anvil_dropTransaction", [broadcast.tx_hash])
      return broadcast
    })
    const unsigned = await request(wallet, recipient, 2_000_000n)
    await new Promise((resolve) => setTimeout(resolve, 5))
    const restarted_at = new Date()
    const newer = await request(wallet, recipient, 3_000_000n)
    const rows = await withWorker(
      async () => [
        await settled(signed.transfer_id),
        await settled(unsigned.transfer_id),
        await settled(newer.transfer_id),
      ],
      harness.routes,
      { chains_restarted: { environment: "sandbox", at: restarted_at } },
    )
    for (const row of rows.slice(0, 2)) {
      expect(row).toMatchObject({ status: "failed", failure_code: "dropped" })
      expect(row.failure_message).toContain("chains were started anew")
      expect((await outboxEvents(row.transfer_id)).map((event) => event.event_type)).toEqual([
        "payment.failed",
      ])
    }
    expect(rows[1]?.tx_hash).toBeNull()
    expect(rows[2]?.status).toBe("completed")
    expect(await tokenBalance(recipient)).toBe(before + 3_000_000n)
    const payer = await account(walletAccountId(wallet.wallet_id, asset))
    expect(payer.debits_pending).toBe(0n)
    expect(payer.debits_posted).toBe(3_000_000n + paymentFee(3_000_000n))
  })

  it("finishes a settlement interrupted between its fee and its amount the way its first step recorded, even when a restart fails what is pending", async () => {
    const wallet = await fundedWallet(30)
    const requested = await request(wallet, testWallet(31).address, 4_000_000n)
    const ids = ledgerIds(requested.transfer_id)
    // What the worker's settlement does first (the fee posted, the outcome recorded with it), before
    // a crash that leaves the amount reserved.
    const proof = {
      tx_hash: `0x${"ab".repeat(32)}`,
      block_number: "7",
      block_hash: `0x${"cd".repeat(32)}`,
      log_index: 0,
      confirmations: 3,
    }
    const first = await Effect.runPromise(
      Effect.result(
        harness.writer.execute(
          ledgerOf(tenant_id, "sandbox"),
          { type: "PostPendingTransfer", transfer_id: ids.post_fee, pending_id: ids.fee, now_ms: Date.now() },
          {
            actor: "chain-transfer-worker",
            correlation_id: requested.transfer_id,
            idempotency_key: ids.post_fee,
            attachment: {
              kind: "chain_transfer_settling",
              transfer_id: requested.transfer_id,
              outcome: { status: "completed", proof },
            } satisfies TransferAttachment,
          },
        ),
      ),
    )
    expect(Result.isSuccess(first)).toBe(true)
    // The restart fails every pending transfer of the old chains; this one was decided already.
    const row = await withWorker(() => settled(requested.transfer_id), harness.routes, {
      chains_restarted: { environment: "sandbox", at: new Date() },
    })
    expect(row).toMatchObject({ status: "completed", proof, failure_code: null, failure_message: null })
    expect((await outboxEvents(row.transfer_id)).map((event) => event.event_type)).toEqual([
      "payment.completed",
    ])
    const payer = await account(walletAccountId(wallet.wallet_id, asset))
    expect(payer.debits_pending).toBe(0n)
  })

  /**
   * The harness's writer, except that the void of `transfer_id`'s amount fails once, as when the
   * database connection drops (or the process dies) after the fee's void committed with the
   * outcome; `meanwhile` runs first.
   */
  const interruptedBeforeAmountVoid = (transfer_id: string, meanwhile: () => Promise<unknown>) => {
    const { void_amount } = ledgerIds(transfer_id)
    const interrupted = { done: false }
    const writer: typeof harness.writer = {
      ...harness.writer,
      execute: (ledger, command, context) => {
        if (interrupted.done || !("transfer_id" in command) || command.transfer_id !== void_amount)
          return harness.writer.execute(ledger, command, context)
        interrupted.done = true
        return Effect.promise(meanwhile).pipe(Effect.andThen(Effect.die(new Error("connection lost"))))
      },
    }
    return { writer, interrupted }
  }

  it("never signs a transfer whose signing was refused once its settlement began, though the refusal clears before the retry", async () => {
    // Tenant 2's wallets are not anvil dev accounts: no ETH, so signing is refused insufficient_gas.
    const wallet = await fundedWallet(0, 2)
    const recipient = testWallet(44).address
    const requested = await request(wallet, recipient, 2_000_000n)
    // Gas arrives while the settlement of the refusal is interrupted.
    const { writer, interrupted } = interruptedBeforeAmountVoid(requested.transfer_id, () =>
      node.setBalance(wallet.address, 10n ** 19n),
    )
    const row = await withWorker(() => settled(requested.transfer_id), harness.routes, {}, writer)
    expect(interrupted.done).toBe(true)
    expect(row).toMatchObject({ status: "failed", failure_code: "insufficient_gas", tx_hash: null })
    expect(await tokenBalance(recipient)).toBe(0n)
    const payer = await account(walletAccountId(wallet.wallet_id, asset))
    expect(payer.credits_posted - payer.debits_posted - payer.debits_pending).toBe(funding)
  })

  it("never sends again bytes whose first broadcast was refused once its settlement began, though gas arrives before the retry", async () => {
    const wallet = await fundedWallet(45)
    await node.setBalance(wallet.address, 10n ** 19n)
    const recipient = testWallet(46).address
    const requested = await request(wallet, recipient, 2_000_000n)
    const { writer, interrupted } = interruptedBeforeAmountVoid(requested.transfer_id, () =>
      node.setBalance(wallet.address, 10n ** 19n),
    )
    const row = await withWorker(
      () => settled(requested.transfer_id),
      harness.routes,
      {
        // Signed while the sender had gas; the node refuses the first broadcast: it has none now.
        beforeBroadcast: async (current) => {
          if (current.transfer_id === requested.transfer_id && !interrupted.done)
            await node.setBalance(wallet.address, 0n)
        },
      },
      writer,
    )
    expect(interrupted.done).toBe(true)
    expect(row).toMatchObject({ status: "failed", failure_code: "insufficient_gas" })
    expect(row.tx_hash).not.toBeNull()
    expect(await tokenBalance(recipient)).toBe(0n)
    expect(await chain().getTransactionCount({ address: wallet.address as Address })).toBe(0)
    const payer = await account(walletAccountId(wallet.wallet_id, asset))
    expect(payer.credits_posted - payer.debits_posted - payer.debits_pending).toBe(funding)
  })

  it("settles with a pool of one connection: no step holds one while it asks the pool for another", async () => {
    const wallet = await fundedWallet(49)
    await node.setBalance(wallet.address, 10n ** 19n)
    const recipient = testWallet(50).address
    const requested = await request(wallet, recipient, 1_000_000n)
    const pool = new pg.Pool({ connectionString: db.url, max: 1, connectionTimeoutMillis: 4_000 })
    pool.on("error", () => {})
    const errors: Array<unknown> = []
    const worker = await startTransferWorker(
      {
        pool,
        boss: harness.boss,
        writer: harness.writer,
        routes: harness.routes,
        signingKey: harness.signingKey,
      },
      {
        poll_interval_ms: 200,
        worker_count: 2,
        job_expire_seconds: 3,
        onError: (error) => errors.push(error),
      },
    )
    try {
      expect(await settled(requested.transfer_id)).toMatchObject({ status: "completed" })
    } finally {
      await worker.stop()
      await pool.end()
    }
    expect(errors.map(String)).toEqual([])
    expect(await tokenBalance(recipient)).toBe(1_000_000n)
  })

  it("hands a transfer whose chain this process does not run back to the queue, untouched, for the process that runs it", async () => {
    const wallet = await fundedWallet(47)
    await node.setBalance(wallet.address, 10n ** 19n)
    const recipient = testWallet(48).address
    const requested = await request(wallet, recipient, 1_000_000n)
    // A process that runs production chains only (the sandbox's run in another process).
    const errors: Array<unknown> = []
    await withWorker(
      () => new Promise((resolve) => setTimeout(resolve, 2_500)),
      chainRoutes({ production: new Map([["ethereum", harness.adapter]]) }),
      { onError: (error) => errors.push(error) },
    )
    expect(errors).toEqual([])
    expect(await loadRow(requested.transfer_id)).toMatchObject({
      status: "pending",
      tx_hash: null,
      failure_code: null,
      poll_count: 0,
    })
    // The process that runs it completes it.
    expect(await withWorker(() => settled(requested.transfer_id))).toMatchObject({ status: "completed" })
    expect(await tokenBalance(recipient)).toBe(1_000_000n)
  })

  it("settles a claimed failure in a process that does not run its chain: settling needs none", async () => {
    const wallet = await fundedWallet(51)
    const requested = await request(wallet, testWallet(52).address, 1_000_000n)
    // Given up (or refused) and claimed by a process that then stopped before settling it.
    await db.pool.query(
      "update platform.chain_transfers set failure_code = 'node_unavailable', failure_message = 'gave up' where transfer_id = $1",
      [requested.transfer_id],
    )
    const row = await withWorker(
      () => settled(requested.transfer_id),
      chainRoutes({ production: new Map([["ethereum", harness.adapter]]) }),
    )
    expect(row).toMatchObject({ status: "failed", failure_code: "node_unavailable" })
    const payer = await account(walletAccountId(wallet.wallet_id, asset))
    expect(payer.debits_pending).toBe(0n)
  })

  it("keeps a signed transfer's job going past the queue's retries while its node fails, and completes it when the node answers", async () => {
    const wallet = await fundedWallet(12)
    await node.setBalance(wallet.address, 10n ** 19n)
    const recipient = testWallet(24).address
    const before = await tokenBalance(recipient)
    let down = true
    const flaky: ChainAdapter = {
      ...harness.adapter,
      transactionStatus: (tx_hash) =>
        down ? Effect.die(new Error("the node is down")) : harness.adapter.transactionStatus(tx_hash),
    }
    const routes = chainRoutes({ sandbox: new Map([["ethereum", flaky]]) })
    const jobStates = async (transfer_id: string) =>
      (
        await db.pool.query<{ state: string }>(
          "select state from pgboss.job where name = $1 and data->>'transfer_id' = $2 order by created_on",
          [transfer_queue, transfer_id],
        )
      ).rows.map((job) => job.state)
    const row = await withWorker(
      async () => {
        // Requested under this worker's queue policy: one retry per job, at most 1 s apart.
        const requested = await request(wallet, recipient, 6_000_000n, null, "sandbox", { ...deps, routes })
        const broadcast = await until(requested.transfer_id, (current) => current.broadcast_at !== null)
        const deadline = Date.now() + settle_wait_ms_max
        while (!(await jobStates(requested.transfer_id)).includes("failed")) {
          if (Date.now() > deadline) throw new Error("the transfer's first job never ran out of retries")
          await new Promise((resolve) => setTimeout(resolve, 100))
        }
        expect((await loadRow(requested.transfer_id)).status).toBe("pending")
        down = false
        const done = await settled(requested.transfer_id)
        expect(done.tx_hash).toBe(broadcast.tx_hash)
        return done
      },
      routes,
      { step_retry_limit: 1, step_retry_delay_max_seconds: 1, sign_attempts_max: 1 },
    )
    expect(row.status).toBe("completed")
    expect(await tokenBalance(recipient)).toBe(before + 6_000_000n)
    expect((await outboxEvents(row.transfer_id)).map((event) => event.event_type)).toEqual([
      "payment.completed",
    ])
    expect((await jobStates(row.transfer_id)).length).toBeGreaterThanOrEqual(2)
  }, 180_000)
})
