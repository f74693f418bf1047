/**
 * Building, signing and reading Solana transactions: the one code path every transport shares.
 * Pure apart from the WebCrypto calls that import a key and sign; no network.
 */
import {
  AccountRole,
  type AccountSignerMeta,
  type Address,
  appendTransactionMessageInstructions,
  compileTransactionMessage,
  createKeyPairSignerFromPrivateKeyBytes,
  createTransactionMessage,
  getAddressDecoder,
  getAddressEncoder,
  getCompiledTransactionMessageDecoder,
  getCompiledTransactionMessageEncoder,
  getSignatureFromTransaction,
  getTransactionDecoder,
  getTransactionEncoder,
  type Instruction,
  type KeyPairSigner,
  pipe,
  type ReadonlyUint8Array,
  type Signature,
  setTransactionMessageFeePayerSigner,
  setTransactionMessageLifetimeUsingBlockhash,
  signTransactionMessageWithSigners,
  type TransactionSigner,
} from "@solana/kit"
import {
  getTransferCheckedInstructionDataDecoder,
  getTransferInstructionDataDecoder,
  TOKEN_PROGRAM_ADDRESS,
  TokenInstruction,
} from "@solana-program/token"
import { assert } from "../../../domain/assert.ts"
import type { SigningKey } from "../../../domain/custody/derive.ts"
import type { InnerInstructions, LatestBlockhash } from "./transport.ts"

const system_program_address = "11111111111111111111111111111111" as Address
/** The System program's `Transfer` instruction: a u32 discriminator 2 then the u64 lamports. */
const system_transfer_discriminator = 2
const system_transfer_data_size_bytes = 12

/**
 * A kit signer for a custody key; the seed is copied into a non-extractable WebCrypto key.
 * @example const signer = await signerFromKey(deriveSigningKey(seed, { chain: "solana", tenant_index: 0, wallet_index: 0 }))
 */
export async function signerFromKey(key: SigningKey): Promise<KeyPairSigner> {
  assert(key.curve === "ed25519", "a Solana key is ed25519")
  const signer = await createKeyPairSignerFromPrivateKeyBytes(key.exposeSecret())
  assert(
    signer.address === getAddressDecoder().decode(key.public_key),
    "the signer's address is the key's public key",
  )
  return signer
}

/**
 * The System program's lamport transfer, encoded here because its package is not a dependency.
 * @example systemTransferInstruction(signer, recipient, 1_000_000n)
 */
export function systemTransferInstruction(from: TransactionSigner, to: Address, amount: bigint): Instruction {
  const data = new Uint8Array(system_transfer_data_size_bytes)
  const view = new DataView(data.buffer)
  view.setUint32(0, system_transfer_discriminator, true)
  view.setBigUint64(4, amount, true)
  const source: AccountSignerMeta = { address: from.address, role: AccountRole.WRITABLE_SIGNER, signer: from }
  return {
    programAddress: system_program_address,
    accounts: [source, { address: to, role: AccountRole.WRITABLE }],
    data,
  }
}

/** The SPL Memo program (v2), loaded on every cluster and in LiteSVM. */
const memo_program_address = "MemoSq4gqABAXKb96qnH8TysNcWxMyWCqXgDLGmfcHr" as Address

/**
 * A memo carrying `text` (UTF-8), signed by nobody: the Memo program only logs it. A transfer's
 * memo names it on chain and keeps two otherwise equal transfers apart.
 * @example memoInstruction("txn_01a2...")
 */
export function memoInstruction(text: string): Instruction {
  return { programAddress: memo_program_address, accounts: [], data: new TextEncoder().encode(text) }
}

/** The System program's `CreateAccount`: a u32 discriminator 0, lamports, space, then the owner. */
const system_create_account_discriminator = 0
const system_create_account_data_size_bytes = 52

/**
 * The System program's `CreateAccount`: `payer` funds a new account `account` (which signs too) of
 * `space` bytes owned by `owner`. The sandbox creates its token mints with it.
 * @example systemCreateAccountInstruction(issuer, mint, rent, getMintSize(), TOKEN_PROGRAM_ADDRESS)
 */
export function systemCreateAccountInstruction(
  payer: TransactionSigner,
  account: TransactionSigner,
  lamports: bigint,
  space: number,
  owner: Address,
): Instruction {
  const data = new Uint8Array(system_create_account_data_size_bytes)
  const view = new DataView(data.buffer)
  view.setUint32(0, system_create_account_discriminator, true)
  view.setBigUint64(4, lamports, true)
  view.setBigUint64(12, BigInt(space), true)
  data.set(getAddressEncoder().encode(owner), 20)
  const accounts: ReadonlyArray<AccountSignerMeta> = [
    { address: payer.address, role: AccountRole.WRITABLE_SIGNER, signer: payer },
    { address: account.address, role: AccountRole.WRITABLE_SIGNER, signer: account },
  ]
  return { programAddress: system_program_address, accounts, data }
}

/** A version 0 message paid by `signer`, living as long as `lifetime`'s blockhash. */
export function buildMessage(
  signer: TransactionSigner,
  instructions: ReadonlyArray<Instruction>,
  lifetime: LatestBlockhash,
) {
  return pipe(
    createTransactionMessage({ version: 0 }),
    (message) => setTransactionMessageFeePayerSigner(signer, message),
    (message) =>
      setTransactionMessageLifetimeUsingBlockhash(
        { blockhash: lifetime.blockhash, lastValidBlockHeight: lifetime.last_valid_block_height },
        message,
      ),
    (message) => appendTransactionMessageInstructions(instructions, message),
  )
}

type Message = ReturnType<typeof buildMessage>

/** The compiled message's bytes, as the cluster prices them. */
export function messageBytes(message: Message): Uint8Array {
  return Uint8Array.from(getCompiledTransactionMessageEncoder().encode(compileTransactionMessage(message)))
}

/** Signs a message with the signers it names; returns the wire bytes and the first signature. */
export async function signMessage(
  message: Message,
): Promise<{ readonly wire: Uint8Array; readonly signature: Signature }> {
  const transaction = await signTransactionMessageWithSigners(message)
  const wire = Uint8Array.from(getTransactionEncoder().encode(transaction))
  return { wire, signature: getSignatureFromTransaction(transaction) }
}

/** What a wire transaction says about itself: its signature, fee payer and lifetime blockhash. */
export interface WireSummary {
  readonly signature: Signature
  readonly fee_payer: Address
  readonly lifetime_token: string
  readonly message_bytes: Uint8Array
}

/**
 * Reads a wire transaction's signature, fee payer and blockhash; null when the bytes are no
 * transaction (the caller reports that as its own error).
 * @example summarizeWire(signed.wire)?.signature
 */
export function summarizeWire(wire: Uint8Array): WireSummary | null {
  try {
    const transaction = getTransactionDecoder().decode(wire)
    const message = getCompiledTransactionMessageDecoder().decode(transaction.messageBytes)
    const fee_payer = message.staticAccounts[0]
    if (fee_payer === undefined || !("lifetimeToken" in message)) return null
    return {
      signature: getSignatureFromTransaction(transaction),
      fee_payer,
      lifetime_token: message.lifetimeToken,
      message_bytes: Uint8Array.from(transaction.messageBytes),
    }
  } catch {
    return null
  }
}

/** One SPL token transfer instruction found in a transaction. */
export interface TokenTransferInstruction {
  /**
   * Its place in the transaction: a top-level instruction's position (below 256: a transaction
   * has fewer), or for one a program invoked, 256 × (the top-level position + 1) + its position
   * among that instruction's inner instructions. Stable, so a deposit's id derived from it is too.
   */
  readonly instruction_index: number
  readonly source: Address
  readonly destination: Address
  /** The owner or delegate who signed for the source account. */
  readonly authority: Address
  /** Named by `TransferChecked`; null for the older `Transfer`, which names no mint. */
  readonly mint: Address | null
  readonly amount: bigint
}

/** Where an inner instruction's place starts: above every top-level position. */
export const inner_instruction_base = 256

/**
 * The SPL token transfers of a transaction: its top-level instructions first, then those other
 * programs made through cross-program invocation (`inner`, from the transaction's meta), each with
 * its place. `loaded_addresses` resolves lookup-table indices (writable first, then read-only).
 * @example tokenTransfersIn(landed.wire, landed.loaded_addresses, landed.inner_instructions)
 */
export function tokenTransfersIn(
  wire: Uint8Array,
  loaded_addresses: ReadonlyArray<Address>,
  inner: ReadonlyArray<InnerInstructions> = [],
): ReadonlyArray<TokenTransferInstruction> {
  const message = getCompiledTransactionMessageDecoder().decode(
    getTransactionDecoder().decode(wire).messageBytes,
  )
  // Version 1 messages lay instructions out differently; custody neither sends nor expects them yet.
  if (message.version === 1) return []
  const keys = [...message.staticAccounts, ...loaded_addresses]
  const found: Array<TokenTransferInstruction> = []
  const read = (
    instruction_index: number,
    program_index: number,
    account_indices: ReadonlyArray<number>,
    data: ReadonlyUint8Array | undefined,
  ) => {
    if (keys[program_index] !== TOKEN_PROGRAM_ADDRESS || data === undefined) return
    const accounts = account_indices.map((index) => keys[index])
    if (data[0] === TokenInstruction.TransferChecked) {
      const [source, mint, destination, authority] = accounts
      if (source === undefined || mint === undefined || destination === undefined || authority === undefined)
        return
      const { amount } = getTransferCheckedInstructionDataDecoder().decode(data)
      found.push({ instruction_index, source, destination, authority, mint, amount })
    } else if (data[0] === TokenInstruction.Transfer) {
      const [source, destination, authority] = accounts
      if (source === undefined || destination === undefined || authority === undefined) return
      const { amount } = getTransferInstructionDataDecoder().decode(data)
      found.push({ instruction_index, source, destination, authority, mint: null, amount })
    }
  }
  message.instructions.forEach((instruction, index) => {
    read(index, instruction.programAddressIndex, instruction.accountIndices ?? [], instruction.data)
  })
  for (const group of inner) {
    group.instructions.forEach((instruction, position) => {
      read(
        inner_instruction_base * (group.index + 1) + position,
        instruction.program_index,
        instruction.accounts,
        instruction.data,
      )
    })
  }
  return found
}
