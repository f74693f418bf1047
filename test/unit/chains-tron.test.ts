// Proves that the Tron adapter builds and signs real TRX and TRC-20 transactions offline: the txID
// is the sha256 of the raw data, the signature recovers to the custody key's address, the raw data
// decodes back to what was asked (here and with tronweb's own protobuf code, which must produce the
// same bytes), bad addresses are refused and any tampered byte fails verification. No node runs:
// the reference block is a real mainnet block passed explicitly.

import { createHash } from "node:crypto"
import { secp256k1 } from "@noble/curves/secp256k1.js"
import { bytesToHex, hexToBytes } from "@noble/hashes/utils.js"
import { mnemonicToSeedSync } from "@scure/bip39"
import { Result } from "effect"
import { utils as tronUtils } from "tronweb"
import { describe, expect, it } from "vitest"
import {
  formatTronAddress,
  parseTronAddress,
  tronAddressOfPublicKey,
} from "../../adapters/chains/tron/address.ts"
import {
  decodeRawData,
  decodeSignedTransaction,
  decodeTrc20TransferData,
  encodeRawData,
  type ReferenceBlock,
  verifySignedTransaction,
} from "../../adapters/chains/tron/transaction.ts"
import {
  bandwidthBytes,
  buildRawData,
  signTronRawData,
  type TronBuildContext,
  tronContractOf,
  tronFeeQuote,
} from "../../adapters/chains/tron/transfer.ts"
import { AssertionFailed } from "../../domain/assert.ts"
import { deriveAddress, deriveSigningKey } from "../../domain/custody/derive.ts"
import type { TransferIntent } from "../../src/ports/chain.ts"

const seed = mnemonicToSeedSync(
  "abandon abandon abandon abandon abandon abandon abandon abandon abandon abandon abandon about",
  "",
)
const key = deriveSigningKey(seed, { chain: "tron", tenant_index: 0, wallet_index: 0 })
const sender = "TUEZSdKsoDHQMeZwihtdoBiN46zxhGWYdH"
const recipient = "TSeJkUh4Qv67VNFwY8LaAxERygNdy6NQZK"
const usdt = "TR7NHqjeKQxGTCi8q8ZY4pL8otSzgjLj6t"

// Mainnet block 50,910,534 as /wallet/getnowblock reported it.
const reference_block: ReferenceBlock = {
  number: 50_910_534n,
  id: hexToBytes("000000000308d546908eae2604fbe73bf186ea41d7806b547a730c7dbd8e413f"),
  timestamp_ms: 1_683_345_360_000n,
}
const context: TronBuildContext = {
  reference_block,
  timestamp_ms: 1_683_345_356_680n,
  lifetime_ms: 60_000n,
  fee_limit_sun: 30_000_000n,
}

function hex21(address: string): string {
  const bytes = parseTronAddress(address)
  if (bytes === null) throw new Error(`not a Tron address: ${address}`)
  return bytesToHex(bytes)
}

/** tronweb's decoder spells bytes in upper-case hex; compare in lower case. */
function lowerHex(value: unknown): unknown {
  if (typeof value === "string") return /^(?:[0-9A-F]{2})+$/i.test(value) ? value.toLowerCase() : value
  if (Array.isArray(value)) return value.map(lowerHex)
  if (typeof value === "object" && value !== null) {
    return Object.fromEntries(Object.entries(value).map(([name, item]) => [name, lowerHex(item)]))
  }
  return value
}

function signTransfer(intent: TransferIntent) {
  const owner = tronAddressOfPublicKey(key.public_key)
  const contract = tronContractOf(owner, intent)
  if (Result.isFailure(contract)) throw new Error(`refused: ${contract.failure.address}`)
  const raw = buildRawData(contract.success, context)
  return { raw, signed: signTronRawData(key, raw) }
}

/** What a verifier outside the adapter checks: txID, signature, signer's address. */
function expectSignedBy(transaction: Uint8Array, address: string) {
  const { raw_data, signatures } = decodeSignedTransaction(transaction)
  const tx_id = createHash("sha256").update(raw_data).digest()
  const signature = signatures[0]
  if (signature === undefined) throw new Error("unsigned")
  expect(signature.length).toBe(65)
  const v = signature[64] ?? 0
  expect([27, 28]).toContain(v)
  const public_key = secp256k1.Signature.fromBytes(signature.subarray(0, 64), "compact")
    .addRecoveryBit(v - 27)
    .recoverPublicKey(tx_id)
  expect(bytesToHex(public_key.toBytes(true))).toBe(bytesToHex(key.public_key))
  const tronweb_address = tronUtils.crypto.getBase58CheckAddress(
    tronUtils.crypto.computeAddress(public_key.toBytes(false)),
  )
  expect(tronweb_address).toBe(address)
  // tronweb's signer (RFC 6979 too) makes the very same signature over the txID.
  expect(tronUtils.crypto.ECKeySign(tx_id, key.exposeSecret()).toLowerCase()).toBe(bytesToHex(signature))
  return { raw_data, tx_id: bytesToHex(tx_id) }
}

describe("a signed TRC-20 transfer", () => {
  const amount = 12_345_678n
  const { signed } = signTransfer({ asset: { kind: "token", contract: usdt }, to: recipient, amount })

  it("is signed by the custody key of m/44'/195'/0'/0/0, and its txID is sha256(raw_data)", () => {
    expect(deriveAddress(seed, { chain: "tron", tenant_index: 0, wallet_index: 0 })).toBe(sender)
    expect(formatTronAddress(signed.from)).toBe(sender)
    const { raw_data, tx_id } = expectSignedBy(signed.transaction, sender)
    expect(bytesToHex(raw_data)).toBe(bytesToHex(signed.raw_data))
    expect(tx_id).toBe(bytesToHex(signed.tx_id))
  })

  it("decodes (with tronweb) to the contract, token, recipient, amount, TAPOS fields, expiration and fee limit", () => {
    const decoded = lowerHex(
      tronUtils.deserializeTx.deserializeTransaction("TriggerSmartContract", bytesToHex(signed.raw_data)),
    )
    const call = `a9059cbb${"0".repeat(24)}${hex21(recipient).slice(2)}${amount.toString(16).padStart(64, "0")}`
    expect(decoded).toMatchObject({
      contract: [
        {
          type: "TriggerSmartContract",
          parameter: {
            type_url: "type.googleapis.com/protocol.TriggerSmartContract",
            value: { owner_address: hex21(sender), contract_address: hex21(usdt), data: call, call_value: 0 },
          },
        },
      ],
      ref_block_bytes: "d546",
      ref_block_hash: "908eae2604fbe73b",
      expiration: 1_683_345_420_000,
      timestamp: 1_683_345_356_680,
      fee_limit: 30_000_000,
    })
  })

  it("is the byte-for-byte encoding tronweb makes of the same transaction", () => {
    const pb = tronUtils.transaction.txJsonToPb({
      visible: false,
      raw_data: {
        contract: [
          {
            type: "TriggerSmartContract",
            parameter: {
              value: {
                owner_address: hex21(sender),
                contract_address: hex21(usdt),
                function_selector: "transfer(address,uint256)",
                parameter: `${"0".repeat(24)}${hex21(recipient).slice(2)}${amount.toString(16).padStart(64, "0")}`,
              },
              type_url: "type.googleapis.com/protocol.TriggerSmartContract",
            },
          },
        ],
        ref_block_bytes: "d546",
        ref_block_hash: "908eae2604fbe73b",
        expiration: 1_683_345_420_000,
        timestamp: 1_683_345_356_680,
        fee_limit: 30_000_000,
      },
    })
    expect(tronUtils.transaction.txPbToRawDataHex(pb).toLowerCase()).toBe(bytesToHex(signed.raw_data))
    expect(tronUtils.transaction.txPbToTxID(pb).replace(/^0x/, "")).toBe(bytesToHex(signed.tx_id))
  })

  it("decodes with the adapter's own reader to the same values", () => {
    const raw = decodeRawData(signed.raw_data)
    expect(bytesToHex(raw.ref_block_bytes)).toBe("d546")
    expect(bytesToHex(raw.ref_block_hash)).toBe("908eae2604fbe73b")
    expect([raw.expiration_ms, raw.timestamp_ms, raw.fee_limit_sun]).toEqual([
      1_683_345_420_000n,
      1_683_345_356_680n,
      30_000_000n,
    ])
    if (raw.contract.kind !== "trigger_smart_contract") throw new Error("not a contract call")
    expect(formatTronAddress(raw.contract.owner)).toBe(sender)
    expect(formatTronAddress(raw.contract.contract)).toBe(usdt)
    const transfer = decodeTrc20TransferData(raw.contract.data)
    expect(transfer === null ? null : [formatTronAddress(transfer.to), transfer.amount]).toEqual([
      recipient,
      amount,
    ])
  })
})

describe("a signed TRX transfer", () => {
  const amount = 1_500_000n
  const { signed } = signTransfer({ asset: { kind: "native" }, to: recipient, amount })

  it("is signed by the custody key, its txID is sha256(raw_data), and tronweb encodes it identically", () => {
    const { tx_id } = expectSignedBy(signed.transaction, sender)
    expect(tx_id).toBe(bytesToHex(signed.tx_id))
    const pb = tronUtils.transaction.txJsonToPb({
      visible: false,
      raw_data: {
        contract: [
          {
            type: "TransferContract",
            parameter: {
              value: { owner_address: hex21(sender), to_address: hex21(recipient), amount: Number(amount) },
              type_url: "type.googleapis.com/protocol.TransferContract",
            },
          },
        ],
        ref_block_bytes: "d546",
        ref_block_hash: "908eae2604fbe73b",
        expiration: 1_683_345_420_000,
        timestamp: 1_683_345_356_680,
      },
    })
    expect(tronUtils.transaction.txPbToRawDataHex(pb).toLowerCase()).toBe(bytesToHex(signed.raw_data))
  })

  it("decodes (with tronweb) to the owner, recipient, amount and TAPOS fields, with no fee limit", () => {
    const decoded = lowerHex(
      tronUtils.deserializeTx.deserializeTransaction("TransferContract", bytesToHex(signed.raw_data)),
    )
    expect(decoded).toMatchObject({
      contract: [
        {
          type: "TransferContract",
          parameter: {
            value: { owner_address: hex21(sender), to_address: hex21(recipient), amount: 1_500_000 },
          },
        },
      ],
      ref_block_bytes: "d546",
      ref_block_hash: "908eae2604fbe73b",
      expiration: 1_683_345_420_000,
      timestamp: 1_683_345_356_680,
      fee_limit: 0,
    })
  })
})

describe("address validation", () => {
  const bad: ReadonlyArray<[string, string]> = [
    ["empty", ""],
    ["checksum broken (last letter's case)", "TUEZSdKsoDHQMeZwihtdoBiN46zxhGWYdh"],
    ["EVM hex", "0x9858EfFD232B4033E47d90003D41EC34EcaEda94"],
    ["Tron hex form", "41c8599111f29c1e1e061265b4af93ea1f274ad78a"],
    ["base58check with a Bitcoin prefix", "1A1zP1eP5QGefi2DMPTfTL5SLmv7DivfNa"],
    ["truncated", "TUEZSdKsoDHQMeZwihtdoBiN46zxhGWY"],
    ["non-base58 character", "TUEZSdKsoDHQMeZwihtdoBiN46zxhGWY0H"],
    ["Solana key", "HAgk14JpMQLgt6rVgv7cBQFJWFto5Dqxi472uT3DKpqk"],
  ]
  const owner = tronAddressOfPublicKey(key.public_key)

  it.each(bad)("refuses a recipient that is %s", (_name, address) => {
    const result = tronContractOf(owner, { asset: { kind: "native" }, to: address, amount: 1n })
    expect(Result.isFailure(result) && result.failure.address).toBe(address)
  })

  it.each(bad)("refuses a token contract that is %s", (_name, address) => {
    const result = tronContractOf(owner, {
      asset: { kind: "token", contract: address },
      to: recipient,
      amount: 1n,
    })
    expect(Result.isFailure(result) && result.failure.address).toBe(address)
  })

  it.each([sender, recipient, usdt])("accepts %s", (address) => {
    expect(parseTronAddress(address)?.length).toBe(21)
    expect(formatTronAddress(parseTronAddress(address) ?? new Uint8Array())).toBe(address)
  })
})

describe("verification", () => {
  const { signed } = signTransfer({ asset: { kind: "token", contract: usdt }, to: recipient, amount: 7n })
  // The signed bytes are: tag (1 byte), raw_data length (2-byte varint), raw_data, then the signature.
  const raw_data_offset = signed.transaction.length - signed.raw_data.length - 67

  it("accepts the untouched transaction and returns its txID", () => {
    expect(raw_data_offset).toBe(3)
    expect(bytesToHex(verifySignedTransaction(signed.transaction)?.tx_id ?? new Uint8Array())).toBe(
      bytesToHex(signed.tx_id),
    )
  })

  it("refuses the transaction when any one byte of its raw data is changed", () => {
    for (let index = 0; index < signed.raw_data.length; index += 1) {
      const tampered = signed.transaction.slice()
      tampered[raw_data_offset + index] = (tampered[raw_data_offset + index] ?? 0) ^ 0x01
      expect(verifySignedTransaction(tampered), `byte ${index}`).toBeNull()
    }
  })

  it("refuses the transaction when a byte of its signature is changed", () => {
    for (const index of [0, 31, 32, 63, 64]) {
      const tampered = signed.transaction.slice()
      const at = signed.transaction.length - 65 + index
      tampered[at] = (tampered[at] ?? 0) ^ 0x01
      expect(verifySignedTransaction(tampered), `signature byte ${index}`).toBeNull()
    }
  })

  it("refuses to sign with a key that does not own the contract", () => {
    const other = deriveSigningKey(seed, { chain: "tron", tenant_index: 0, wallet_index: 1 })
    expect(() => signTronRawData(other, decodeRawData(signed.raw_data))).toThrow(AssertionFailed)
  })
})

describe("building", () => {
  it("refuses a lifetime beyond the chain's 24 hours", () => {
    const { raw } = signTransfer({ asset: { kind: "native" }, to: recipient, amount: 1n })
    expect(() => buildRawData(raw.contract, { ...context, lifetime_ms: 24n * 3_600_000n + 1n })).toThrow(
      AssertionFailed,
    )
  })

  it("refuses a reference block whose id does not start with its number", () => {
    const { raw } = signTransfer({ asset: { kind: "native" }, to: recipient, amount: 1n })
    const wrong = { ...context, reference_block: { ...reference_block, number: reference_block.number + 1n } }
    expect(() => buildRawData(raw.contract, wrong)).toThrow(AssertionFailed)
  })

  it("round-trips raw data through the adapter's encoder and decoder", () => {
    const { raw } = signTransfer({ asset: { kind: "native" }, to: recipient, amount: 2n ** 62n })
    const { recipient: _recipient, ...contract } = raw.contract as typeof raw.contract & {
      recipient: unknown
    }
    expect(decodeRawData(encodeRawData(raw))).toEqual({ ...raw, contract })
  })
})

describe("the fee model", () => {
  const prices = {
    bandwidth_sun_per_byte: 1_000n,
    energy_sun_per_unit: 210n,
    account_activation_sun: 1_100_000n,
  }
  const cases = [
    {
      name: "TRC-20 to a holder",
      intent: { kind: "token" } as const,
      energy_used: 14_650n,
      activates: false,
    },
    {
      name: "TRC-20 to a new holder",
      intent: { kind: "token" } as const,
      energy_used: 29_650n,
      activates: false,
    },
    {
      name: "TRX to an existing account",
      intent: { kind: "native" } as const,
      energy_used: 0n,
      activates: false,
    },
    { name: "TRX to a new account", intent: { kind: "native" } as const, energy_used: 0n, activates: true },
  ]

  it.each(cases)("prices $name as bandwidth + energy + activation, capped by the fee limit", (c) => {
    const asset = c.intent.kind === "token" ? { kind: "token" as const, contract: usdt } : c.intent
    const { raw, signed } = signTransfer({ asset, to: recipient, amount: 1_000_000n })
    const bandwidth = BigInt(signed.transaction.length + 64)
    expect(bandwidthBytes(raw)).toBe(bandwidth)
    const quote = tronFeeQuote(raw, prices, { energy_used: c.energy_used, activates_recipient: c.activates })
    const activation = c.activates ? 1_100_000n : 0n
    expect(quote.estimate_sun).toBe(bandwidth * 1_000n + c.energy_used * 210n + activation)
    expect(quote.max_sun).toBe(
      bandwidth * 1_000n + activation + (c.intent.kind === "token" ? 30_000_000n : 0n),
    )
  })
})
