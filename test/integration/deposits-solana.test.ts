// Proves that SPL token transfers into custody addresses on the sandbox's Solana chain (LiteSVM in
// process, its USDC and USDT mints, no block clock: the test moves the slots) are credited exactly
// once, with real parts (PostgreSQL, the ledger writer with the deposit hook): not before the
// chain's finality depth (2 slots); once, however often and by however many watchers the chain is
// scanned; across a watcher restart; when the custody address is too busy for one adapter read;
// never for the faucet's MintTo, another mint's transfer, a transfer to an address that is not
// custody's, or a transfer that failed on chain (the custody token account frozen).
import { mnemonicToSeedSync } from "@scure/bip39"
import type { Address, Instruction } from "@solana/kit"
import {
  getCreateAssociatedTokenIdempotentInstruction,
  getRecoverNestedAssociatedTokenInstruction,
  getTransferCheckedInstruction,
} from "@solana-program/token"
import { Effect } from "effect"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { associatedTokenAccount, makeSolanaAdapter } from "../../adapters/chains/solana/adapter.ts"
import { buildMessage, signerFromKey, signMessage } from "../../adapters/chains/solana/transaction.ts"
import { deriveAddress, deriveSigningKey, type WalletKeyRef } from "../../domain/custody/derive.ts"
import type { Asset } from "../../domain/money/asset.ts"
import {
  type SolanaSandboxChain,
  solana_sandbox_finality_confirmations,
  startSolanaSandbox,
} from "../../src/chains/solana-sandbox.ts"
import type { WatchedChain } from "../../src/deposits/watcher.ts"
import type { ChainAdapter, ChainAsset } from "../../src/ports/chain.ts"
import { type DepositHarness, depositHarness } from "../support/deposits.ts"
import { test_mnemonic } from "../support/evm.ts"

const usdc: Asset = { code: "USDC@solana", symbol: "USDC", chain: "solana", decimals: 6 }
const depth = solana_sandbox_finality_confirmations
const seed = mnemonicToSeedSync(test_mnemonic, "")
/** Custody's keys are the tenant's (index 7); outside accounts derive under another index. */
const custodyRef = (wallet_index: number): WalletKeyRef => ({
  chain: "solana",
  tenant_index: 7,
  wallet_index,
})
const outsideRef = (wallet_index: number): WalletKeyRef => ({
  chain: "solana",
  tenant_index: 8,
  wallet_index,
})
const outside = deriveAddress(seed, outsideRef(0)) as Address
/** The outside account's USDC token account (set once the mints exist). */
let outsideAccount: Address

let harness: DepositHarness
let local: SolanaSandboxChain
let watched: WatchedChain
let usdc_mint: string
let usdt_mint: string
/** The outside sender's own software: another adapter on the same chain. */
let outsider: ChainAdapter

const run = <A, E>(effect: Effect.Effect<A, E>) => Effect.runPromise(effect)
const token = (contract: string): ChainAsset => ({ kind: "token", contract })

/** A custody wallet of the tenant on Solana. */
const custodyWallet = async (index: number) => {
  const address = deriveAddress(seed, custodyRef(index))
  const wallet_id = `wal_sol_deposit_${index}`
  await harness.custodyWallet("solana", wallet_id, address, index)
  return { wallet_id, address }
}

/** Signs a transfer from the outside account (to be broadcast now or later). */
const signFromOutside = (to: string, amount: bigint, contract = usdc_mint) =>
  run(outsider.signTransfer(deriveSigningKey(seed, outsideRef(0)), { asset: token(contract), to, amount }))

/** Sends `amount` of a mint from the outside account to `to`; it lands in a slot of its own. */
const sendFromOutside = async (to: string, amount: bigint, contract = usdc_mint) => {
  const signed = await signFromOutside(to, amount, contract)
  await run(outsider.broadcast(signed.raw))
  const landed = await local.transport.landed(signed.tx_hash as never)
  if (landed === null) throw new Error("the outside transfer landed")
  return { tx_hash: signed.tx_hash, slot: landed.slot, block_hash: landed.block_hash }
}

const depositRows = async () =>
  (await harness.db.pool.query("select * from platform.chain_deposits where chain = 'solana'")).rows

beforeAll(async () => {
  harness = await depositHarness("ten_deposits_solana")
  local = await startSolanaSandbox({ block_time_ms: 0 })
  usdc_mint = local.contracts.get("USDC") ?? ""
  usdt_mint = local.contracts.get("USDT") ?? ""
  outsider = makeSolanaAdapter(local.transport, { finality_confirmations: depth })
  // The outside account's tokens come from the faucet's MintTo (it tops up its SOL too).
  await local.fund(outside, "USDC", 1_000_000_000n)
  await local.fund(outside, "USDT", 1_000_000_000n)
  outsideAccount = await associatedTokenAccount(outside, usdc_mint as Address)
  // As src/main.ts watches the sandbox chain: no ignored sender (MintTo is no transfer).
  watched = {
    environment: "sandbox",
    chain: "solana",
    adapter: local.adapter,
    tokens: [{ asset: usdc, contract: usdc_mint }],
    finality_confirmations: depth,
    ignore_from: new Set(),
  }
})

afterAll(async () => {
  await local?.stop()
  await harness?.close()
})

describe("deposits (Solana)", () => {
  it("credits an outside transfer exactly once, only at the finality depth, however many watchers scan", async () => {
    const wallet = await custodyWallet(1)
    const amount = 25_000_000n
    const watcher = harness.newWatcher([watched])
    const sent = await sendFromOutside(wallet.address, amount)

    // In the newest slot: seen, not credited, however often it is scanned.
    for (let i = 0; i < 3; i++) {
      const reports = await watcher.scanOnce()
      expect(reports[0]).toMatchObject({ outcome: "scanned", credited: 0 })
    }
    expect((await harness.rowsOf(wallet.wallet_id)).map((row) => row.status)).toEqual(["seen"])
    expect(await harness.balanceOf(wallet.wallet_id, usdc)).toBe(0n)

    // One slot later it is `depth` deep: two watchers of two processes and repeated scans at once.
    local.transport.advanceSlots(BigInt(depth - 1))
    const other = harness.newWatcher([watched], harness.newWriter())
    const reports = await Promise.all([
      watcher.scanOnce(),
      other.scanOnce(),
      watcher.scanOnce(),
      other.scanOnce(),
    ])
    expect(reports.flat().reduce((sum, report) => sum + report.credited, 0)).toBe(1)
    local.transport.advanceSlots(3n)
    for (let i = 0; i < 3; i++) await Promise.all([watcher.scanOnce(), other.scanOnce()])

    const rows = await harness.rowsOf(wallet.wallet_id)
    expect(rows).toHaveLength(1)
    expect(rows[0]).toMatchObject({
      status: "credited",
      amount,
      token: "USDC@solana",
      token_contract: usdc_mint,
      from_address: outside,
      to_address: wallet.address,
      tx_hash: sent.tx_hash,
      block_number: sent.slot,
      block_hash: sent.block_hash,
      confirmations: depth,
    })
    expect(await harness.balanceOf(wallet.wallet_id, usdc)).toBe(amount)
    expect(await harness.ledgerCreditsOf(wallet.wallet_id, usdc)).toBe(1)
    const events = await harness.outboxOf(wallet.wallet_id)
    expect(events).toHaveLength(1)
    expect(events[0]).toMatchObject({
      deposit_id: rows[0]?.deposit_id,
      chain: "solana",
      token: "USDC",
      amount: "25.00",
      from_address: outside,
      to_address: wallet.address,
      tx_hash: sent.tx_hash,
      block_number: sent.slot.toString(),
      confirmations: depth,
    })
    await Promise.all([watcher.stop(), other.stop()])
    expect(harness.errors).toEqual([])
  })

  it("credits a transfer a program made into a custody address (a cross-program invocation), once", async () => {
    const wallet = await custodyWallet(11)
    const owner = wallet.address as Address
    const mint = usdc_mint as Address
    // The faucet's MintTo (no deposit) opens the wallet's token account and gives it SOL for fees.
    await local.fund(owner, "USDC", 1n)
    const custody_account = await associatedTokenAccount(owner, mint)
    // Someone sent tokens to the token account's address as if it were a wallet: they sit in the
    // associated token account of that token account ("nested").
    const nested = await associatedTokenAccount(custody_account, mint)
    const amount = 7_000_000n
    const send = async (
      key: WalletKeyRef,
      build: (signer: Awaited<ReturnType<typeof signerFromKey>>) => Instruction[],
    ) => {
      const signer = await signerFromKey(deriveSigningKey(seed, key))
      const { wire, signature } = await signMessage(
        buildMessage(signer, build(signer), await local.transport.latestBlockhash()),
      )
      expect(await local.transport.send(wire)).toEqual({ kind: "accepted" })
      return signature
    }
    await send(outsideRef(0), (signer) => [
      getCreateAssociatedTokenIdempotentInstruction({
        payer: signer,
        ata: nested,
        owner: custody_account,
        mint,
      }),
      getTransferCheckedInstruction({
        source: outsideAccount,
        mint,
        destination: nested,
        authority: signer,
        amount,
        decimals: 6,
      }),
    ])
    // The Associated Token Account program moves them into the wallet's token account: a transfer
    // the token program makes on its behalf, found only among the transaction's inner instructions.
    const recovered = await send(custodyRef(11), (signer) => [
      getRecoverNestedAssociatedTokenInstruction({
        nestedAssociatedAccountAddress: nested,
        nestedTokenMintAddress: mint,
        destinationAssociatedAccountAddress: custody_account,
        ownerAssociatedAccountAddress: custody_account,
        ownerTokenMintAddress: mint,
        walletAddress: signer,
      }),
    ])
    local.transport.advanceSlots(BigInt(depth + 1))
    const watcher = harness.newWatcher([watched])
    for (let i = 0; i < 3; i++) await watcher.scanOnce()
    const rows = await harness.rowsOf(wallet.wallet_id)
    expect(rows).toHaveLength(1)
    expect(rows[0]).toMatchObject({
      status: "credited",
      amount,
      tx_hash: recovered,
      to_address: wallet.address,
    })
    expect(await harness.balanceOf(wallet.wallet_id, usdc)).toBe(amount)
    expect(await harness.ledgerCreditsOf(wallet.wallet_id, usdc)).toBe(1)
    await watcher.stop()
    expect(harness.errors).toEqual([])
  })

  it("does not take the faucet's MintTo, another mint's transfer or a transfer elsewhere for a deposit", async () => {
    const wallet = await custodyWallet(2)
    const before = (await depositRows()).length
    const watcher = harness.newWatcher([watched])
    await local.fund(wallet.address, "USDC", 9_000_000n)
    await sendFromOutside(wallet.address, 4_000_000n, usdt_mint)
    await sendFromOutside(deriveAddress(seed, outsideRef(1)), 5_000_000n)
    local.transport.advanceSlots(BigInt(depth + 2))
    await watcher.scanOnce()
    await watcher.scanOnce()

    // The tokens are on chain, and nothing of them is a deposit.
    expect(await run(local.adapter.balance(wallet.address, token(usdc_mint)))).toBe(9_000_000n)
    expect(await run(local.adapter.balance(wallet.address, token(usdt_mint)))).toBe(4_000_000n)
    expect(await depositRows()).toHaveLength(before)
    expect(await harness.balanceOf(wallet.wallet_id, usdc)).toBe(0n)
    await watcher.stop()
    expect(harness.errors).toEqual([])
  })

  it("never credits a transfer that failed on chain (the custody token account frozen)", async () => {
    const wallet = await custodyWallet(3)
    const watcher = harness.newWatcher([watched])
    // Signed while it would succeed, then the issuer freezes the recipient's token account.
    const signed = await signFromOutside(wallet.address, 6_000_000n)
    await local.block(wallet.address, "USDC")
    await run(outsider.broadcast(signed.raw))
    expect((await local.transport.landed(signed.tx_hash as never))?.failed).toBe(true)
    for (let i = 0; i < 3; i++) {
      await watcher.scanOnce()
      local.transport.advanceSlots(1n)
    }
    await watcher.scanOnce()

    expect(await harness.rowsOf(wallet.wallet_id)).toEqual([])
    expect(await harness.balanceOf(wallet.wallet_id, usdc)).toBe(0n)
    expect(await harness.ledgerCreditsOf(wallet.wallet_id, usdc)).toBe(0)
    expect(await harness.outboxOf(wallet.wallet_id)).toEqual([])
    await watcher.stop()
    expect(harness.errors).toEqual([])
  })

  it("reads a custody address busier than one adapter read allows (over 1,000 transactions) in narrower ranges", async () => {
    const wallet = await custodyWallet(5)
    const watcher = harness.newWatcher([watched])
    await watcher.scanOnce()
    // 1,001 faucet mints reference the custody token account: more than the adapter reads at once.
    // A block between two of them: with the clock off, a blockhash would outlive its 150 slots.
    for (let i = 0; i < 1_001; i++) {
      await local.fund(wallet.address, "USDC", 1n)
      local.transport.advanceBlock()
    }
    const sent = await sendFromOutside(wallet.address, 12_000_000n)
    local.transport.advanceSlots(BigInt(depth))
    await watcher.scanOnce()

    expect(harness.errors).toEqual([])
    const rows = await harness.rowsOf(wallet.wallet_id)
    expect(rows.map((row) => [row.status, row.tx_hash, row.amount])).toEqual([
      ["credited", sent.tx_hash, 12_000_000n],
    ])
    expect(await harness.balanceOf(wallet.wallet_id, usdc)).toBe(12_000_000n)
    await watcher.stop()
  })

  it("loses and doubles nothing when the watcher (and its process's adapter) is replaced mid-way", async () => {
    const wallet = await custodyWallet(4)
    const first = harness.newWatcher([watched])
    await sendFromOutside(wallet.address, 1_000_000n)
    await first.scanOnce()
    expect((await harness.rowsOf(wallet.wallet_id)).map((row) => row.status)).toEqual(["seen"])
    await first.stop()

    // While no watcher runs: the first deposit deepens, a second one arrives and deepens too.
    await sendFromOutside(wallet.address, 2_000_000n)
    local.transport.advanceSlots(BigInt(depth))
    const restarted = {
      ...watched,
      adapter: makeSolanaAdapter(local.transport, { finality_confirmations: depth }),
    }
    const second = harness.newWatcher([restarted], harness.newWriter())
    await second.scanOnce()
    await second.scanOnce()

    const rows = await harness.rowsOf(wallet.wallet_id)
    expect(rows.map((row) => [row.status, row.amount])).toEqual([
      ["credited", 1_000_000n],
      ["credited", 2_000_000n],
    ])
    expect(await harness.balanceOf(wallet.wallet_id, usdc)).toBe(3_000_000n)
    expect(await harness.ledgerCreditsOf(wallet.wallet_id, usdc)).toBe(2)
    expect(await harness.outboxOf(wallet.wallet_id)).toHaveLength(2)
    await second.stop()
    expect(harness.errors).toEqual([])
  })
})
