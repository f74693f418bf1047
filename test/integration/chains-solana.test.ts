/**
 * Goal: the Solana adapter signs, broadcasts, confirms and reads SPL token (USDC-like, 6 decimals)
 * and SOL transfers on a real Solana runtime (LiteSVM, in process) through the same code path the
 * RPC transport uses: success with its proof, an on-chain failure, a sender without SOL for the fee,
 * an idempotent rebroadcast, balances, fee estimates and deposits listed exactly once.
 */
import {
  AccountRole,
  type AccountSignerMeta,
  type Address,
  generateKeyPairSigner,
  getAddressEncoder,
  type Instruction,
  type KeyPairSigner,
} from "@solana/kit"
import {
  getCreateAssociatedTokenIdempotentInstruction,
  getFreezeAccountInstruction,
  getInitializeMint2Instruction,
  getMintSize,
  getMintToInstruction,
  TOKEN_PROGRAM_ADDRESS,
} from "@solana-program/token"
import { Effect, Exit } from "effect"
import { LiteSVM } from "litesvm"
import { beforeAll, describe, expect, test } from "vitest"
import { associatedTokenAccount, makeSolanaAdapter } from "../../adapters/chains/solana/adapter.ts"
import {
  airdrop,
  type LiteSvmTransport,
  makeLiteSvmTransport,
} from "../../adapters/chains/solana/litesvm-transport.ts"
import { buildMessage, signMessage } from "../../adapters/chains/solana/transaction.ts"
import { deriveAddress, deriveSigningKey, type WalletKeyRef } from "../../domain/custody/derive.ts"
import type { ChainAdapter, ChainAsset } from "../../src/ports/chain.ts"

const seed = new Uint8Array(64).fill(42)
const sol = 1_000_000_000n
const usdc_unit = 1_000_000n
const finality_confirmations = 32

const wallet = (wallet_index: number): WalletKeyRef => ({ chain: "solana", tenant_index: 0, wallet_index })
const addressOf = (wallet_index: number) => deriveAddress(seed, wallet(wallet_index)) as Address
const keyOf = (wallet_index: number) => deriveSigningKey(seed, wallet(wallet_index))
const run = <A, E>(effect: Effect.Effect<A, E>) => Effect.runPromise(effect)
const runExit = <A, E>(effect: Effect.Effect<A, E>) => Effect.runPromiseExit(effect)

/** The System program's `CreateAccount`, written out here as the test's only need for that program. */
function createAccountInstruction(
  payer: KeyPairSigner,
  account: KeyPairSigner,
  lamports: bigint,
  space: number,
) {
  const data = new Uint8Array(52)
  const view = new DataView(data.buffer)
  view.setUint32(0, 0, true)
  view.setBigUint64(4, lamports, true)
  view.setBigUint64(12, BigInt(space), true)
  data.set(getAddressEncoder().encode(TOKEN_PROGRAM_ADDRESS), 20)
  const accounts: ReadonlyArray<AccountSignerMeta> = [
    { address: payer.address, role: AccountRole.WRITABLE_SIGNER, signer: payer },
    { address: account.address, role: AccountRole.WRITABLE_SIGNER, signer: account },
  ]
  const instruction: Instruction = {
    programAddress: "11111111111111111111111111111111" as Address,
    accounts,
    data,
  }
  return instruction
}

describe("Solana adapter on LiteSVM", () => {
  let svm: LiteSVM
  let transport: LiteSvmTransport
  let adapter: ChainAdapter
  let issuer: KeyPairSigner
  let usdc: ChainAsset
  let mint: Address
  let first_slot: bigint

  /** Sends a setup transaction paid and signed by the issuer; it must land and succeed. */
  const setup = async (instructions: ReadonlyArray<Instruction>) => {
    const { wire, signature } = await signMessage(
      buildMessage(issuer, instructions, await transport.latestBlockhash()),
    )
    expect(await transport.send(wire)).toEqual({ kind: "accepted" })
    expect((await transport.landed(signature))?.failed).toBe(false)
  }

  const mintTo = async (owner: Address, amount: bigint) => {
    const token = await associatedTokenAccount(owner, mint)
    await setup([
      getCreateAssociatedTokenIdempotentInstruction({ payer: issuer, ata: token, owner, mint }),
      getMintToInstruction({ mint, token, mintAuthority: issuer, amount }),
    ])
  }

  beforeAll(async () => {
    svm = new LiteSVM()
    transport = makeLiteSvmTransport(svm)
    adapter = makeSolanaAdapter(transport, { finality_confirmations })
    first_slot = await transport.slot()
    issuer = await generateKeyPairSigner()
    airdrop(svm, issuer.address, 10n * sol)
    const mint_signer = await generateKeyPairSigner()
    mint = mint_signer.address
    usdc = { kind: "token", contract: mint }
    const rent = svm.minimumBalanceForRentExemption(BigInt(getMintSize()))
    await setup([
      createAccountInstruction(issuer, mint_signer, rent, getMintSize()),
      getInitializeMint2Instruction({
        mint,
        decimals: 6,
        mintAuthority: issuer.address,
        freezeAuthority: issuer.address,
      }),
    ])
    // Wallet 0 sends, 1 receives, 2 has tokens but no SOL, 3 gets frozen.
    for (const index of [0, 3]) airdrop(svm, addressOf(index), sol)
    for (const index of [0, 2, 3]) await mintTo(addressOf(index), 100n * usdc_unit)
  })

  test("balances read SOL in lamports and the token in base units, 0 for a missing account", async () => {
    expect(await run(adapter.balance(addressOf(0), { kind: "native" }))).toBe(sol)
    expect(await run(adapter.balance(addressOf(0), usdc))).toBe(100n * usdc_unit)
    expect(await run(adapter.balance(addressOf(1), usdc))).toBe(0n)
    const exit = await runExit(adapter.balance("not-an-address", usdc))
    expect(Exit.isFailure(exit) && JSON.stringify(exit.cause)).toContain("InvalidChainAddress")
  })

  test("the token account of an owner is its associated token account, created or not", async () => {
    const tokenAccountOf = adapter.tokenAccountOf
    if (tokenAccountOf === undefined) return expect.fail("the Solana adapter names token accounts")
    for (const index of [0, 1]) {
      expect(await run(tokenAccountOf(addressOf(index), mint))).toBe(
        await associatedTokenAccount(addressOf(index), mint),
      )
    }
    const exit = await runExit(tokenAccountOf("not-an-address", mint))
    expect(Exit.isFailure(exit) && JSON.stringify(exit.cause)).toContain("InvalidChainAddress")
  })

  test("fee estimates are positive and include the rent of a recipient's new token account", async () => {
    const native = await run(
      adapter.estimateTransferFee(addressOf(0), {
        asset: { kind: "native" },
        to: addressOf(1),
        amount: sol / 10n,
      }),
    )
    const to_new = await run(
      adapter.estimateTransferFee(addressOf(0), { asset: usdc, to: addressOf(1), amount: 1n }),
    )
    const to_existing = await run(
      adapter.estimateTransferFee(addressOf(0), { asset: usdc, to: addressOf(2), amount: 1n }),
    )
    expect(native).toBe(5_000n)
    expect(to_existing).toBe(5_000n)
    expect(to_new).toBe(5_000n + svm.minimumBalanceForRentExemption(165n))
  })

  test("a token transfer lands with its proof, and rebroadcasting the same bytes moves nothing again", async () => {
    const intent = { asset: usdc, to: addressOf(1), amount: 25n * usdc_unit }
    const signed = await run(adapter.signTransfer(keyOf(0), intent))
    expect(signed.from).toBe(addressOf(0))
    expect(await run(adapter.transactionStatus(signed.tx_hash))).toEqual({
      status: "dropped",
      tx_hash: signed.tx_hash,
    })
    const slot = await run(adapter.blockNumber())

    expect(await run(adapter.broadcast(signed.raw))).toEqual({ tx_hash: signed.tx_hash })
    expect(await run(adapter.broadcast(signed.raw))).toEqual({ tx_hash: signed.tx_hash })

    const status = await run(adapter.transactionStatus(signed.tx_hash))
    expect(status).toEqual({
      status: "confirmed",
      proof: {
        tx_hash: signed.tx_hash,
        block_number: slot + 1n,
        block_hash: svm.latestBlockhash(),
        log_index: 1,
        confirmations: 1,
      },
    })
    expect(await run(adapter.balance(addressOf(0), usdc))).toBe(75n * usdc_unit)
    expect(await run(adapter.balance(addressOf(1), usdc))).toBe(25n * usdc_unit)
    // The fee and the new token account's rent, and not a lamport more: fee_max is exact here.
    expect(await run(adapter.balance(addressOf(0), { kind: "native" }))).toBe(sol - signed.fee_max)

    transport.advanceSlots(BigInt(finality_confirmations))
    expect((await run(adapter.transactionStatus(signed.tx_hash))).status).toBe("finalized")
  })

  test("a reference becomes a memo after the transfer: equal transfers with other references are other transactions", async () => {
    const intent = { asset: usdc, to: addressOf(2), amount: usdc_unit }
    const [plain, first, second] = await Promise.all([
      run(adapter.signTransfer(keyOf(0), intent)),
      run(adapter.signTransfer(keyOf(0), { ...intent, reference: "txn_first" })),
      run(adapter.signTransfer(keyOf(0), { ...intent, reference: "txn_second" })),
    ])
    expect(new Set([plain.tx_hash, first.tx_hash, second.tx_hash]).size).toBe(3)
    // A memo adds no signature: the fee is the same.
    expect(first.fee_max).toBe(plain.fee_max)
    expect(Buffer.from(first.raw.slice(2), "hex").toString("latin1")).toContain("txn_first")
    await run(adapter.broadcast(first.raw))
    const status = await run(adapter.transactionStatus(first.tx_hash))
    // The transfer keeps its instruction index (0: the recipient's account exists); the memo follows.
    expect(status.status === "confirmed" && status.proof.log_index).toBe(0)
    expect(await run(adapter.balance(addressOf(2), usdc))).toBe(101n * usdc_unit)
  })

  test("a SOL transfer lands, with no log index in its proof", async () => {
    const signed = await run(
      adapter.signTransfer(keyOf(0), { asset: { kind: "native" }, to: addressOf(1), amount: sol / 10n }),
    )
    await run(adapter.broadcast(signed.raw))
    const status = await run(adapter.transactionStatus(signed.tx_hash))
    expect(status.status === "confirmed" && status.proof.log_index).toBeNull()
    expect(await run(adapter.balance(addressOf(1), { kind: "native" }))).toBe(sol / 10n)
  })

  test("a transfer from a frozen token account is refused at signing, and reverts on chain if signed before", async () => {
    const intent = { asset: usdc, to: addressOf(1), amount: 10n * usdc_unit }
    const signed = await run(adapter.signTransfer(keyOf(3), intent))
    const token = await associatedTokenAccount(addressOf(3), mint)
    await setup([getFreezeAccountInstruction({ account: token, mint, owner: issuer })])

    const refused = await runExit(adapter.signTransfer(keyOf(3), intent))
    expect(Exit.isFailure(refused) && JSON.stringify(refused.cause)).toContain("TransferWouldRevert")

    const lamports_before = await run(adapter.balance(addressOf(3), { kind: "native" }))
    await run(adapter.broadcast(signed.raw))
    // In a block short of finality the failure is not decided yet (a fork could still replace it).
    const landed = await run(adapter.transactionStatus(signed.tx_hash))
    expect(landed.status === "confirmed" && landed.proof.log_index).toBeNull()
    transport.advanceSlots(BigInt(finality_confirmations))
    const status = await run(adapter.transactionStatus(signed.tx_hash))
    expect(status.status).toBe("reverted")
    expect(status.status === "reverted" && status.proof.log_index).toBeNull()
    expect(await run(adapter.balance(addressOf(3), usdc))).toBe(100n * usdc_unit)
    // A failed transaction still pays its fee (no rent: the recipient's account already exists).
    expect(await run(adapter.balance(addressOf(3), { kind: "native" }))).toBe(lamports_before - 5_000n)
  })

  test("a token account or a mint given as the recipient is refused before anything is signed", async () => {
    // Wallet 2's associated token account exists; the tokens would go to an account it owns.
    const token_account = await associatedTokenAccount(addressOf(2), mint)
    for (const to of [token_account, mint]) {
      const intent = { asset: usdc, to, amount: usdc_unit }
      for (const exit of [
        await runExit(adapter.estimateTransferFee(addressOf(0), intent)),
        await runExit(adapter.signTransfer(keyOf(0), intent)),
      ]) {
        expect(exit).toEqual(
          Exit.fail(
            expect.objectContaining({
              _tag: "TransferWouldRevert",
              reason: expect.stringContaining(`${to} is a token account`),
            }),
          ),
        )
      }
    }
    // Its owner is a wallet: the same intent to the owner signs.
    const signed = await run(
      adapter.signTransfer(keyOf(0), { asset: usdc, to: addressOf(2), amount: usdc_unit }),
    )
    expect(signed.from).toBe(addressOf(0))
  })

  test("a deployed program given as the recipient is refused before anything is signed", async () => {
    // The SPL Memo program (v1, owned by the first BPF loader) and the token program itself.
    for (const to of [
      "Memo1UhkJRfHyvLMcVucJwxXeuD728EqVDDwQDxFMNo",
      "TokenkegQfeZyiNwAJbNbGKPFXCWuBvf9Ss623VQ5DA",
    ]) {
      const exists = await transport.account(to as Address)
      expect(exists).not.toBeNull()
      expect(await runExit(adapter.signTransfer(keyOf(0), { asset: usdc, to, amount: usdc_unit }))).toEqual(
        Exit.fail(
          expect.objectContaining({
            _tag: "TransferWouldRevert",
            reason: expect.stringContaining(`${to} is a program`),
          }),
        ),
      )
    }
  })

  test("a sender without SOL for the fee gets a typed error and nothing is signed", async () => {
    const exit = await runExit(
      adapter.signTransfer(keyOf(2), { asset: usdc, to: addressOf(1), amount: usdc_unit }),
    )
    expect(exit).toEqual(
      Exit.fail(
        expect.objectContaining({
          _tag: "InsufficientFundsForFee",
          address: addressOf(2),
          required: 5_000n,
          available: 0n,
        }),
      ),
    )
  })

  test("bytes whose blockhash expired are refused as expired and the transaction reads dropped", async () => {
    const signed = await run(
      adapter.signTransfer(keyOf(0), { asset: usdc, to: addressOf(1), amount: usdc_unit }),
    )
    svm.expireBlockhash()
    const exit = await runExit(adapter.broadcast(signed.raw))
    expect(Exit.isFailure(exit) && JSON.stringify(exit.cause)).toContain("TransactionExpired")
    expect((await run(adapter.transactionStatus(signed.tx_hash))).status).toBe("dropped")
  })

  test("incoming transfers to watched addresses are listed once each, without mints or failed transfers", async () => {
    const to_block = await run(adapter.blockNumber())
    const query = {
      contract: mint,
      addresses: [addressOf(1), addressOf(1), addressOf(0)],
      from_block: first_slot,
      to_block,
    }
    const incoming = await run(adapter.incomingTransfers(query))
    expect(incoming).toEqual([
      expect.objectContaining({
        contract: mint,
        from: addressOf(0),
        to: addressOf(1),
        amount: 25n * usdc_unit,
      }),
    ])
    expect(incoming[0]?.proof.log_index).toBe(1)
    const too_wide = await runExit(adapter.incomingTransfers({ ...query, to_block: first_slot + 20_000n }))
    expect(Exit.isFailure(too_wide) && JSON.stringify(too_wide.cause)).toContain("QueryTooWide")
  })

  test("bytes that land between the adapter's first read and the node's refusal are a rebroadcast", async () => {
    const intent = { asset: { kind: "native" }, to: addressOf(6), amount: 1_000_000n } as const
    const signed = await run(adapter.signTransfer(keyOf(0), intent))
    await run(adapter.broadcast(signed.raw))
    // A worker restarted after the broadcast reads the chain just before the bytes land; the node
    // then refuses them (as a node may refuse bytes it already processed, for another reason).
    let reads = 0
    const lagging: LiteSvmTransport = new Proxy(transport, {
      get: (target, property, receiver) => {
        if (property === "landed")
          return (signature: Parameters<LiteSvmTransport["landed"]>[0]) =>
            reads++ === 0 ? Promise.resolve(null) : target.landed(signature)
        if (property === "send")
          return () => Promise.resolve({ kind: "rejected", reason: "Blockhash not found" })
        return Reflect.get(target, property, receiver)
      },
    })
    const before = await run(adapter.balance(addressOf(6), { kind: "native" }))
    expect(await run(makeSolanaAdapter(lagging, { finality_confirmations }).broadcast(signed.raw))).toEqual({
      tx_hash: signed.tx_hash,
    })
    expect(reads).toBe(2)
    expect(await run(adapter.balance(addressOf(6), { kind: "native" }))).toBe(before)
    // Bytes that never landed, refused the same way, are still refused.
    const other = await run(adapter.signTransfer(keyOf(0), { ...intent, amount: 2_000_000n }))
    const refused = await runExit(makeSolanaAdapter(lagging, { finality_confirmations }).broadcast(other.raw))
    expect(Exit.isFailure(refused) && JSON.stringify(refused.cause)).toContain("BroadcastRejected")
  })
})
