/**
 * Tron addresses: 21 bytes (the prefix 0x41, then the last 20 bytes of the keccak-256 of the
 * uncompressed secp256k1 public key), spelled base58check as `T...`. Transactions carry the 21
 * bytes; people and the API see the base58check spelling.
 */
import { secp256k1 } from "@noble/curves/secp256k1.js"
import { sha256 } from "@noble/hashes/sha2.js"
import { keccak_256 } from "@noble/hashes/sha3.js"
import { concatBytes } from "@noble/hashes/utils.js"
import { createBase58check } from "@scure/base"
import { assert } from "../../../domain/assert.ts"

export const tron_address_prefix = 0x41
export const tron_address_length_bytes = 21
const base58check = createBase58check(sha256)

/** A Tron address, decoded: the 21 bytes a transaction carries. Build it with `parseTronAddress`. */
export type TronAddressBytes = Uint8Array & { readonly __brand: "TronAddressBytes" }

/**
 * The 21 address bytes of a base58check `T...` address, or null when it is not one (bad alphabet,
 * checksum, length or prefix).
 * @example parseTronAddress("TUEZSdKsoDHQMeZwihtdoBiN46zxhGWYdH")?.length // 21
 */
export function parseTronAddress(address: string): TronAddressBytes | null {
  let payload: Uint8Array
  try {
    payload = base58check.decode(address)
  } catch {
    return null
  }
  if (payload.length !== tron_address_length_bytes || payload[0] !== tron_address_prefix) return null
  return payload as TronAddressBytes
}

/**
 * The base58check spelling of 21 address bytes.
 * @example formatTronAddress(parseTronAddress("TUEZSdKsoDHQMeZwihtdoBiN46zxhGWYdH")!) // "TUEZ...YdH"
 */
export function formatTronAddress(bytes: Uint8Array): string {
  assert(
    bytes.length === tron_address_length_bytes && bytes[0] === tron_address_prefix,
    "Tron address bytes are 0x41 and 20 bytes",
  )
  return base58check.encode(bytes)
}

/**
 * The address bytes of a secp256k1 public key, compressed (33 bytes) or uncompressed (65 bytes).
 * @example formatTronAddress(tronAddressOfPublicKey(key.public_key))
 */
export function tronAddressOfPublicKey(public_key: Uint8Array): TronAddressBytes {
  const uncompressed = secp256k1.Point.fromBytes(public_key).toBytes(false)
  const hash = keccak_256(uncompressed.subarray(1)).subarray(12)
  return concatBytes(Uint8Array.of(tron_address_prefix), hash) as TronAddressBytes
}
