/**
 * Custody key derivation: one BIP-39 master seed per environment yields the key and the address of
 * every wallet. Pure: no I/O, no clock, no randomness.
 *
 * Paths (' marks a hardened segment):
 * - evm:    m/44'/60'/{tenant_index}'/0/{wallet_index}  BIP-32 secp256k1, EIP-55 hex address
 * - tron:   m/44'/195'/{tenant_index}'/0/{wallet_index} BIP-32 secp256k1, base58check `T...` address
 * - solana: m/44'/501'/{tenant_index}'/{wallet_index}'  SLIP-0010 ed25519, base58 public key
 * - ton:    m/44'/607'/{tenant_index}'/{wallet_index}'  SLIP-0010 ed25519, wallet v4R2 address
 *
 * TON has no single BIP-44 convention: TON's own wallets (Tonkeeper, Tonhub) derive the key from a
 * TON-specific mnemonic with no path at all, Trust Wallet uses m/44'/607'/0' and Ledger a six-level
 * path. Custody follows the Solana shape with TON's registered coin type 607, all hardened as
 * ed25519 requires; the derivation itself is checked against Trust Wallet's published vector.
 * The address is that of the standard wallet contract v4R2 (wallet id 698983191, the default for
 * workchain 0) holding the public key, in the user-friendly, URL-safe, non-bounceable form (`UQ...`)
 * that wallets show for receiving: a transfer to a wallet not yet deployed must not bounce back.
 * v4R2 rather than v5R1: it is the version every exchange and wallet supports, and a change of
 * version changes every address, so it is chosen once.
 *
 * The tenant is the BIP-44 account, hardened, so that one tenant's account-level key never reveals
 * another tenant's keys. Every EVM chain shares coin type 60, as wallets do: one tenant's wallet has
 * the same address on Ethereum, Polygon and the rest, and deposits are told apart by chain.
 */
import { ed25519 } from "@noble/curves/ed25519.js"
import { secp256k1 } from "@noble/curves/secp256k1.js"
import { hmac } from "@noble/hashes/hmac.js"
import { sha256, sha512 } from "@noble/hashes/sha2.js"
import { keccak_256 } from "@noble/hashes/sha3.js"
import { bytesToHex, concatBytes, utf8ToBytes } from "@noble/hashes/utils.js"
import { base58, createBase58check } from "@scure/base"
import { HDKey } from "@scure/bip32"
import { Address, beginCell, Cell, contractAddress } from "@ton/core"
import { assert, assertNever } from "../assert.ts"

/** The EVM chains custody serves; all share one key per wallet. */
export const evmChains = ["ethereum", "polygon", "bsc", "arbitrum", "optimism", "base", "avalanche"] as const
export type EvmChain = (typeof evmChains)[number]
/** Every chain custody derives addresses for. */
export type CustodyChain = EvmChain | "tron" | "solana" | "ton"

/**
 * A chain family: the chains that share a curve, a derivation standard, a BIP-44 coin type and an
 * address format. Adding a family (TON) means adding a member here; the compiler then points at
 * every `switch` that must learn it.
 */
export type FamilyScheme =
  | { readonly family: "evm"; readonly curve: "secp256k1"; readonly coin_type: 60 }
  | { readonly family: "tron"; readonly curve: "secp256k1"; readonly coin_type: 195 }
  | { readonly family: "solana"; readonly curve: "ed25519"; readonly coin_type: 501 }
  | { readonly family: "ton"; readonly curve: "ed25519"; readonly coin_type: 607 }
export type ChainFamily = FamilyScheme["family"]
export type Curve = FamilyScheme["curve"]

const schemes: { readonly [F in ChainFamily]: Extract<FamilyScheme, { family: F }> } = {
  evm: { family: "evm", curve: "secp256k1", coin_type: 60 },
  tron: { family: "tron", curve: "secp256k1", coin_type: 195 },
  solana: { family: "solana", curve: "ed25519", coin_type: 501 },
  ton: { family: "ton", curve: "ed25519", coin_type: 607 },
}

/** A record, not a default branch, so that a new chain cannot fall into a family by accident. */
const familyOfChain: { readonly [C in CustodyChain]: ChainFamily } = {
  ethereum: "evm",
  polygon: "evm",
  bsc: "evm",
  arbitrum: "evm",
  optimism: "evm",
  base: "evm",
  avalanche: "evm",
  tron: "tron",
  solana: "solana",
  ton: "ton",
}

/** Which wallet's key: the chain, the tenant's index and the wallet's index within the tenant. */
export interface WalletKeyRef {
  readonly chain: CustodyChain
  /** The tenant's BIP-44 account; an integer in 0..2^31-1. */
  readonly tenant_index: number
  /** The wallet within the tenant; an integer in 0..2^31-1. */
  readonly wallet_index: number
}

/** BIP-32 hardened child indices start here; a path index must stay below it. */
const hardened_offset = 0x8000_0000
/** A BIP-39 seed is the 64-byte PBKDF2-HMAC-SHA512 output. */
const bip39_seed_length_bytes = 64
const tron_address_prefix = 0x41
const tron_base58check = createBase58check(sha256)
const inspect_custom = Symbol.for("nodejs.util.inspect.custom")

/**
 * A derived private key. It prints, inspects and serialises as `[redacted]`, so a log line or an
 * error report that captures it leaks nothing; only `exposeSecret` hands out the bytes.
 */
export class SigningKey {
  readonly curve: Curve
  /** secp256k1: 33-byte compressed point; ed25519: the 32-byte public key. */
  readonly public_key: Uint8Array
  readonly #private_key: Uint8Array

  constructor(curve: Curve, private_key: Uint8Array, public_key: Uint8Array) {
    assert(private_key.length === 32, "a private key is 32 bytes")
    this.curve = curve
    this.#private_key = private_key.slice()
    this.public_key = public_key.slice()
  }

  /**
   * A copy of the 32-byte private key, for a signer only; never log or store it.
   * @example secp256k1.sign(digest, key.exposeSecret())
   */
  exposeSecret(): Uint8Array {
    return this.#private_key.slice()
  }

  toString(): string {
    return `SigningKey(${this.curve}, [redacted])`
  }

  toJSON(): { readonly curve: Curve; readonly private_key: "[redacted]" } {
    return { curve: this.curve, private_key: "[redacted]" }
  }

  [inspect_custom](): string {
    return this.toString()
  }
}

/**
 * The family a chain belongs to.
 * @example chainFamily("polygon") // "evm"
 */
export function chainFamily(chain: CustodyChain): ChainFamily {
  return familyOfChain[chain]
}

/**
 * The BIP-32 / SLIP-0010 path of a wallet's key; not secret, safe to log.
 * @example derivationPath({ chain: "solana", tenant_index: 3, wallet_index: 7 }) // "m/44'/501'/3'/7'"
 */
export function derivationPath(ref: WalletKeyRef): string {
  const segments = pathIndices(ref).map((index) =>
    index >= hardened_offset ? `${index - hardened_offset}'` : `${index}`,
  )
  return ["m", ...segments].join("/")
}

/**
 * Derives the private key of a wallet from the environment's BIP-39 seed. Keep the result out of
 * logs (it redacts itself when printed) and out of storage.
 * @example deriveSigningKey(seed, { chain: "ethereum", tenant_index: 0, wallet_index: 0 }).curve // "secp256k1"
 */
export function deriveSigningKey(seed: Uint8Array, ref: WalletKeyRef): SigningKey {
  assert(seed.length === bip39_seed_length_bytes, "a BIP-39 seed is 64 bytes")
  const scheme = schemes[chainFamily(ref.chain)]
  const indices = pathIndices(ref)
  switch (scheme.curve) {
    case "secp256k1":
      return deriveBip32Secp256k1(seed, indices)
    case "ed25519":
      return deriveSlip10Ed25519(seed, indices)
    default:
      return assertNever(scheme)
  }
}

/**
 * The on-chain address of a wallet, in the chain's own spelling.
 * @example deriveAddress(seed, { chain: "ethereum", tenant_index: 0, wallet_index: 0 }) // "0x9858EfFD232B4033E47d90003D41EC34EcaEda94" for the "abandon ... about" seed
 */
export function deriveAddress(seed: Uint8Array, ref: WalletKeyRef): string {
  const family = chainFamily(ref.chain)
  const public_key = deriveSigningKey(seed, ref).public_key
  switch (family) {
    case "evm":
      return checksumEvmAddress(bytesToHex(keccakAddress(public_key)))
    case "tron":
      return tron_base58check.encode(
        concatBytes(Uint8Array.of(tron_address_prefix), keccakAddress(public_key)),
      )
    case "solana":
      return base58.encode(public_key)
    case "ton":
      return tonWalletAddress(public_key)
    default:
      return assertNever(family)
  }
}

/**
 * Whether `address` is well formed for `chain`: EVM hex with a valid EIP-55 checksum when mixed case,
 * a base58check Tron address (prefix 0x41, 21 bytes), the base58 of 32 bytes for Solana, or a TON
 * address on the basechain or masterchain, user-friendly (either base64 alphabet, CRC16 checked) or
 * raw (`0:<64 hex>`). It checks spelling only, not that the account exists.
 * @example isValidAddress("ethereum", "0x9858EfFD232B4033E47d90003D41EC34EcaEda94") // true
 */
export function isValidAddress(chain: CustodyChain, address: string): boolean {
  const family = chainFamily(chain)
  switch (family) {
    case "evm":
      return isValidEvmAddress(address)
    case "tron": {
      const payload = decodeOrNull(() => tron_base58check.decode(address))
      return payload !== null && payload.length === 21 && payload[0] === tron_address_prefix
    }
    case "solana":
      return decodeOrNull(() => base58.decode(address))?.length === 32
    case "ton":
      return isValidTonAddress(address)
    default:
      return assertNever(family)
  }
}

/**
 * `address` in the spelling a transfer stores and signs, or null when `isValidAddress` refuses it:
 * an EVM address gets its EIP-55 checksum (one-case hex carries none, and signers such as viem take
 * mixed case only with the right checksum, so all-upper-case hex would be refused at signing); a TON
 * address is written user-friendly, URL-safe and non-bounceable (`UQ...`, as custody writes its
 * wallets'), whatever its spelling; any other chain's address stays as given.
 * @example canonicalAddress("ethereum", "0x9858EFFD232B4033E47D90003D41EC34ECAEDA94") // "0x9858EfFD232B4033E47d90003D41EC34EcaEda94"
 */
export function canonicalAddress(chain: CustodyChain, address: string): string | null {
  if (!isValidAddress(chain, address)) return null
  switch (chainFamily(chain)) {
    case "evm":
      return checksumEvmAddress(address.slice(2).toLowerCase())
    case "ton": {
      // One account, many spellings (raw, bounceable, testnet-flagged): kept as custody and deposits
      // write addresses, so that a transfer's destination reads like the wallet it names.
      const parsed = Address.isRaw(address)
        ? Address.parseRaw(address)
        : Address.parseFriendly(address).address
      return parsed.toString({ urlSafe: true, bounceable: false, testOnly: false })
    }
    default:
      return address
  }
}

/**
 * The account an address names, as bytes, or null when `isValidAddress` refuses it: an EVM
 * address's 20 bytes (any case), a Tron address's 21 (prefix included), a Solana key's 32, a TON
 * address's workchain byte and 32-byte hash (raw or user-friendly, bounceable or not: one account).
 * Two spellings name one account exactly when these bytes are equal.
 */
function accountBytes(chain: CustodyChain, address: string): Uint8Array | null {
  if (!isValidAddress(chain, address)) return null
  const family = chainFamily(chain)
  switch (family) {
    case "evm":
      return Buffer.from(address.slice(2), "hex")
    case "tron":
      return tron_base58check.decode(address)
    case "solana":
      return base58.decode(address)
    case "ton": {
      const parsed = Address.isRaw(address)
        ? Address.parseRaw(address)
        : Address.parseFriendly(address).address
      return concatBytes(new Uint8Array([parsed.workChain & 0xff]), parsed.hash)
    }
    default:
      return assertNever(family)
  }
}

/**
 * The Tron spelling (`T...`) of an EVM address's account: the same 20 bytes under Tron's prefix.
 * A Tron custody address and its EVM spelling are one secp256k1 key's account; null when `address`
 * is not an EVM address.
 * @example tronSpellingOfEvm("0x0000000000000000000000000000000000000000") // "T9yD14Nj9j7xAB4dbGeiX9h8unkKHxuWwb"
 */
export function tronSpellingOfEvm(address: string): string | null {
  const bytes = accountBytes("ethereum", address)
  return bytes === null
    ? null
    : tron_base58check.encode(concatBytes(Uint8Array.of(tron_address_prefix), bytes))
}

/**
 * A TON address's workchain (0 for the basechain, -1 for the masterchain), or null when the
 * address is not a TON address.
 * @example tonWorkchain("-1:3333333333333333333333333333333333333333333333333333333333333333") // -1
 */
export function tonWorkchain(address: string): number | null {
  if (!isValidAddress("ton", address)) return null
  return Address.isRaw(address)
    ? Address.parseRaw(address).workChain
    : Address.parseFriendly(address).address.workChain
}

/**
 * Whether two addresses of `chain` name the same account, however each is spelled (EVM case, TON's
 * raw and user-friendly forms). False when either is not an address of the chain.
 * @example sameAddress("ton", "0:83df...", "UQCD3...") // true when both are one account
 */
export function sameAddress(chain: CustodyChain, a: string, b: string): boolean {
  const left = accountBytes(chain, a)
  const right = accountBytes(chain, b)
  return left !== null && right !== null && Buffer.from(left).equals(right)
}

/**
 * Whether `address` is its chain's null account: all-zero account bytes (EVM's 0x000...000, Tron's
 * T9yD14Nj9j7xAB4dbGeiX9h8unkKHxuWwb, Solana's 111...111 system program, TON's zero hash). Tokens
 * sent there are burned: nobody holds its key.
 * @example isNullAddress("ethereum", "0x0000000000000000000000000000000000000000") // true
 */
export function isNullAddress(chain: CustodyChain, address: string): boolean {
  const bytes = accountBytes(chain, address)
  if (bytes === null) return false
  // Tron's first byte is the network prefix, TON's the workchain: the account is the rest.
  const account = chainFamily(chain) === "tron" || chainFamily(chain) === "ton" ? bytes.subarray(1) : bytes
  return account.every((byte) => byte === 0)
}

/**
 * SLIP-0010 ed25519 derivation along `indices`, all hardened (ed25519 has no public derivation).
 * Exported for the SLIP-0010 test vectors, which start from 16-byte seeds.
 * @example deriveSlip10Ed25519(seed, [44 + 0x8000_0000, 501 + 0x8000_0000]).public_key.length // 32
 */
export function deriveSlip10Ed25519(seed: Uint8Array, indices: ReadonlyArray<number>): SigningKey {
  assert(seed.length >= 16 && seed.length <= 64, "a SLIP-0010 seed is 16 to 64 bytes")
  let node = hmac(sha512, utf8ToBytes("ed25519 seed"), seed)
  for (const index of indices) {
    assert(
      Number.isInteger(index) && index >= hardened_offset && index <= 0xffff_ffff,
      "ed25519 needs hardened indices",
    )
    const data = new Uint8Array(37)
    data.set(node.subarray(0, 32), 1)
    new DataView(data.buffer).setUint32(33, index, false)
    node = hmac(sha512, node.subarray(32), data)
  }
  const private_key = node.subarray(0, 32)
  return new SigningKey("ed25519", private_key, ed25519.getPublicKey(private_key))
}

function deriveBip32Secp256k1(seed: Uint8Array, indices: ReadonlyArray<number>): SigningKey {
  const node = indices.reduce((parent, index) => parent.deriveChild(index), HDKey.fromMasterSeed(seed))
  const { privateKey, publicKey } = node
  assert(privateKey !== null && publicKey !== null, "a key derived from a seed has a private key")
  return new SigningKey("secp256k1", privateKey, publicKey)
}

/** Path indices with the hardened offset applied where the path marks a segment hardened. */
function pathIndices(ref: WalletKeyRef): ReadonlyArray<number> {
  assertPathIndex("tenant_index", ref.tenant_index)
  assertPathIndex("wallet_index", ref.wallet_index)
  const scheme = schemes[chainFamily(ref.chain)]
  const hardened = (index: number) => index + hardened_offset
  const account = [hardened(44), hardened(scheme.coin_type), hardened(ref.tenant_index)]
  switch (scheme.curve) {
    case "secp256k1":
      return [...account, 0, ref.wallet_index]
    case "ed25519":
      return [...account, hardened(ref.wallet_index)]
    default:
      return assertNever(scheme)
  }
}

function assertPathIndex(name: string, index: number): void {
  assert(
    Number.isInteger(index) && index >= 0 && index < hardened_offset,
    `${name} must be an integer in 0..2147483647, got ${String(index)}`,
  )
}

/** The last 20 bytes of keccak-256 over the uncompressed point without its 0x04 prefix. */
function keccakAddress(compressed_public_key: Uint8Array): Uint8Array {
  const uncompressed = secp256k1.Point.fromBytes(compressed_public_key).toBytes(false)
  return keccak_256(uncompressed.subarray(1)).subarray(12)
}

/** EIP-55: a hex letter is upper case where the keccak-256 of the lower-case hex has a nibble >= 8. */
function checksumEvmAddress(lower_hex: string): string {
  const hash = bytesToHex(keccak_256(utf8ToBytes(lower_hex)))
  let out = "0x"
  for (let i = 0; i < lower_hex.length; i++) {
    const char = lower_hex.charAt(i)
    out += Number.parseInt(hash.charAt(i), 16) >= 8 ? char.toUpperCase() : char
  }
  return out
}

function isValidEvmAddress(address: string): boolean {
  if (!/^0x[0-9a-fA-F]{40}$/.test(address)) return false
  const digits = address.slice(2)
  const lower = digits.toLowerCase()
  // One case throughout carries no checksum (EIP-55 keeps such addresses valid).
  if (digits === lower || digits === digits.toUpperCase()) return true
  return checksumEvmAddress(lower) === address
}

/**
 * The code cell of the wallet v4R2 contract: the BOC published in @ton/ton (ton-org/ton,
 * src/wallets/v4/WalletContractV4.ts), which is not a dependency here. Its cell hash is the
 * well-known v4R2 code hash feb5ff68...9dabd5c0, which the unit tests check.
 */
const ton_wallet_v4r2_code = Cell.fromBase64(
  "te6ccgECFAEAAtQAART/APSkE/S88sgLAQIBIAIDAgFIBAUE+PKDCNcYINMf0x/THwL4I7vyZO1E0NMf0x/T//QE0VFDuvKhUVG68qIF+QFUEGT5EPKj+AAkpMjLH1JAyx9SMMv/UhD0AMntVPgPAdMHIcAAn2xRkyDXSpbTB9QC+wDoMOAhwAHjACHAAuMAAcADkTDjDQOkyMsfEssfy/8QERITAubQAdDTAyFxsJJfBOAi10nBIJJfBOAC0x8hghBwbHVnvSKCEGRzdHK9sJJfBeAD+kAwIPpEAcjKB8v/ydDtRNCBAUDXIfQEMFyBAQj0Cm+hMbOSXwfgBdM/yCWCEHBsdWe6kjgw4w0DghBkc3RyupJfBuMNBgcCASAICQB4AfoA9AQw+CdvIjBQCqEhvvLgUIIQcGx1Z4MesXCAGFAEywUmzxZY+gIZ9ADLaRfLH1Jgyz8gyYBA+wAGAIpQBIEBCPRZMO1E0IEBQNcgyAHPFvQAye1UAXKwjiOCEGRzdHKDHrFwgBhQBcsFUAPPFiP6AhPLassfyz/JgED7AJJfA+ICASAKCwBZvSQrb2omhAgKBrkPoCGEcNQICEekk30pkQzmkD6f+YN4EoAbeBAUiYcVnzGEAgFYDA0AEbjJftRNDXCx+AA9sp37UTQgQFA1yH0BDACyMoHy//J0AGBAQj0Cm+hMYAIBIA4PABmtznaiaEAga5Drhf/AABmvHfaiaEAQa5DrhY/AAG7SB/oA1NQi+QAFyMoHFcv/ydB3dIAYyMsFywIizxZQBfoCFMtrEszMyXP7AMhAFIEBCPRR8qcCAHCBAQjXGPoA0z/IVCBHgQEI9FHyp4IQbm90ZXB0gBjIywXLAlAGzxZQBPoCFMtqEssfyz/Jc/sAAgBsgQEI1xj6ANM/MFIkgQEI9Fnyp4IQZHN0cnB0gBjIywXLAlAFzxZQA/oCE8tqyx8Syz/Jc/sAAAr0AMntVA==",
)
/** The wallet id v4R2 wallets use on workchain 0 by default: 698983191 + workchain. */
const ton_wallet_id = 698_983_191
const ton_basechain = 0
const ton_masterchain = -1

/**
 * The StateInit of a wallet v4R2 contract holding an ed25519 public key: the code above and the
 * initial data (seqno 0, wallet id, public key, no plugins). Its hash is the wallet's address.
 * @example tonWalletStateInit(public_key).data.bits.length // 321
 */
export function tonWalletStateInit(public_key: Uint8Array): { readonly code: Cell; readonly data: Cell } {
  assert(public_key.length === 32, "an ed25519 public key is 32 bytes")
  const data = beginCell()
    .storeUint(0, 32)
    .storeUint(ton_wallet_id, 32)
    .storeBuffer(Buffer.from(public_key))
    .storeBit(false)
    .endCell()
  return { code: ton_wallet_v4r2_code, data }
}

function tonWalletAddress(public_key: Uint8Array): string {
  return contractAddress(ton_basechain, tonWalletStateInit(public_key)).toString({
    urlSafe: true,
    bounceable: false,
    testOnly: false,
  })
}

function isValidTonAddress(address: string): boolean {
  let parsed: Address
  try {
    if (Address.isRaw(address)) parsed = Address.parseRaw(address)
    else if (Address.isFriendly(address)) parsed = Address.parseFriendly(address).address
    else return false
  } catch {
    return false
  }
  return parsed.workChain === ton_basechain || parsed.workChain === ton_masterchain
}

function decodeOrNull(decode: () => Uint8Array): Uint8Array | null {
  try {
    return decode()
  } catch {
    return null
  }
}
