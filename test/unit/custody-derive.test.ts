// Proves custody derivation against published vectors (BIP-39 "abandon ... about" addresses as
// MetaMask, solana-keygen and TronLink show them; SLIP-0010 ed25519 test vector 1; EIP-55 examples;
// Trust Wallet's TON vectors for the wallet v4R2 address), and that address validation accepts
// exactly the well-formed spellings.

import { inspect } from "node:util"
import { bytesToHex, hexToBytes } from "@noble/hashes/utils.js"
import { mnemonicToSeedSync } from "@scure/bip39"
import { Address, beginCell, Cell, contractAddress } from "@ton/core"
import { describe, expect, it } from "vitest"
import { AssertionFailed } from "../../domain/assert.ts"
import {
  type CustodyChain,
  canonicalAddress,
  chainFamily,
  derivationPath,
  deriveAddress,
  deriveSigningKey,
  deriveSlip10Ed25519,
  evmChains,
  isNullAddress,
  isValidAddress,
  sameAddress,
  tonWalletStateInit,
  tronSpellingOfEvm,
  type WalletKeyRef,
} from "../../domain/custody/derive.ts"

const abandonSeed = mnemonicToSeedSync(
  "abandon abandon abandon abandon abandon abandon abandon abandon abandon abandon abandon about",
  "",
)
const hardened = (index: number) => index + 0x8000_0000

describe("deriveAddress on the BIP-39 'abandon ... about' seed", () => {
  const cases: ReadonlyArray<{ ref: WalletKeyRef; path: string; address: string }> = [
    {
      ref: { chain: "ethereum", tenant_index: 0, wallet_index: 0 },
      path: "m/44'/60'/0'/0/0",
      address: "0x9858EfFD232B4033E47d90003D41EC34EcaEda94",
    },
    {
      ref: { chain: "ethereum", tenant_index: 0, wallet_index: 1 },
      path: "m/44'/60'/0'/0/1",
      address: "0x6Fac4D18c912343BF86fa7049364Dd4E424Ab9C0",
    },
    {
      ref: { chain: "tron", tenant_index: 0, wallet_index: 0 },
      path: "m/44'/195'/0'/0/0",
      address: "TUEZSdKsoDHQMeZwihtdoBiN46zxhGWYdH",
    },
    {
      ref: { chain: "tron", tenant_index: 0, wallet_index: 1 },
      path: "m/44'/195'/0'/0/1",
      address: "TSeJkUh4Qv67VNFwY8LaAxERygNdy6NQZK",
    },
    {
      ref: { chain: "solana", tenant_index: 0, wallet_index: 0 },
      path: "m/44'/501'/0'/0'",
      address: "HAgk14JpMQLgt6rVgv7cBQFJWFto5Dqxi472uT3DKpqk",
    },
    {
      ref: { chain: "solana", tenant_index: 1, wallet_index: 0 },
      path: "m/44'/501'/1'/0'",
      address: "Hh8QwFUA6MtVu1qAoq12ucvFHNwCcVTV7hpWjeY1Hztb",
    },
    {
      ref: { chain: "solana", tenant_index: 0, wallet_index: 1 },
      path: "m/44'/501'/0'/1'",
      address: "GKreMsHvt8A79VApjboYDq3J4ZCXSJRYYQk9BscMbi1H",
    },
  ]
  for (const { ref, path, address } of cases) {
    it(`${ref.chain} ${path} is ${address}`, () => {
      expect(derivationPath(ref)).toBe(path)
      expect(deriveAddress(abandonSeed, ref)).toBe(address)
      expect(isValidAddress(ref.chain, address)).toBe(true)
    })
  }

  it("gives every EVM chain the same address for the same tenant and wallet", () => {
    for (const chain of evmChains) {
      expect(chainFamily(chain)).toBe("evm")
      expect(deriveAddress(abandonSeed, { chain, tenant_index: 0, wallet_index: 0 })).toBe(
        "0x9858EfFD232B4033E47d90003D41EC34EcaEda94",
      )
    }
  })

  it("separates tenants: tenant 1 wallet 0 differs from tenant 0 wallet 0 on every family", () => {
    for (const chain of ["ethereum", "tron", "solana", "ton"] as const) {
      const first = deriveAddress(abandonSeed, { chain, tenant_index: 0, wallet_index: 0 })
      const second = deriveAddress(abandonSeed, { chain, tenant_index: 1, wallet_index: 0 })
      expect(second).not.toBe(first)
    }
  })
})

describe("TON wallet v4R2 addresses", () => {
  it("derives m/44'/607'/{tenant}'/{wallet}' as ed25519 and spells the address UQ...", () => {
    const ref: WalletKeyRef = { chain: "ton", tenant_index: 0, wallet_index: 0 }
    expect(derivationPath(ref)).toBe("m/44'/607'/0'/0'")
    expect(deriveSigningKey(abandonSeed, ref).curve).toBe("ed25519")
    const address = deriveAddress(abandonSeed, ref)
    expect(address).toMatch(/^UQ[A-Za-z0-9_-]{46}$/)
    expect(isValidAddress("ton", address)).toBe(true)
    // Pinned so that a change of path, wallet version or spelling cannot pass unnoticed.
    expect(address).toBe("UQA2qqtv2MASYNxCAjSB740ly2JELsh56uWl1rBeH4jWIpOq")
    expect(deriveAddress(abandonSeed, { ...ref, wallet_index: 1 })).toBe(
      "UQCCrLKXzYZoP2T07VRucVAyYSBeu3tipZoiFSMUkAHV27vJ",
    )
  })

  it("uses the published wallet v4R2 code (cell hash feb5ff68...9dabd5c0)", () => {
    const { code } = tonWalletStateInit(new Uint8Array(32))
    expect(code.hash().toString("hex")).toBe(
      "feb5ff6820e2ff0d9483e7e0d62c817d846789fb4ae580c878866d959dabd5c0",
    )
  })

  // wallet-core tests/chains/TheOpenNetwork/TWTONWalletTests.cpp, CreateV4R2StateInit.
  it("builds the StateInit Trust Wallet publishes for public key f229a937...", () => {
    const published = Cell.fromBase64(
      "te6cckECFgEAAwQAAgE0AQIBFP8A9KQT9LzyyAsDAFEAAAAAKamjF/IpqTcfp8IQiz2Q6iLJvnBf9dDP6u6cu5Nm/wFxV5NXQAIBIAQFAgFIBgcE+PKDCNcYINMf0x/THwL4I7vyZO1E0NMf0x/T//QE0VFDuvKhUVG68qIF+QFUEGT5EPKj+AAkpMjLH1JAyx9SMMv/UhD0AMntVPgPAdMHIcAAn2xRkyDXSpbTB9QC+wDoMOAhwAHjACHAAuMAAcADkTDjDQOkyMsfEssfy/8ICQoLAubQAdDTAyFxsJJfBOAi10nBIJJfBOAC0x8hghBwbHVnvSKCEGRzdHK9sJJfBeAD+kAwIPpEAcjKB8v/ydDtRNCBAUDXIfQEMFyBAQj0Cm+hMbOSXwfgBdM/yCWCEHBsdWe6kjgw4w0DghBkc3RyupJfBuMNDA0CASAODwBu0gf6ANTUIvkABcjKBxXL/8nQd3SAGMjLBcsCIs8WUAX6AhTLaxLMzMlz+wDIQBSBAQj0UfKnAgBwgQEI1xj6ANM/yFQgR4EBCPRR8qeCEG5vdGVwdIAYyMsFywJQBs8WUAT6AhTLahLLH8s/yXP7AAIAbIEBCNcY+gDTPzBSJIEBCPRZ8qeCEGRzdHJwdIAYyMsFywJQBc8WUAP6AhPLassfEss/yXP7AAAK9ADJ7VQAeAH6APQEMPgnbyIwUAqhIb7y4FCCEHBsdWeDHrFwgBhQBMsFJs8WWPoCGfQAy2kXyx9SYMs/IMmAQPsABgCKUASBAQj0WTDtRNCBAUDXIMgBzxb0AMntVAFysI4jghBkc3Rygx6xcIAYUAXLBVADzxYj+gITy2rLH8s/yYBA+wCSXwPiAgEgEBEAWb0kK29qJoQICga5D6AhhHDUCAhHpJN9KZEM5pA+n/mDeBKAG3gQFImHFZ8xhAIBWBITABG4yX7UTQ1wsfgAPbKd+1E0IEBQNch9AQwAsjKB8v/ydABgQEI9ApvoTGACASAUFQAZrc52omhAIGuQ64X/wAAZrx32omhAEGuQ64WPwEXtMkg=",
    )
    const { code, data } = tonWalletStateInit(
      hexToBytes("f229a9371fa7c2108b3d90ea22c9be705ff5d0cfeaee9cbb9366ff0171579357"),
    )
    // StateInit: no split_depth, no special, code and data present, no library.
    const state_init = beginCell().storeUint(0b00110, 5).storeRef(code).storeRef(data).endCell()
    expect(state_init.hash().toString("hex")).toBe(published.hash().toString("hex"))
  })

  const publicKeyVectors: ReadonlyArray<{
    public_key: string
    raw: string
    /** The non-bounceable spelling, where the source publishes it. */
    friendly: string | null
    source: string
  }> = [
    {
      source: "wallet-core TheOpenNetworkAddress.FromPublicKey",
      public_key: "c2036a1ca901059e1d1ab38cd7a7a4709b5e8f9d85b387f0514d7adae70b6afe",
      raw: "0:8a8627861a5dd96c9db3ce0807b122da5ed473934ce7568a5b4b1c361cbb28ae",
      friendly: "UQCKhieGGl3ZbJ2zzggHsSLaXtRzk0znVopbSxw2HLsorhqg",
    },
    {
      source: "a mainnet wallet, published in raw form only",
      public_key: "72c9ed6b62a6e2eba14a93b90462e7a367777beb8a38fb15b9f33844d22ce2ff",
      raw: "0:1195e0aa861dee81216752efbcf2425ebbd7e846987b5fab01e9bc5303fdd1b0",
      friendly: null,
    },
  ]
  for (const { public_key, raw, friendly, source } of publicKeyVectors) {
    it(`gives ${raw.slice(0, 14)}... for public key ${public_key.slice(0, 8)}... (${source})`, () => {
      const address = contractAddress(0, tonWalletStateInit(hexToBytes(public_key)))
      expect(address.toRawString()).toBe(raw)
      if (friendly !== null) expect(address.toString({ urlSafe: true, bounceable: false })).toBe(friendly)
    })
  }

  // wallet-core tests/chains/TheOpenNetwork/TWAnyAddressTests.cpp: Trust Wallet's path m/44'/607'/0'.
  it("matches Trust Wallet's address for its BIP-39 mnemonic, so the SLIP-0010 keys agree", () => {
    const seed = mnemonicToSeedSync(
      "stuff diamond cycle federal scan spread pigeon people engage teach snack grain",
      "",
    )
    const key = deriveSlip10Ed25519(seed, [hardened(44), hardened(607), hardened(0)])
    expect(contractAddress(0, tonWalletStateInit(key.public_key)).toString({ bounceable: true })).toBe(
      "EQDYW_1eScJVxtitoBRksvoV9cCYo4uKGWLVNIHB1JqRR3n0",
    )
  })
})

describe("deriveSigningKey", () => {
  const ref: WalletKeyRef = { chain: "ethereum", tenant_index: 0, wallet_index: 0 }

  it("gives the published private key of m/44'/60'/0'/0/0", () => {
    const key = deriveSigningKey(abandonSeed, ref)
    expect(key.curve).toBe("secp256k1")
    expect(bytesToHex(key.exposeSecret())).toBe(
      "1ab42cc412b618bdea3a599e3c9bae199ebf030895b039e9db1e30dafb12b727",
    )
  })

  it("never prints, inspects or serialises the private key", () => {
    const key = deriveSigningKey(abandonSeed, ref)
    const secret = bytesToHex(key.exposeSecret())
    for (const text of [String(key), `${key}`, JSON.stringify({ key }), inspect(key), inspect({ key })]) {
      expect(text).not.toContain(secret)
      expect(text).toContain("redacted")
    }
  })

  it("hands out copies, so a caller cannot corrupt the key", () => {
    const key = deriveSigningKey(abandonSeed, ref)
    key.exposeSecret().fill(0)
    expect(bytesToHex(key.exposeSecret())).toBe(
      "1ab42cc412b618bdea3a599e3c9bae199ebf030895b039e9db1e30dafb12b727",
    )
  })

  const badIndices: ReadonlyArray<{ name: string; tenant_index: number; wallet_index: number }> = [
    { name: "a negative tenant index", tenant_index: -1, wallet_index: 0 },
    { name: "a fractional wallet index", tenant_index: 0, wallet_index: 1.5 },
    { name: "a wallet index of 2^31", tenant_index: 0, wallet_index: 2 ** 31 },
    { name: "a NaN tenant index", tenant_index: Number.NaN, wallet_index: 0 },
    { name: "an infinite wallet index", tenant_index: 0, wallet_index: Number.POSITIVE_INFINITY },
  ]
  for (const { name, tenant_index, wallet_index } of badIndices) {
    it(`rejects ${name} with a clear error`, () => {
      for (const chain of ["ethereum", "solana"] as const) {
        expect(() => deriveAddress(abandonSeed, { chain, tenant_index, wallet_index })).toThrow(
          /_index must be an integer in 0\.\.2147483647/,
        )
      }
    })
  }

  it("accepts the largest index, 2^31 - 1", () => {
    const largest = 2 ** 31 - 1
    const ref = { chain: "solana", tenant_index: largest, wallet_index: largest } as const
    expect(derivationPath(ref)).toBe("m/44'/501'/2147483647'/2147483647'")
    expect(isValidAddress("solana", deriveAddress(abandonSeed, ref))).toBe(true)
  })

  it("rejects a seed that is not 64 bytes", () => {
    expect(() => deriveAddress(abandonSeed.subarray(0, 32), ref)).toThrow(AssertionFailed)
  })
})

describe("deriveSlip10Ed25519 on SLIP-0010 ed25519 test vector 1", () => {
  const seed = hexToBytes("000102030405060708090a0b0c0d0e0f")
  // Chain, private key, public key (the spec prints public keys with a 00 prefix, left off here).
  const vectors: ReadonlyArray<readonly [ReadonlyArray<number>, string, string]> = [
    [
      [],
      "2b4be7f19ee27bbf30c667b642d5f4aa69fd169872f8fc3059c08ebae2eb19e7",
      "a4b2856bfec510abab89753fac1ac0e1112364e7d250545963f135f2a33188ed",
    ],
    [
      [0],
      "68e0fe46dfb67e368c75379acec591dad19df3cde26e63b93a8e704f1dade7a3",
      "8c8a13df77a28f3445213a0f432fde644acaa215fc72dcdf300d5efaa85d350c",
    ],
    [
      [0, 1],
      "b1d0bad404bf35da785a64ca1ac54b2617211d2777696fbffaf208f746ae84f2",
      "1932a5270f335bed617d5b935c80aedb1a35bd9fc1e31acafd5372c30f5c1187",
    ],
    [
      [0, 1, 2],
      "92a5b23c0b8a99e37d07df3fb9966917f5d06e02ddbd909c7e184371463e9fc9",
      "ae98736566d30ed0e9d2f4486a64bc95740d89c7db33f52121f8ea8f76ff0fc1",
    ],
    [
      [0, 1, 2, 2],
      "30d1dc7e5fc04c31219ab25a27ae00b50f6fd66622f6e9c913253d6511d1e662",
      "8abae2d66361c879b900d204ad2cc4984fa2aa344dd7ddc46007329ac76c429c",
    ],
    [
      [0, 1, 2, 2, 1_000_000_000],
      "8f94d394a8e8fd6b1bc2f3f49f5c47e385281d5c17e65324b0f62483e37e8793",
      "3c24da049451555d51a7014a37337aa4e12d41e485abccfa46b47dfb2af54b7a",
    ],
  ]
  for (const [chain, privateHex, publicHex] of vectors) {
    it(`m${chain.map((i) => `/${i}H`).join("")}`, () => {
      const key = deriveSlip10Ed25519(seed, chain.map(hardened))
      expect(key.curve).toBe("ed25519")
      expect(bytesToHex(key.exposeSecret())).toBe(privateHex)
      expect(bytesToHex(key.public_key)).toBe(publicHex)
    })
  }

  it("refuses a non-hardened index (ed25519 has no public derivation)", () => {
    expect(() => deriveSlip10Ed25519(seed, [0])).toThrow(AssertionFailed)
  })
})

describe("isValidAddress", () => {
  const cases: ReadonlyArray<{ chain: CustodyChain; address: string; valid: boolean; why: string }> = [
    // EVM: the four mixed-case examples of EIP-55, then single-case and broken spellings.
    {
      chain: "ethereum",
      address: "0x5aAeb6053F3E94C9b9A09f33669435E7Ef1BeAed",
      valid: true,
      why: "EIP-55 example 1",
    },
    {
      chain: "polygon",
      address: "0xfB6916095ca1df60bB79Ce92cE3Ea74c37c5d359",
      valid: true,
      why: "EIP-55 example 2",
    },
    {
      chain: "bsc",
      address: "0xdbF03B407c01E7cD3CBea99509d93f8DDDC8C6FB",
      valid: true,
      why: "EIP-55 example 3",
    },
    {
      chain: "base",
      address: "0xD1220A0cf47c7B9Be7A2E6BA89F429762e7b9aDb",
      valid: true,
      why: "EIP-55 example 4",
    },
    {
      chain: "ethereum",
      address: "0x5aaeb6053f3e94c9b9a09f33669435e7ef1beaed",
      valid: true,
      why: "all lower case",
    },
    {
      chain: "ethereum",
      address: "0x5AAEB6053F3E94C9B9A09F33669435E7EF1BEAED",
      valid: true,
      why: "all upper case",
    },
    {
      chain: "ethereum",
      address: "0x5aAeb6053F3E94C9b9A09f33669435E7Ef1BeAeD",
      valid: false,
      why: "bad checksum",
    },
    {
      chain: "arbitrum",
      address: "0xd1220A0cf47c7B9Be7A2E6BA89F429762e7b9aDb",
      valid: false,
      why: "bad checksum",
    },
    { chain: "ethereum", address: "0x5aAeb6053F3E94C9b9A09f33669435E7Ef1BeA", valid: false, why: "19 bytes" },
    {
      chain: "ethereum",
      address: "0x5aAeb6053F3E94C9b9A09f33669435E7Ef1BeAed00",
      valid: false,
      why: "21 bytes",
    },
    { chain: "ethereum", address: "5aAeb6053F3E94C9b9A09f33669435E7Ef1BeAed", valid: false, why: "no 0x" },
    {
      chain: "optimism",
      address: "0xZaAeb6053F3E94C9b9A09f33669435E7Ef1BeAed",
      valid: false,
      why: "not hex",
    },
    { chain: "avalanche", address: "", valid: false, why: "empty" },
    { chain: "ethereum", address: "TUEZSdKsoDHQMeZwihtdoBiN46zxhGWYdH", valid: false, why: "a Tron address" },
    // Tron: base58check of 0x41 + 20 bytes.
    { chain: "tron", address: "TR7NHqjeKQxGTCi8q8ZY4pL8otSzgjLj6t", valid: true, why: "USDT contract" },
    { chain: "tron", address: "TUEZSdKsoDHQMeZwihtdoBiN46zxhGWYdh", valid: false, why: "bad checksum" },
    { chain: "tron", address: "TUEZSdKsoDHQMeZwihtdoBiN46zxhGWYd", valid: false, why: "one character short" },
    { chain: "tron", address: "TUEZSdKsoDHQMeZwihtdoBiN46zxhGWY0H", valid: false, why: "0 is not base58" },
    { chain: "tron", address: "1LqBGSKuX5yYUonjxT5qGfpUsXKYYWeabA", valid: false, why: "a Bitcoin address" },
    {
      chain: "tron",
      address: "0x9858EfFD232B4033E47d90003D41EC34EcaEda94",
      valid: false,
      why: "an EVM address",
    },
    // Solana: base58 of exactly 32 bytes (off-curve program addresses are valid too).
    { chain: "solana", address: "11111111111111111111111111111111", valid: true, why: "system program" },
    {
      chain: "solana",
      address: "TokenkegQfeZyiNwAJbNbGKPFXCWuBvf9Ss623VQ5DA",
      valid: true,
      why: "token program",
    },
    { chain: "solana", address: "1111111111111111111111111111111", valid: false, why: "31 zero bytes" },
    {
      chain: "solana",
      address: "HAgk14JpMQLgt6rVgv7cBQFJWFto5Dqxi472uT3DKpqkk",
      valid: false,
      why: "33 bytes",
    },
    {
      chain: "solana",
      address: "HAgk14JpMQLgt6rVgv7cBQFJWFto5Dqxi472uT3DKpqO",
      valid: false,
      why: "O is not base58",
    },
    {
      chain: "solana",
      address: "HAgk14JpMQLgt6rVgv7cBQFJWFto5Dqxi472uT3DKpq_",
      valid: false,
      why: "_ is not base58",
    },
    { chain: "solana", address: "", valid: false, why: "empty" },
    // TON: wallet-core's TheOpenNetworkAddress Valid and Invalid cases.
    {
      chain: "ton",
      address: "UQCKhieGGl3ZbJ2zzggHsSLaXtRzk0znVopbSxw2HLsorhqg",
      valid: true,
      why: "non-bounceable",
    },
    {
      chain: "ton",
      address: "EQCKhieGGl3ZbJ2zzggHsSLaXtRzk0znVopbSxw2HLsorkdl",
      valid: true,
      why: "bounceable",
    },
    {
      chain: "ton",
      address: "Ef8JfFPRpHBV_tZpCurvxMJW69nt2js3SuGEWojGnOpCVPRe",
      valid: true,
      why: "masterchain",
    },
    {
      chain: "ton",
      address: "EQCmGW+z+UL00FmnhWaMvJq/i86YY5GlJP3uJW19KC5Tzq4C",
      valid: true,
      why: "standard base64",
    },
    {
      chain: "ton",
      address: "0:8a8627861a5dd96c9db3ce0807b122da5ed473934ce7568a5b4b1c361cbb28ae",
      valid: true,
      why: "raw form",
    },
    {
      chain: "ton",
      address: "EQCKhieGGl3ZbJ2zzggHsSLaXtRzk0znVopbSxw2HLsormVH",
      valid: false,
      why: "bad CRC (two bytes swapped)",
    },
    {
      chain: "ton",
      address: "MwCKhieGGl3ZbJ2zzggHsSLaXtRzk0znVopbSxw2HLsorsn8",
      valid: false,
      why: "bad tag",
    },
    {
      chain: "ton",
      address: "EQEMzVEZ8n9_5GFEdsNPfl6Tx64Jjld88gEvi4BDFly4CSyl",
      valid: false,
      why: "workchain 1",
    },
    {
      chain: "ton",
      address: "-2:e0e98cfcf743292298ad9e379a3c2e6401797b9cbfc0fe98b4e14fd0ce07ecdf",
      valid: false,
      why: "raw workchain -2",
    },
    {
      chain: "ton",
      address: "EQIcIZpPoMnWXd8FbC1KaLtcyIgVUlwsbFK_3P6f5uf_YyE",
      valid: false,
      why: "too short",
    },
    {
      chain: "ton",
      address: "HAgk14JpMQLgt6rVgv7cBQFJWFto5Dqxi472uT3DKpqk",
      valid: false,
      why: "a Solana address",
    },
    { chain: "ton", address: "", valid: false, why: "empty" },
  ]
  for (const { chain, address, valid, why } of cases) {
    it(`${chain} ${JSON.stringify(address)} is ${valid ? "valid" : "invalid"} (${why})`, () => {
      expect(isValidAddress(chain, address)).toBe(valid)
    })
  }
})

describe("sameAddress and isNullAddress", () => {
  const eth = deriveAddress(abandonSeed, { chain: "ethereum", tenant_index: 0, wallet_index: 0 })
  const other_eth = deriveAddress(abandonSeed, { chain: "ethereum", tenant_index: 0, wallet_index: 1 })
  const ton = Address.parse(deriveAddress(abandonSeed, { chain: "ton", tenant_index: 0, wallet_index: 0 }))
  const sol = deriveAddress(abandonSeed, { chain: "solana", tenant_index: 0, wallet_index: 0 })
  const tron = deriveAddress(abandonSeed, { chain: "tron", tenant_index: 0, wallet_index: 0 })

  it("takes every spelling of one account as the same address, and no other", () => {
    expect(sameAddress("ethereum", eth, eth.toLowerCase())).toBe(true)
    expect(sameAddress("bsc", eth, `0x${eth.slice(2).toUpperCase()}`)).toBe(true)
    expect(sameAddress("ethereum", eth, other_eth)).toBe(false)
    const spellings = [
      ton.toRawString(),
      ton.toString({ bounceable: true, urlSafe: true }),
      ton.toString({ bounceable: false, urlSafe: true }),
      ton.toString({ bounceable: true, urlSafe: false }),
      ton.toString({ bounceable: false, urlSafe: true, testOnly: true }),
    ]
    for (const a of spellings) for (const b of spellings) expect(sameAddress("ton", a, b)).toBe(true)
    // The same hash on the masterchain is another account.
    expect(sameAddress("ton", ton.toRawString(), `-1:${ton.hash.toString("hex")}`)).toBe(false)
    expect(sameAddress("solana", sol, sol)).toBe(true)
    expect(sameAddress("tron", tron, tron)).toBe(true)
    expect(sameAddress("tron", tron, "T9yD14Nj9j7xAB4dbGeiX9h8unkKHxuWwb")).toBe(false)
  })

  it("spells an EVM account for Tron: the same 20 bytes under Tron's prefix", () => {
    // USDT's TRC-20 contract, whose hex form Tron's explorers show as 41a614f8...d13c.
    expect(tronSpellingOfEvm("0xa614f803b6fd780986a42c78ec9c7f77e6ded13c")).toBe(
      "TR7NHqjeKQxGTCi8q8ZY4pL8otSzgjLj6t",
    )
    expect(tronSpellingOfEvm("0xA614F803B6FD780986A42C78EC9C7F77E6DED13C")).toBe(
      "TR7NHqjeKQxGTCi8q8ZY4pL8otSzgjLj6t",
    )
    expect(tronSpellingOfEvm(`0x${"0".repeat(40)}`)).toBe("T9yD14Nj9j7xAB4dbGeiX9h8unkKHxuWwb")
    expect(tronSpellingOfEvm("TR7NHqjeKQxGTCi8q8ZY4pL8otSzgjLj6t")).toBeNull()
    expect(tronSpellingOfEvm("0x1234")).toBeNull()
  })

  it("is false when either side is not an address of the chain", () => {
    expect(sameAddress("ethereum", "0x1234", "0x1234")).toBe(false)
    expect(sameAddress("solana", eth, eth)).toBe(false)
  })

  it("knows each chain's null account in any spelling, and nothing else", () => {
    expect(isNullAddress("ethereum", `0x${"0".repeat(40)}`)).toBe(true)
    expect(isNullAddress("polygon", `0x${"0".repeat(39)}1`)).toBe(false)
    expect(isNullAddress("tron", "T9yD14Nj9j7xAB4dbGeiX9h8unkKHxuWwb")).toBe(true)
    expect(isNullAddress("solana", "11111111111111111111111111111111")).toBe(true)
    const zero = new Address(0, Buffer.alloc(32))
    expect(isNullAddress("ton", zero.toRawString())).toBe(true)
    expect(isNullAddress("ton", zero.toString({ bounceable: false, urlSafe: true }))).toBe(true)
    for (const [chain, address] of [
      ["ethereum", eth],
      ["ton", ton.toRawString()],
      ["solana", sol],
      ["tron", tron],
    ] as const)
      expect(isNullAddress(chain, address)).toBe(false)
    expect(isNullAddress("ethereum", "not an address")).toBe(false)
  })
})

describe("canonicalAddress", () => {
  it("writes every spelling of a TON account as custody does (UQ..., URL-safe), an EVM address checksummed, others as given", () => {
    const account = new Address(0, Buffer.alloc(32, 0xab))
    const custody_form = account.toString({ urlSafe: true, bounceable: false, testOnly: false })
    expect(custody_form.startsWith("UQ")).toBe(true)
    const spellings = [
      account.toRawString(),
      account.toString(),
      account.toString({ urlSafe: false }),
      account.toString({ bounceable: false }),
      account.toString({ testOnly: true }),
      account.toString({ testOnly: true, bounceable: false }),
      custody_form,
    ]
    for (const spelling of spellings) expect(canonicalAddress("ton", spelling), spelling).toBe(custody_form)
    expect(canonicalAddress("ton", "not an address")).toBeNull()
    expect(canonicalAddress("ethereum", "0x9858EFFD232B4033E47D90003D41EC34ECAEDA94")).toBe(
      "0x9858EfFD232B4033E47d90003D41EC34EcaEda94",
    )
    const solana = "So11111111111111111111111111111111111111112"
    expect(canonicalAddress("solana", solana)).toBe(solana)
  })
})
