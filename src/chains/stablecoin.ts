/**
 * The platform's stablecoin (contracts/PlatformStablecoin.sol) as compiled into
 * contracts/build/PlatformStablecoin.json, and its deployment on an EVM chain: tests and the
 * sandbox deploy it on each local chain.
 */
import { bytesToHex } from "@noble/hashes/utils.js"
import {
  type Abi,
  type Address,
  createPublicClient,
  createWalletClient,
  getAddress,
  type Hex,
  http,
} from "viem"
import { privateKeyToAccount } from "viem/accounts"
import artifact from "../../contracts/build/PlatformStablecoin.json" with { type: "json" }
import { assert } from "../../domain/assert.ts"
import type { SigningKey } from "../../domain/custody/derive.ts"

/** The contract's ABI (its functions, events and custom errors). */
export const stablecoin_abi = artifact.abi as unknown as Abi
/** Creation bytecode, exactly as committed. */
export const stablecoin_bytecode = artifact.bytecode as Hex

export interface StablecoinDeployment {
  readonly rpc_url: string
  /** Deploys and becomes the issuer: the one account that mints, burns, blocks and freezes. */
  readonly issuer: SigningKey
  readonly name: string
  readonly symbol: string
  readonly decimals: number
}

/**
 * Deploys the stablecoin and waits for its receipt; returns the contract's address.
 * @example const usdp = await deployStablecoin({ rpc_url, issuer, name: "Platform USD", symbol: "USDP", decimals: 6 })
 */
export async function deployStablecoin(deployment: StablecoinDeployment): Promise<Address> {
  assert(deployment.issuer.curve === "secp256k1", "an EVM key is secp256k1")
  const account = privateKeyToAccount(`0x${bytesToHex(deployment.issuer.exposeSecret())}`)
  const transport = http(deployment.rpc_url)
  const wallet = createWalletClient({ account, transport })
  const client = createPublicClient({ transport, pollingInterval: 50 })
  const hash = await wallet.deployContract({
    abi: stablecoin_abi,
    bytecode: stablecoin_bytecode,
    args: [deployment.name, deployment.symbol, deployment.decimals, account.address],
    chain: null,
  })
  const receipt = await client.waitForTransactionReceipt({ hash })
  assert(receipt.status === "success" && receipt.contractAddress != null, "the stablecoin deploys")
  return getAddress(receipt.contractAddress)
}

export interface StablecoinMint {
  readonly rpc_url: string
  readonly issuer: SigningKey
  readonly contract: Address
  readonly to: Address
  /** In the token's smallest unit. */
  readonly amount: bigint
}

/**
 * Sends a mint as the issuer and answers its transaction hash, once the node accepted it (so the
 * issuer's next mint takes the next nonce). One issuer must not send concurrently on one chain (each
 * call reads the pending nonce): callers serialise the sends; the receipts may be awaited together.
 * @example const hash = await sendStablecoinMint({ rpc_url, issuer, contract, to: "0x...", amount: 1_000_000n })
 */
export async function sendStablecoinMint(mint: StablecoinMint): Promise<Hex> {
  assert(mint.amount > 0n, "a mint amount is positive")
  const account = privateKeyToAccount(`0x${bytesToHex(mint.issuer.exposeSecret())}`)
  const wallet = createWalletClient({ account, transport: http(mint.rpc_url) })
  return await wallet.writeContract({
    address: mint.contract,
    abi: stablecoin_abi,
    functionName: "mint",
    args: [mint.to, mint.amount],
    chain: null,
  })
}

/** Waits until the mint `hash` is in a block, and checks that it succeeded; `signal` stops the wait. */
export async function confirmStablecoinMint(rpc_url: string, hash: Hex, signal?: AbortSignal): Promise<void> {
  const client = createPublicClient({ transport: http(rpc_url), pollingInterval: 50 })
  const receipt = await client.waitForTransactionReceipt({ hash, signal })
  assert(receipt.status === "success", "an issuer's mint succeeds")
}
