/**
 * Goal: the platform's FunC jetton (contracts/ton/) keeps TEP-74's promises on the real TVM
 * (@ton/sandbox): the committed code is what the source compiles to; wallet addresses computed
 * locally are the minter's; mint, transfer with its notification and excess refund, burn; only the
 * owner spends and only the minter or a sibling wallet credits; a frozen owner can neither send nor
 * receive, and whatever it refuses returns to its sender; the supply always equals the sum of the
 * balances.
 */
import * as fs from "node:fs"
import { type Address, beginCell, type Cell, contractAddress, toNano } from "@ton/core"
import {
  Blockchain,
  type BlockchainTransaction,
  type SandboxContract,
  type TreasuryContract,
} from "@ton/sandbox"
import { beforeAll, describe, expect, test } from "vitest"
import {
  jetton_error,
  jetton_op,
  jettonBurnBody,
  jettonFreezeBody,
  jettonMintBody,
  jettonMinterInit,
  jettonTransferBody,
  jettonWalletAddress,
} from "../../adapters/chains/ton/jetton.ts"
import {
  compileTonJetton,
  serializeTonArtifact,
  ton_artifact_path,
} from "../../scripts/compile-ton-contracts.ts"

/** One transaction of a message chain, reduced to what the assertions read. */
interface Step {
  readonly on: string
  readonly op: number | null
  readonly bounced: boolean
  readonly exit_code: number | null
  readonly success: boolean
}

function steps(transactions: ReadonlyArray<BlockchainTransaction>): Array<Step> {
  return transactions.map((transaction) => {
    const inbound = transaction.inMessage
    const body = inbound?.body.beginParse()
    const bounced = inbound?.info.type === "internal" && inbound.info.bounced
    if (bounced) body?.skip(32)
    const op = body !== undefined && body.remainingBits >= 32 ? body.loadUint(32) : null
    const description = transaction.description
    const compute = description.type === "generic" ? description.computePhase : null
    const exit_code = compute !== null && compute.type === "vm" ? compute.exitCode : null
    const success =
      description.type === "generic" &&
      !description.aborted &&
      compute?.type === "vm" &&
      compute.success &&
      description.actionPhase?.success === true
    return { on: transaction.address.toString(16).padStart(64, "0"), op, bounced, exit_code, success }
  })
}

const hex = (address: Address) => address.hash.toString("hex")

describe("the platform jetton on @ton/sandbox", () => {
  let blockchain: Blockchain
  let admin: SandboxContract<TreasuryContract>
  let alice: SandboxContract<TreasuryContract>
  let bob: SandboxContract<TreasuryContract>
  let eve: SandboxContract<TreasuryContract>
  let minter: Address
  const content: Cell = beginCell().storeStringTail("sandbox USDT").endCell()

  const walletOf = (owner: Address) => jettonWalletAddress(owner, minter)
  const balanceOf = async (owner: Address) => {
    const wallet = walletOf(owner)
    if ((await blockchain.getContract(wallet)).accountState?.type !== "active") return 0n
    return (await blockchain.runGetMethod(wallet, "get_wallet_data")).stackReader.readBigNumber()
  }
  const supply = async () =>
    (await blockchain.runGetMethod(minter, "get_jetton_data")).stackReader.readBigNumber()
  const mint = (owner: Address, amount: bigint) =>
    admin.send({
      to: minter,
      value: toNano("0.1"),
      body: jettonMintBody({
        query_id: 1n,
        owner,
        amount,
        forward_ton_amount: 0n,
        response_destination: admin.address,
      }),
    })
  const transfer = (
    from: SandboxContract<TreasuryContract>,
    to: Address,
    amount: bigint,
    value = toNano("0.1"),
    forward_ton_amount = 1n,
  ) =>
    from.send({
      to: walletOf(from.address),
      value,
      body: jettonTransferBody({
        query_id: 42n,
        amount,
        destination: to,
        response_destination: from.address,
        forward_ton_amount,
      }),
    })
  const freeze = (owner: Address, frozen: boolean) =>
    admin.send({ to: minter, value: toNano("0.05"), body: jettonFreezeBody({ query_id: 7n, owner, frozen }) })
  const conserved = async () => {
    const owners = [alice, bob, eve].map((party) => party.address)
    const balances = await Promise.all(owners.map(balanceOf))
    expect(balances.reduce((sum, balance) => sum + balance, 0n)).toBe(await supply())
  }

  beforeAll(async () => {
    blockchain = await Blockchain.create()
    admin = await blockchain.treasury("admin")
    alice = await blockchain.treasury("alice")
    bob = await blockchain.treasury("bob")
    eve = await blockchain.treasury("eve")
    const init = jettonMinterInit(admin.address, content)
    minter = contractAddress(0, init)
    await admin.send({ to: minter, value: toNano("1"), init })
  })

  test("the committed build is byte for byte what the FunC source compiles to", async () => {
    const fresh = await compileTonJetton()
    expect(serializeTonArtifact(fresh)).toBe(fs.readFileSync(ton_artifact_path, "utf8"))
    const deployed = (await blockchain.getContract(minter)).accountState
    expect(deployed?.type === "active" && deployed.state.code?.hash().toString("hex")).toBe(
      fresh.contracts["jetton-minter"].code_hash,
    )
  })

  test("get_jetton_data: no supply, mintable, the admin, the content and the wallet code", async () => {
    const data = (await blockchain.runGetMethod(minter, "get_jetton_data")).stackReader
    expect(data.readBigNumber()).toBe(0n)
    expect(data.readBigNumber()).toBe(-1n)
    expect(data.readAddress().equals(admin.address)).toBe(true)
    expect(data.readCell().equals(content)).toBe(true)
    expect(data.readCell().hash().toString("hex")).toBe(
      JSON.parse(fs.readFileSync(ton_artifact_path, "utf8")).contracts["jetton-wallet"].code_hash,
    )
  })

  test("a wallet address computed locally is the one the minter's get_wallet_address returns", async () => {
    for (const owner of [alice.address, bob.address, minter]) {
      const answer = await blockchain.runGetMethod(minter, "get_wallet_address", [
        { type: "slice", cell: beginCell().storeAddress(owner).endCell() },
      ])
      expect(answer.stackReader.readAddress().equals(walletOf(owner))).toBe(true)
    }
  })

  test("the admin mints: the owner's wallet is deployed and credited, the supply grows, TON is refunded", async () => {
    const result = await mint(alice.address, 1_000_000n)
    const chain = steps(result.transactions)
    expect(chain.find((step) => step.on === hex(walletOf(alice.address)))).toMatchObject({
      op: jetton_op.internal_transfer,
      success: true,
    })
    expect(
      chain.find((step) => step.on === hex(admin.address) && step.op === jetton_op.excesses),
    ).toBeDefined()
    expect(await balanceOf(alice.address)).toBe(1_000_000n)
    expect(await supply()).toBe(1_000_000n)
    const wallet = (await blockchain.runGetMethod(walletOf(alice.address), "get_wallet_data")).stackReader
    wallet.readBigNumber()
    expect(wallet.readAddress().equals(alice.address)).toBe(true)
    expect(wallet.readAddress().equals(minter)).toBe(true)
  })

  test("anyone but the admin is refused minting and freezing", async () => {
    const forged = await eve.send({
      to: minter,
      value: toNano("0.1"),
      body: jettonMintBody({
        query_id: 1n,
        owner: eve.address,
        amount: 5n,
        forward_ton_amount: 0n,
        response_destination: eve.address,
      }),
    })
    expect(steps(forged.transactions).find((step) => step.on === hex(minter))).toMatchObject({
      exit_code: jetton_error.not_admin,
      success: false,
    })
    const freezing = await eve.send({
      to: minter,
      value: toNano("0.1"),
      body: jettonFreezeBody({ query_id: 1n, owner: alice.address, frozen: true }),
    })
    expect(steps(freezing.transactions).find((step) => step.on === hex(minter))?.exit_code).toBe(
      jetton_error.not_admin,
    )
    expect(await balanceOf(eve.address)).toBe(0n)
    await conserved()
  })

  test("a transfer credits the recipient, notifies them, refunds the excess to the sender", async () => {
    const result = await transfer(alice, bob.address, 300_000n)
    const chain = steps(result.transactions)
    expect(chain.find((step) => step.on === hex(walletOf(bob.address)))).toMatchObject({
      op: jetton_op.internal_transfer,
      success: true,
    })
    expect(chain.find((step) => step.on === hex(bob.address))).toMatchObject({
      op: jetton_op.transfer_notification,
    })
    expect(
      chain.find((step) => step.on === hex(alice.address) && step.op === jetton_op.excesses),
    ).toBeDefined()
    const notification = result.transactions.find(
      (transaction) => transaction.address.toString(16).padStart(64, "0") === hex(bob.address),
    )
    const body = notification?.inMessage?.body.beginParse()
    body?.skip(32)
    expect(body?.loadUintBig(64)).toBe(42n)
    expect(body?.loadCoins()).toBe(300_000n)
    expect(body?.loadAddress().equals(alice.address)).toBe(true)
    expect(await balanceOf(alice.address)).toBe(700_000n)
    expect(await balanceOf(bob.address)).toBe(300_000n)
    await conserved()
  })

  test("without a forward amount no notification is sent", async () => {
    const result = await transfer(alice, bob.address, 1n, toNano("0.1"), 0n)
    expect(steps(result.transactions).some((step) => step.on === hex(bob.address))).toBe(false)
    expect(await balanceOf(bob.address)).toBe(300_001n)
  })

  test("refused: someone else's wallet, more than the balance, too little TON, a forged internal transfer", async () => {
    const foreign = await eve.send({
      to: walletOf(alice.address),
      value: toNano("0.1"),
      body: jettonTransferBody({
        query_id: 1n,
        amount: 1n,
        destination: eve.address,
        response_destination: eve.address,
        forward_ton_amount: 0n,
      }),
    })
    expect(
      steps(foreign.transactions).find((step) => step.on === hex(walletOf(alice.address)))?.exit_code,
    ).toBe(jetton_error.not_owner)
    const too_much = await transfer(bob, alice.address, 300_002n)
    expect(
      steps(too_much.transactions).find((step) => step.on === hex(walletOf(bob.address)))?.exit_code,
    ).toBe(jetton_error.balance_too_low)
    const poor = await transfer(bob, alice.address, 1n, toNano("0.01"))
    expect(steps(poor.transactions).find((step) => step.on === hex(walletOf(bob.address)))?.exit_code).toBe(
      jetton_error.ton_too_low,
    )
    const forged_body = beginCell()
      .storeUint(jetton_op.internal_transfer, 32)
      .storeUint(0, 64)
      .storeCoins(1_000_000_000n)
      .storeAddress(eve.address)
      .storeAddress(eve.address)
      .storeCoins(0n)
      .storeBit(false)
      .endCell()
    const forged = await eve.send({ to: walletOf(bob.address), value: toNano("0.1"), body: forged_body })
    expect(steps(forged.transactions).find((step) => step.on === hex(walletOf(bob.address)))?.exit_code).toBe(
      jetton_error.not_trusted_sender,
    )
    expect(await balanceOf(alice.address)).toBe(699_999n)
    expect(await balanceOf(bob.address)).toBe(300_001n)
    await conserved()
  })

  test("a frozen owner cannot send, and what is sent to them bounces back to the sender's balance", async () => {
    await freeze(bob.address, true)
    expect(
      (await blockchain.runGetMethod(walletOf(bob.address), "is_frozen")).stackReader.readBigNumber(),
    ).toBe(-1n)

    const sending = await transfer(bob, alice.address, 1n)
    expect(
      steps(sending.transactions).find((step) => step.on === hex(walletOf(bob.address)))?.exit_code,
    ).toBe(jetton_error.frozen)
    const receiving = await transfer(alice, bob.address, 99_999n)
    const chain = steps(receiving.transactions)
    expect(chain.find((step) => step.on === hex(walletOf(bob.address)))).toMatchObject({
      exit_code: jetton_error.frozen,
      success: false,
    })
    expect(chain.find((step) => step.on === hex(walletOf(alice.address)) && step.bounced)).toMatchObject({
      op: jetton_op.internal_transfer,
      success: true,
    })
    const minting = await mint(bob.address, 5n)
    expect(steps(minting.transactions).find((step) => step.on === hex(minter) && step.bounced)?.success).toBe(
      true,
    )

    expect(await balanceOf(alice.address)).toBe(699_999n)
    expect(await balanceOf(bob.address)).toBe(300_001n)
    await conserved()

    await freeze(bob.address, false)
    await transfer(bob, alice.address, 1n)
    expect(await balanceOf(bob.address)).toBe(300_000n)
  })

  test("an address frozen before it ever held jettons: its wallet is deployed frozen", async () => {
    await freeze(eve.address, true)
    await transfer(alice, eve.address, 10n)
    expect(await balanceOf(eve.address)).toBe(0n)
    expect(await balanceOf(alice.address)).toBe(700_000n)
    await conserved()
  })

  test("a burn removes the amount from the wallet and the supply", async () => {
    const before = await supply()
    await alice.send({
      to: walletOf(alice.address),
      value: toNano("0.1"),
      body: jettonBurnBody({ query_id: 3n, amount: 100_000n, response_destination: alice.address }),
    })
    expect(await balanceOf(alice.address)).toBe(600_000n)
    expect(await supply()).toBe(before - 100_000n)
    await conserved()
  })
})
