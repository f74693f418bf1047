/**
 * Shared by the EVM tests: custody keys from the BIP-39 test mnemonic (anvil funds the same ones),
 * and calls to the stablecoin that report a revert by its custom error's name.
 */
import { bytesToHex } from "@noble/hashes/utils.js"
import { mnemonicToSeedSync } from "@scure/bip39"
import {
  type Address,
  BaseError,
  ContractFunctionRevertedError,
  createPublicClient,
  createWalletClient,
  http,
  type TransactionReceipt,
} from "viem"
import { privateKeyToAccount } from "viem/accounts"
import { deriveAddress, deriveSigningKey, type SigningKey } from "../../domain/custody/derive.ts"
import { stablecoin_abi } from "../../src/chains/stablecoin.ts"

export const test_mnemonic =
  "abandon abandon abandon abandon abandon abandon abandon abandon abandon abandon abandon about"
const test_seed = mnemonicToSeedSync(test_mnemonic, "")

/**
 * A custody wallet of tenant `tenant_index`. Anvil started with the test mnemonic funds tenant 0's
 * wallets 0..account_count-1 (its dev accounts are m/44'/60'/0'/0/i); other tenants start empty.
 */
export function testWallet(wallet_index: number, tenant_index = 0): { key: SigningKey; address: Address } {
  const ref = { chain: "ethereum", tenant_index, wallet_index } as const
  return { key: deriveSigningKey(test_seed, ref), address: deriveAddress(test_seed, ref) as Address }
}

/** Calls the stablecoin as `key`'s owner and waits for the receipt; a revert throws `Reverted`. */
export async function callStablecoin(
  rpc_url: string,
  contract: Address,
  key: SigningKey,
  function_name: string,
  args: ReadonlyArray<unknown>,
): Promise<TransactionReceipt> {
  const account = privateKeyToAccount(`0x${bytesToHex(key.exposeSecret())}`)
  const transport = http(rpc_url)
  const client = createPublicClient({ transport, pollingInterval: 50 })
  try {
    const { request } = await client.simulateContract({
      account,
      address: contract,
      abi: stablecoin_abi,
      functionName: function_name,
      args,
    })
    const hash = await createWalletClient({ account, transport }).writeContract({ ...request, chain: null })
    return await client.waitForTransactionReceipt({ hash })
  } catch (error) {
    const revert =
      error instanceof BaseError
        ? error.walk((cause) => cause instanceof ContractFunctionRevertedError)
        : null
    if (revert instanceof ContractFunctionRevertedError)
      throw new Reverted(revert.data?.errorName ?? "unknown")
    throw error
  }
}

/** A contract call reverted with the custom error `error_name`. */
export class Reverted extends Error {
  readonly error_name: string
  constructor(error_name: string) {
    super(`reverted with ${error_name}`)
    this.error_name = error_name
  }
}

/** Reads a stablecoin view function. */
export async function readStablecoin(
  rpc_url: string,
  contract: Address,
  function_name: string,
  args: ReadonlyArray<unknown> = [],
): Promise<unknown> {
  const client = createPublicClient({ transport: http(rpc_url) })
  return client.readContract({ address: contract, abi: stablecoin_abi, functionName: function_name, args })
}
