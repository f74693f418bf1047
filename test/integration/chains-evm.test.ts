// Proves the EVM chain adapter against a real node (anvil): fees, balances, a token and a native
// transfer confirmed with their proofs and finalized with depth, a transfer that reverts on chain
// (recipient blocked after signing), a token that answers false without reverting, a sender without gas refused before broadcast and by the node,
// a dropped transaction, idempotent rebroadcast (no double spend), a reused nonce, a stuck transfer
// replaced at its nonce, and deposits listed for watched addresses.

import { Effect } from "effect"
import { type Address, type Hex, parseTransaction } from "viem"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { makeEvmAdapter } from "../../adapters/chains/evm/adapter.ts"
import { type AnvilNode, startAnvil } from "../../src/chains/anvil.ts"
import { deployStablecoin } from "../../src/chains/stablecoin.ts"
import {
  type ChainAdapter,
  type ChainAsset,
  incoming_block_range_max,
  type TransactionStatus,
} from "../../src/ports/chain.ts"
import { callStablecoin, test_mnemonic, testWallet } from "../support/evm.ts"

const chain_id = 31337
const finality_confirmations = 3
const issuer = testWallet(0)
const alice = testWallet(1)
const bob = testWallet(2)
const carol = testWallet(3)
/** Tenant 1's wallets are not anvil dev accounts: they start without ETH. */
const penniless = testWallet(0, 1)
const depositor = testWallet(1, 1)

let node: AnvilNode
let adapter: ChainAdapter
let token: ChainAsset & { kind: "token" }
const native: ChainAsset = { kind: "native" }

const run = <A, E>(effect: Effect.Effect<A, E>) => Effect.runPromise(effect)
const failure = <A, E>(effect: Effect.Effect<A, E>) => Effect.runPromise(Effect.flip(effect))
const mint = (to: Address, amount: bigint) =>
  callStablecoin(node.rpc_url, token.contract as Address, issuer.key, "mint", [to, amount])
const issuerCall = (fn: string, args: ReadonlyArray<unknown>) =>
  callStablecoin(node.rpc_url, token.contract as Address, issuer.key, fn, args)
const tokenBalance = (address: string) => run(adapter.balance(address, token))
const mineBlocks = (count: number) => node.rpc("anvil_mine", [`0x${count.toString(16)}`])
const status = (tx_hash: string) => run(adapter.transactionStatus(tx_hash))
const mined_wait_ms_max = 5_000

/**
 * The status once the node has mined the transaction: anvil answers a broadcast before its instant
 * block is sealed, so for a moment the transaction is only seen. Bounded at five seconds.
 */
const minedStatus = async (tx_hash: string): Promise<TransactionStatus> => {
  const deadline = Date.now() + mined_wait_ms_max
  for (;;) {
    const current = await status(tx_hash)
    if (current.status !== "seen" || Date.now() > deadline) return current
    await new Promise((resolve) => setTimeout(resolve, 10))
  }
}

/** The receipt once the node has one (its instant block may not be sealed yet), within five seconds. */
const receiptOf = async <R>(tx_hash: Hex): Promise<R> => {
  const deadline = Date.now() + mined_wait_ms_max
  for (;;) {
    const receipt = (await node.rpc("eth_getTransactionReceipt", [tx_hash])) as R | null
    if (receipt !== null) return receipt
    if (Date.now() > deadline) throw new Error(`no receipt for ${tx_hash} within ${mined_wait_ms_max} ms`)
    await new Promise((resolve) => setTimeout(resolve, 10))
  }
}

/** Signs and broadcasts a transfer and returns its status once mined (instant mining). */
const transfer = async (from: typeof alice, to: Address, amount: bigint, asset: ChainAsset = token) => {
  const signed = await run(adapter.signTransfer(from.key, { asset, to, amount }))
  await run(adapter.broadcast(signed.raw))
  return { signed, status: await minedStatus(signed.tx_hash) }
}

const withoutAutomine = async (body: () => Promise<void>) => {
  await node.rpc("evm_setAutomine", [false])
  try {
    await body()
  } finally {
    await node.rpc("evm_setAutomine", [true])
  }
}

beforeAll(async () => {
  node = await startAnvil({ chain_id, mnemonic: test_mnemonic, account_count: 4 })
  adapter = makeEvmAdapter({ chain_id, rpc_url: node.rpc_url, finality_confirmations })
  const contract = await deployStablecoin({
    rpc_url: node.rpc_url,
    issuer: issuer.key,
    name: "Platform USD",
    symbol: "USDP",
    decimals: 6,
  })
  token = { kind: "token", contract }
  await mint(alice.address, 1_000_000_000n)
})
afterAll(async () => {
  await node?.stop()
})

describe("reads", () => {
  it("estimates a positive fee in the native unit for token and native transfers", async () => {
    const token_fee = await run(
      adapter.estimateTransferFee(alice.address, { asset: token, to: bob.address, amount: 1n }),
    )
    const native_fee = await run(
      adapter.estimateTransferFee(alice.address, { asset: native, to: bob.address, amount: 1n }),
    )
    expect(token_fee).toBeGreaterThan(0n)
    expect(native_fee).toBeGreaterThan(0n)
    expect(token_fee).toBeGreaterThan(native_fee)
  })

  it("reads native and token balances", async () => {
    await node.setBalance(depositor.address, 123_456_789n)
    expect(await run(adapter.balance(depositor.address, native))).toBe(123_456_789n)
    expect(await tokenBalance(depositor.address)).toBe(0n)
    expect(await tokenBalance(alice.address)).toBe(1_000_000_000n)
  })

  it("refuses addresses that are not EVM addresses, or carry a wrong checksum", async () => {
    const bad_checksum = alice.address.replace(/[a-f]/, (letter) => letter.toUpperCase())
    for (const address of ["", "0x1234", "T9yD14Nj9j7xAB4dbGeiX9h8unkKHxuWwb", bad_checksum]) {
      expect(await failure(adapter.balance(address, native))).toMatchObject({
        _tag: "InvalidChainAddress",
        address,
      })
    }
  })
})

describe("a transfer", () => {
  it("succeeds with its proof: block, hash, log index and growing confirmations to finality", async () => {
    const before = await tokenBalance(bob.address)
    const { signed, status: mined } = await transfer(alice, bob.address, 2_500_000n)
    expect(signed.from).toBe(alice.address)
    expect(mined.status).toBe("confirmed")
    if (mined.status !== "confirmed") return
    const receipt = (await node.rpc("eth_getTransactionReceipt", [signed.tx_hash])) as {
      blockNumber: string
      blockHash: string
      logs: ReadonlyArray<{ logIndex: string }>
    }
    expect(mined.proof).toEqual({
      tx_hash: signed.tx_hash,
      block_number: BigInt(receipt.blockNumber),
      block_hash: receipt.blockHash,
      log_index: Number(receipt.logs[0]?.logIndex),
      confirmations: 1,
    })
    expect(await tokenBalance(bob.address)).toBe(before + 2_500_000n)

    await mineBlocks(1)
    expect(await status(signed.tx_hash)).toMatchObject({ status: "confirmed", proof: { confirmations: 2 } })
    await mineBlocks(1)
    expect(await status(signed.tx_hash)).toEqual({
      status: "finalized",
      proof: { ...mined.proof, confirmations: 3 },
    })
  })

  it("moves the native coin, with no log index in its proof", async () => {
    const before = await run(adapter.balance(carol.address, native))
    const { status: mined } = await transfer(alice, carol.address, 10n ** 15n, native)
    expect(mined).toMatchObject({ status: "confirmed", proof: { log_index: null, confirmations: 1 } })
    expect(await run(adapter.balance(carol.address, native))).toBe(before + 10n ** 15n)
  })

  it("is reported reverted, once final, when the recipient is blocked between signing and broadcast", async () => {
    const signed = await run(adapter.signTransfer(alice.key, { asset: token, to: carol.address, amount: 7n }))
    await issuerCall("blockAccount", [carol.address])
    try {
      const before = await tokenBalance(alice.address)
      await run(adapter.broadcast(signed.raw))
      // In a block but short of finality, a revert is not decided yet: a reorganisation could still
      // order it where it succeeds.
      const mined = await minedStatus(signed.tx_hash)
      expect(mined).toMatchObject({
        status: "confirmed",
        proof: { tx_hash: signed.tx_hash, log_index: null },
      })
      await mineBlocks(finality_confirmations - 1)
      expect(await status(signed.tx_hash)).toMatchObject({
        status: "reverted",
        proof: { tx_hash: signed.tx_hash, log_index: null, confirmations: finality_confirmations },
      })
      expect(await tokenBalance(alice.address)).toBe(before)
      // Signing anew now fails in simulation, before anything is signed.
      const refused = await failure(
        adapter.signTransfer(alice.key, { asset: token, to: carol.address, amount: 7n }),
      )
      expect(refused._tag).toBe("TransferWouldRevert")
      // The contract's custom error, said in words rather than as a selector and raw arguments.
      expect((refused as { reason?: string }).reason).toBe(
        `execution reverted: AccountBlocked(${carol.address}): the token's issuer has blocked this account`,
      )
    } finally {
      await issuerCall("unblockAccount", [carol.address])
    }
  })

  it("is reported reverted, once final, when the token answers false and moves nothing", async () => {
    // A token whose every call returns 32 zero bytes (`transfer` answers false) without reverting
    // or logging: PUSH1 32 PUSH1 0 RETURN, deployed by an init code that returns those five bytes.
    const deployed = (await node.rpc("eth_sendTransaction", [
      { from: issuer.address, data: "0x6460206000f36000526005601bf3" },
    ])) as Hex
    const receipt = await receiptOf<{ contractAddress: Address }>(deployed)
    const liar: ChainAsset = { kind: "token", contract: receipt.contractAddress }
    const signed = await run(adapter.signTransfer(alice.key, { asset: liar, to: carol.address, amount: 7n }))
    await run(adapter.broadcast(signed.raw))
    expect(await minedStatus(signed.tx_hash)).toMatchObject({ status: "confirmed" })
    const onChain = (await node.rpc("eth_getTransactionReceipt", [signed.tx_hash])) as { status: Hex }
    expect(onChain.status).toBe("0x1")
    await mineBlocks(finality_confirmations - 1)
    expect(await status(signed.tx_hash)).toMatchObject({
      status: "reverted",
      proof: { tx_hash: signed.tx_hash, log_index: null, confirmations: finality_confirmations },
    })
    // Read as a deposit (with its log's index), a transaction's success is its receipt's: a
    // sender's contract may move tokens by a call of its own.
    expect(await run(adapter.transactionStatus(signed.tx_hash, 0))).toMatchObject({ status: "finalized" })
  })

  it("from a wallet without gas is refused before signing", async () => {
    await mint(penniless.address, 1_000n)
    const refused = await failure(
      adapter.signTransfer(penniless.key, { asset: token, to: bob.address, amount: 1_000n }),
    )
    expect(refused).toMatchObject({
      _tag: "InsufficientFundsForFee",
      address: penniless.address,
      available: 0n,
    })
    if (refused._tag === "InsufficientFundsForFee") expect(refused.required).toBeGreaterThan(0n)
  })

  it("whose sender lost its gas after signing is refused by the node at broadcast", async () => {
    await node.setBalance(penniless.address, 10n ** 18n)
    const signed = await run(
      adapter.signTransfer(penniless.key, { asset: token, to: bob.address, amount: 1_000n }),
    )
    await node.setBalance(penniless.address, 0n)
    const refused = await failure(adapter.broadcast(signed.raw))
    expect(refused).toMatchObject({
      _tag: "InsufficientFundsForFee",
      address: penniless.address,
      available: 0n,
    })
    expect(await status(signed.tx_hash)).toEqual({ status: "dropped", tx_hash: signed.tx_hash })
    expect(await tokenBalance(penniless.address)).toBe(1_000n)
  })

  it("is seen while in the pool, and dropped once the node discards it", async () => {
    await withoutAutomine(async () => {
      const signed = await run(
        adapter.signTransfer(alice.key, { asset: token, to: bob.address, amount: 11n }),
      )
      await run(adapter.broadcast(signed.raw))
      expect(await status(signed.tx_hash)).toEqual({ status: "seen", tx_hash: signed.tx_hash })
      await node.rpc("anvil_dropTransaction", [signed.tx_hash])
      await mineBlocks(1)
      expect(await status(signed.tx_hash)).toEqual({ status: "dropped", tx_hash: signed.tx_hash })
    })
  })
})

describe("rebroadcast", () => {
  it("of the same signed bytes, in the pool or mined, succeeds and spends once", async () => {
    const before = await tokenBalance(bob.address)
    let tx_hash = ""
    await withoutAutomine(async () => {
      const signed = await run(
        adapter.signTransfer(alice.key, { asset: token, to: bob.address, amount: 13n }),
      )
      tx_hash = signed.tx_hash
      expect(await run(adapter.broadcast(signed.raw))).toEqual({ tx_hash })
      expect(await run(adapter.broadcast(signed.raw))).toEqual({ tx_hash })
      await mineBlocks(1)
      expect(await run(adapter.broadcast(signed.raw))).toEqual({ tx_hash })
      await mineBlocks(1)
    })
    expect(await status(tx_hash)).toMatchObject({ status: "confirmed", proof: { confirmations: 2 } })
    expect(await tokenBalance(bob.address)).toBe(before + 13n)
  })

  it("of another transaction with a used nonce is refused as NonceTooLow", async () => {
    const intent = { asset: token, to: bob.address, amount: 1n } as const
    const first = await run(adapter.signTransfer(alice.key, intent))
    const rival = await run(
      adapter.signTransfer(alice.key, { ...intent, amount: 2n }, { nonce: first.nonce }),
    )
    expect(rival.tx_hash).not.toBe(first.tx_hash)
    await run(adapter.broadcast(first.raw))
    await minedStatus(first.tx_hash)
    expect(await failure(adapter.broadcast(rival.raw))).toEqual(
      expect.objectContaining({ _tag: "NonceTooLow", tx_hash: rival.tx_hash, nonce: first.nonce }),
    )
  })
})

describe("replacement", () => {
  it("takes the nonce of a transfer stuck in the pool, moving nothing, at fees above the original's by the bump", async () => {
    const before = await tokenBalance(bob.address)
    await withoutAutomine(async () => {
      const stuck = await run(adapter.signTransfer(alice.key, { asset: token, to: bob.address, amount: 17n }))
      await run(adapter.broadcast(stuck.raw))
      const replace = adapter.signReplacement
      if (replace === undefined) throw new Error("the EVM adapter replaces")
      const replacement = await run(replace(alice.key, stuck.raw))
      expect(replacement).toMatchObject({ from: alice.address, nonce: stuck.nonce })
      const [original, signed] = [
        parseTransaction(stuck.raw as Hex),
        parseTransaction(replacement.raw as Hex),
      ]
      expect(signed).toMatchObject({ to: alice.address.toLowerCase(), gas: 21_000n })
      expect(signed.value ?? 0n).toBe(0n)
      // At least 10 % above on both fees, as nodes require of a replacement.
      expect((signed.maxFeePerGas ?? 0n) * 10n).toBeGreaterThanOrEqual((original.maxFeePerGas ?? 0n) * 11n)
      expect((signed.maxPriorityFeePerGas ?? 0n) * 10n).toBeGreaterThanOrEqual(
        (original.maxPriorityFeePerGas ?? 0n) * 11n,
      )
      // The node takes it in place of the original.
      await run(adapter.broadcast(replacement.raw))
      await mineBlocks(1)
      expect(await status(replacement.tx_hash)).toMatchObject({ status: "confirmed" })
      expect(await status(stuck.tx_hash)).toEqual({ status: "dropped", tx_hash: stuck.tx_hash })
      expect(await failure(adapter.broadcast(stuck.raw))).toMatchObject({ _tag: "NonceTooLow" })
    })
    expect(await tokenBalance(bob.address)).toBe(before)
  })

  it("is refused, typed, to a sender that cannot pay for it", async () => {
    await mint(penniless.address, 1_000n)
    await node.setBalance(penniless.address, 10n ** 16n)
    const stuck = await run(
      adapter.signTransfer(penniless.key, { asset: token, to: bob.address, amount: 1n }),
    )
    await node.setBalance(penniless.address, 0n)
    const replace = adapter.signReplacement
    if (replace === undefined) throw new Error("the EVM adapter replaces")
    expect(await failure(replace(penniless.key, stuck.raw))).toMatchObject({
      _tag: "InsufficientFundsForFee",
      address: penniless.address,
      available: 0n,
    })
  })
})

describe("incoming transfers", () => {
  it("lists token transfers into watched addresses between two blocks, with proofs", async () => {
    const from_block = (await run(adapter.blockNumber())) + 1n
    const to_depositor = await transfer(alice, depositor.address, 40n)
    await transfer(alice, carol.address, 41n)
    const to_penniless = await transfer(alice, penniless.address, 42n)
    const to_block = await run(adapter.blockNumber())
    await mineBlocks(1)

    const incoming = await run(
      adapter.incomingTransfers({
        contract: token.contract,
        addresses: [depositor.address, penniless.address.toLowerCase()],
        from_block,
        to_block,
      }),
    )
    const proofOf = (mined: TransactionStatus) => (mined.status === "confirmed" ? mined.proof : null)
    expect(incoming).toEqual([
      {
        contract: token.contract,
        from: alice.address,
        to: depositor.address,
        amount: 40n,
        proof: { ...proofOf(to_depositor.status), confirmations: 4 },
      },
      {
        contract: token.contract,
        from: alice.address,
        to: penniless.address,
        amount: 42n,
        proof: { ...proofOf(to_penniless.status), confirmations: 2 },
      },
    ])
    const before = await run(
      adapter.incomingTransfers({
        contract: token.contract,
        addresses: [depositor.address],
        from_block: 0n,
        to_block: from_block - 1n,
      }),
    )
    expect(before.every((deposit) => deposit.proof.block_number < from_block)).toBe(true)
  })

  it("refuses a block range wider than its bound", async () => {
    const query = {
      contract: token.contract,
      addresses: [bob.address],
      from_block: 0n,
      to_block: incoming_block_range_max,
    }
    expect((await failure(adapter.incomingTransfers(query)))._tag).toBe("QueryTooWide")
  })
})
