// Auditing what the chain holds against the ledger, end to end against the real platform process
// and one local anvil chain (SANDBOX_EVM_CHAINS=ethereum):
// - reconciliation: the faucet, a social payment between two wallets and an on-chain transfer keep
//   ledger liabilities and on-chain custody balances equal per chain and token ("matched"); a balance
//   changed behind the platform's back (the token's storage rewritten on anvil) is reported as drift
//   with the account involved, by the endpoint and in the log by the scheduled job, and the report
//   returns to "matched" once the chain is restored;
// - verification: `GET /api/v1/transactions/{id}/verify` reports a mismatch, check by check, when the
//   ledger's record of a transfer no longer says what the chain holds;
// - deposits: tokens sent on chain to a custody address by an outside account are credited to the
//   wallet exactly once, announced by a signed `deposit.confirmed` webhook, and reconcile.
import {
  type Address,
  createPublicClient,
  createWalletClient,
  encodeAbiParameters,
  erc20Abi,
  type Hex,
  http,
  keccak256,
  numberToHex,
} from "viem"
import { generatePrivateKey, privateKeyToAccount } from "viem/accounts"
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest"
import type {
  Balance,
  ChainInfo,
  ChainTransfer,
  Identity,
  ReconciliationReport,
  TransactionVerification,
  Wallet,
} from "../../src/http/api.ts"
import { expectOk } from "../support/api-expect.ts"
import { createWallet } from "../support/api-fixtures.ts"
import {
  type ApiClient,
  type RunningPlatform,
  registerTenant,
  startPlatform,
} from "../support/platform-process.ts"
import { startWebhookReceiver, type WebhookReceiver } from "../support/webhook-receiver.ts"

type Report = typeof ReconciliationReport.Type
type TransferView = typeof ChainTransfer.Type

/** Waits return as soon as the chain is done; the bound only matters on a slow, busy host. */
const completion_wait_ms_max = 60_000
// Tests that wait on chains more than once may take several such bounds on a slow host.
vi.setConfig({ testTimeout: 180_000 })

const secret = "whsec_audit_e2e_secret"

let platform: RunningPlatform
let receiver: WebhookReceiver
let client: ApiClient
let payer: typeof Wallet.Type
let payee: typeof Wallet.Type
let usdc: Address
let rpc_url: string

const sandboxRpcUrl = (output: string): string => {
  const match = /"sandbox chain running".*?"rpc_url":"([^"]+)"/.exec(output)
  if (match?.[1] === undefined) throw new Error(`no sandbox chain in the platform's log:\n${output}`)
  return match[1]
}

const rpc = async (method: string, params: ReadonlyArray<unknown>): Promise<unknown> => {
  const response = await fetch(rpc_url, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ jsonrpc: "2.0", id: 1, method, params }),
  })
  const body = (await response.json()) as { result?: unknown; error?: unknown }
  if (body.error !== undefined) throw new Error(`${method}: ${JSON.stringify(body.error)}`)
  return body.result
}

const tokenBalance = (owner: Address) =>
  createPublicClient({ transport: http(rpc_url) }).readContract({
    address: usdc,
    abi: erc20Abi,
    functionName: "balanceOf",
    args: [owner],
  })

/** The storage slot of `balanceOf[owner]`, found by trying the first slots of the token's layout. */
const balanceSlot = async (owner: Address): Promise<Hex> => {
  const balance = await tokenBalance(owner)
  expect(balance).toBeGreaterThan(0n)
  for (let slot = 0n; slot < 16n; slot++) {
    const key = keccak256(encodeAbiParameters([{ type: "address" }, { type: "uint256" }], [owner, slot]))
    if (BigInt(String(await rpc("eth_getStorageAt", [usdc, key, "latest"]))) === balance) return key
  }
  throw new Error("balanceOf is not in the first 16 slots")
}

const setTokenBalance = async (owner: Address, value: bigint) => {
  await rpc("anvil_setStorageAt", [usdc, await balanceSlot(owner), numberToHex(value, { size: 32 })])
  expect(await tokenBalance(owner)).toBe(value)
}

const reconcileNow = async () =>
  expectOk(await client.post<{ data: ReadonlyArray<Report> }>("/api/v2/reconciliation/runs", {})).data

const group = (reports: ReadonlyArray<Report>, token: string) => {
  const found = reports.find((report) => report.chain === "ethereum" && report.token === token)
  expect(found, `a report for ${token} on ethereum`).toBeDefined()
  return found as Report
}

const waitCompleted = async (transfer: TransferView): Promise<TransferView> => {
  const started = Date.now()
  let current = transfer
  while (current.status === "pending" && Date.now() - started < completion_wait_ms_max) {
    await new Promise((resolve) => setTimeout(resolve, 200))
    current = expectOk(await client.get<TransferView>(`/api/v2/transfers/${transfer.transaction_id}`))
  }
  expect(current.status).toBe("completed")
  return current
}

beforeAll(async () => {
  receiver = await startWebhookReceiver(secret)
  platform = await startPlatform({
    SANDBOX_EVM_CHAINS: "ethereum",
    RECONCILIATION_INTERVAL_SECONDS: "1",
    LOG_LEVEL: "info",
  })
  rpc_url = sandboxRpcUrl(platform.output())
  ;({ client } = await registerTenant(platform.url))
  expectOk(
    await client.post("/api/v1/webhooks", { url: receiver.url, events: ["deposit.confirmed"], secret }),
    201,
  )
  const chains = expectOk(await client.get<{ data: ReadonlyArray<typeof ChainInfo.Type> }>("/api/v2/chains"))
  const ethereum = chains.data.find((chain) => chain.chain === "ethereum")
  usdc = ethereum?.tokens.find((token) => token.token === "USDC")?.contract_address as Address
  payer = await createWallet(client, "ethereum", "payer")
  payee = await createWallet(client, "ethereum", "payee")
})

afterAll(async () => {
  await platform?.stop()
  await receiver?.close()
})

describe("reconciliation of ledger liabilities with on-chain custody balances", () => {
  it("matches after the faucet, a social payment between wallets and an on-chain transfer", async () => {
    expect(
      expectOk(await client.get<{ data: ReadonlyArray<Report> }>("/api/v2/reconciliation")).data,
    ).toEqual(expect.any(Array))
    expectOk(
      await client.post("/api/v1/sandbox/faucet", {
        wallet_id: payer.wallet_id,
        token: "USDC",
        amount: "100",
      }),
    )
    const funded = group(await reconcileNow(), "USDC")
    expect(funded).toMatchObject({
      status: "matched",
      ledger_balance: "100.00",
      on_chain_balance: "100.00",
      difference: "0.00",
      drift: "0.00",
      drift_since: null,
    })
    expect(funded.accounts).toContainEqual({
      account_id: `${payer.wallet_id}:USDC@ethereum`,
      kind: "wallet",
      wallet_id: payer.wallet_id,
      address: payer.address,
      ledger_balance: "100.00",
      on_chain_balance: "100.00",
    })
    expect(funded.accounts).toContainEqual({
      account_id: `${payee.wallet_id}:USDC@ethereum`,
      kind: "wallet",
      wallet_id: payee.wallet_id,
      address: payee.address,
      ledger_balance: "0.00",
      on_chain_balance: "0.00",
    })
    expect(group(await reconcileNow(), "USDT")).toMatchObject({ status: "matched", ledger_balance: "0.00" })

    // A social payment moves money between ledger accounts only: per account the two sides now
    // differ, per chain and token they still agree.
    const identity = expectOk(
      await client.post<typeof Identity.Type>("/api/v1/identities", {
        wallet_id: payee.wallet_id,
        kind: "email",
        value: "audit-payee@example.com",
      }),
      201,
    )
    expectOk(
      await client.post("/api/social-payments/pay", {
        recipient: identity.value,
        amount: "10",
        token: "USDC",
        from_wallet: payer.wallet_id,
      }),
    )
    const transfer = expectOk(
      await client.post<TransferView>("/api/v2/transfers", {
        from_wallet: payer.wallet_id,
        to_address: privateKeyToAccount(generatePrivateKey()).address,
        amount: "25",
        token: "USDC",
        chain: "ethereum",
      }),
      202,
    )
    await waitCompleted(transfer)
    const settled = group(await reconcileNow(), "USDC")
    expect(settled).toMatchObject({ status: "matched", ledger_balance: "75.00", on_chain_balance: "75.00" })
    const byAccount = new Map(settled.accounts.map((account) => [account.account_id, account]))
    // 100 - 10 - 0.03 (payment fee) - 25 - 0.075 (transfer fee)
    expect(byAccount.get(`${payer.wallet_id}:USDC@ethereum`)).toMatchObject({
      ledger_balance: "64.895",
      on_chain_balance: "75.00",
    })
    expect(byAccount.get(`${payee.wallet_id}:USDC@ethereum`)).toMatchObject({
      ledger_balance: "10.00",
      on_chain_balance: "0.00",
    })
    expect(byAccount.get("fees:USDC@ethereum")).toMatchObject({
      kind: "fee_revenue",
      ledger_balance: "0.105",
    })
  })

  it("reports drift with the account involved, in the endpoint and the log, until the chain is restored", async () => {
    const before = await tokenBalance(payer.address as Address)
    await setTokenBalance(payer.address as Address, before - 1_500_000n)
    const drifting = group(await reconcileNow(), "USDC")
    expect(drifting).toMatchObject({
      status: "drift",
      ledger_balance: "75.00",
      on_chain_balance: "73.50",
      difference: "-1.50",
      drift: "-1.50",
    })
    expect(drifting.drift_since).not.toBeNull()
    expect(drifting.accounts).toContainEqual(
      expect.objectContaining({ address: payer.address, on_chain_balance: "73.50" }),
    )
    const latest = expectOk(await client.get<{ data: ReadonlyArray<Report> }>("/api/v2/reconciliation")).data
    expect(group(latest, "USDC")).toMatchObject({ status: "drift", drift: "-1.50" })

    // The scheduled job (every second here) logs the drift with the tenant and the accounts.
    const driftLine = () =>
      platform
        .output()
        .split("\n")
        .find((entry) => entry.includes("reconciliation drift") && entry.includes(payer.address))
    const deadline = Date.now() + 30_000
    while (driftLine() === undefined && Date.now() < deadline)
      await new Promise((resolve) => setTimeout(resolve, 200))
    const line = driftLine()
    expect(line).toBeDefined()
    expect(line).toContain(payer.address)
    expect(line).toContain('"drift":"-1.50"')
    // With the stored report's dates: since when it drifts, and when it last matched.
    expect(line).toContain(`"drift_since":"${drifting.drift_since}"`)
    expect(line).toMatch(/"last_matched_at":"\d{4}-/)

    await setTokenBalance(payer.address as Address, before)
    expect(group(await reconcileNow(), "USDC")).toMatchObject({ status: "matched", drift_since: null })
  })
})

describe("GET /api/v1/transactions/{id}/verify finds a mismatch", () => {
  it("flags each field the ledger's record no longer shares with the chain", async () => {
    const recipient = privateKeyToAccount(generatePrivateKey()).address
    const transfer = await waitCompleted(
      expectOk(
        await client.post<TransferView>("/api/v2/transfers", {
          from_wallet: payer.wallet_id,
          to_address: recipient,
          amount: "2",
          token: "USDC",
          chain: "ethereum",
        }),
        202,
      ),
    )
    const verify = async () =>
      expectOk(
        await client.get<typeof TransactionVerification.Type>(
          `/api/v1/transactions/${transfer.transaction_id}/verify`,
        ),
      )
    expect(await verify()).toMatchObject({ matches: true })
    const { pool } = platform.database
    const tamper = (sql: string) => pool.query(sql, [transfer.transaction_id])

    await tamper("update platform.chain_transfers set amount = amount + 1 where transfer_id = $1")
    expect(await verify()).toMatchObject({
      matches: false,
      checks: { amount: false, token: true, sender: true, receiver: true },
    })
    await tamper("update platform.chain_transfers set amount = amount - 1 where transfer_id = $1")

    const elsewhere = privateKeyToAccount(generatePrivateKey()).address
    await pool.query("update platform.chain_transfers set to_address = $2 where transfer_id = $1", [
      transfer.transaction_id,
      elsewhere,
    ])
    // The Transfer log is looked up among the transfers into the recorded receiver: none is there.
    expect(await verify()).toMatchObject({ matches: false, checks: { receiver: false } })
    await pool.query("update platform.chain_transfers set to_address = $2 where transfer_id = $1", [
      transfer.transaction_id,
      recipient,
    ])
    expect(await verify()).toMatchObject({ matches: true })
  })
})

describe("deposits from outside the platform", () => {
  it("credits a token transfer into a custody address exactly once, with a deposit.confirmed webhook", async () => {
    const outsider = privateKeyToAccount(generatePrivateKey())
    await rpc("anvil_setBalance", [outsider.address, numberToHex(10n ** 19n)])
    // The outsider gets its tokens from the platform: an on-chain transfer out of the payer's wallet.
    await waitCompleted(
      expectOk(
        await client.post<TransferView>("/api/v2/transfers", {
          from_wallet: payer.wallet_id,
          to_address: outsider.address,
          amount: "5",
          token: "USDC",
          chain: "ethereum",
        }),
        202,
      ),
    )
    const usdcOf = async (wallet_id: string) =>
      expectOk(await client.get<typeof Balance.Type>(`/api/v1/wallets/${wallet_id}/balance`)).tokens.find(
        (token) => token.token === "USDC",
      )?.amount
    expect(await usdcOf(payee.wallet_id)).toBe("10.00")

    const sender = createWalletClient({ account: outsider, transport: http(rpc_url) })
    const tx_hash = await sender.writeContract({
      address: usdc,
      abi: erc20Abi,
      functionName: "transfer",
      args: [payee.address as Address, 3_250_000n],
      chain: null,
    })
    const webhook = await receiver.waitFor(
      (request) => request.body.event_type === "deposit.confirmed" && request.body.data.tx_hash === tx_hash,
      completion_wait_ms_max,
    )
    expect(webhook.status).toBe(200)
    expect(webhook.body.data).toMatchObject({
      wallet_id: payee.wallet_id,
      chain: "ethereum",
      token: "USDC",
      amount: "3.25",
      tx_hash,
    })
    expect(String(webhook.body.data.from_address).toLowerCase()).toBe(outsider.address.toLowerCase())
    expect(await usdcOf(payee.wallet_id)).toBe("13.25")

    // Scans keep running every second: the deposit stays credited once.
    await new Promise((resolve) => setTimeout(resolve, 3_000))
    expect(await usdcOf(payee.wallet_id)).toBe("13.25")
    expect(
      receiver.received.filter(
        (request) => request.body.event_type === "deposit.confirmed" && request.body.data.tx_hash === tx_hash,
      ),
    ).toHaveLength(1)
    expect(group(await reconcileNow(), "USDC")).toMatchObject({ status: "matched" })
  })
})

describe("the sandbox faucet under a burst", () => {
  it("credits 30 concurrent calls in seconds, each minted once: the chain holds exactly what the ledger owes", async () => {
    // Mints waited for their receipts one after the other, a block (1 s) each: past the 20 s
    // deadline the rest were answered 503 "nothing was credited" and minted all the same (drift).
    const { client: tenant } = await registerTenant(platform.url)
    const wallets = await Promise.all(
      ["burst-usdc", "burst-usdt"].map(async (external_id) =>
        expectOk(
          await tenant.post<typeof Wallet.Type>("/api/v1/wallets", {
            external_id,
            label: external_id,
            chain: "ethereum",
          }),
          201,
        ),
      ),
    )
    const answers = await Promise.all(
      Array.from({ length: 30 }, (_, i) =>
        tenant.post("/api/v1/sandbox/faucet", {
          wallet_id: wallets[i % 2]?.wallet_id,
          token: i % 2 === 0 ? "USDC" : "USDT",
          amount: "1.5",
        }),
      ),
    )
    expect(answers.map((answer) => answer.status)).toEqual(Array(30).fill(200))
    const reports = expectOk(
      await tenant.post<{ data: ReadonlyArray<Report> }>("/api/v2/reconciliation/runs", {}),
    ).data
    for (const token of ["USDC", "USDT"]) {
      expect(reports.find((report) => report.chain === "ethereum" && report.token === token)).toMatchObject({
        status: "matched",
        ledger_balance: "22.50",
        on_chain_balance: "22.50",
      })
    }
  })
})
