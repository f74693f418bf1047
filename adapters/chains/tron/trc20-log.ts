/**
 * TRC-20 `Transfer(address indexed from, address indexed to, uint256 value)` events as a full node
 * reports them in a transaction's execution result (`TransactionInfo.log[]`). The chain's TVM
 * speaks EVM's 20-byte addresses, so topics carry the address without Tron's 0x41 prefix and the
 * log's `address` is the emitting contract in 20-byte hex; the adapter compares and reports every
 * address in one canonical form, the 21 bytes (0x41 and 20), spelled base58check `T...` outwards.
 *
 * Pure: the adapter's deposit scan (incoming.ts) and its transaction status (adapter.ts) decide
 * what counts as a Transfer log with the same function, so their log indexes agree.
 */
import { concatBytes, hexToBytes } from "@noble/hashes/utils.js"
import { parseTronAddress, type TronAddressBytes, tron_address_prefix } from "./address.ts"
import type { TronLog } from "./transport.ts"

/** keccak-256 of `Transfer(address,address,uint256)`, the TRC-20 (and ERC-20) transfer event. */
export const trc20_transfer_topic = "ddf252ad1be2c89b69c2b068fc378daa952ba7f163c4a11628f55a4df523b3ef"

/** An ABI word (a topic, a uint256) is 32 bytes: 64 hex digits. */
const word_pattern = /^[0-9a-f]{64}$/
/** An address word is the 20-byte address right-aligned behind twelve zero bytes. */
const address_word_pattern = /^0{24}([0-9a-f]{40})$/

/** One TRC-20 transfer, decoded from its log. */
export interface Trc20Transfer {
  readonly contract: TronAddressBytes
  readonly from: TronAddressBytes
  readonly to: TronAddressBytes
  readonly amount: bigint
}

/**
 * The transfer a log records, or null when the log is not a TRC-20 Transfer event: another topic,
 * an ERC-721 style Transfer (its token id is a fourth, indexed topic and its data is empty), or
 * words that are not what the ABI encodes (an address word with bits above its 20 bytes).
 * @example trc20TransferOfLog({ address: "a614f8...", topics: [trc20_transfer_topic, from, to], data: amount })
 */
export function trc20TransferOfLog(log: TronLog): Trc20Transfer | null {
  const [topic, from_word, to_word, ...rest] = log.topics.map((topic) => topic.toLowerCase())
  if (topic !== trc20_transfer_topic || rest.length > 0 || from_word === undefined || to_word === undefined)
    return null
  const data = log.data.toLowerCase()
  const contract = tronLogAddress(log.address)
  const from = addressOfWord(from_word)
  const to = addressOfWord(to_word)
  if (contract === null || from === null || to === null || !word_pattern.test(data)) return null
  return { contract, from, to, amount: BigInt(`0x${data}`) }
}

/**
 * A log's contract address as 21 bytes, from any spelling a node uses: 20-byte hex (java-tron's
 * default), 21-byte hex with the 0x41 prefix, or base58check (`visible: true`). Null otherwise.
 * @example tronLogAddress("a614f803b6fd780986a42c78ec9c7f77e6ded13c") // the bytes of TR7NHqjeKQxGTCi8q8ZY4pL8otSzgjLj6t
 */
export function tronLogAddress(address: string): TronAddressBytes | null {
  const hex = address.toLowerCase().replace(/^0x/, "")
  if (/^[0-9a-f]{40}$/.test(hex)) return prefixed(hex)
  if (/^41[0-9a-f]{40}$/.test(hex)) return prefixed(hex.slice(2))
  return parseTronAddress(address)
}

function addressOfWord(word: string): TronAddressBytes | null {
  const match = address_word_pattern.exec(word)
  return match?.[1] === undefined ? null : prefixed(match[1])
}

function prefixed(hex20: string): TronAddressBytes {
  return concatBytes(Uint8Array.of(tron_address_prefix), hexToBytes(hex20)) as TronAddressBytes
}
