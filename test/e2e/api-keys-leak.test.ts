// Proves that no key material reaches a tenant or an operator's log: the real platform process (a
// local ethereum, Solana and TON; debug logging) serves a tenant that creates wallets on all ten
// chains, funds them, pays socially and sends on chain on each of the three families that run here; then the test recovers the secrets on its own (the KEK from the
// platform's DATA_DIR, the master mnemonic and seed from its database, every wallet's private key by
// derivation) and searches every response body, every header and the process's whole output for
// each of them in every encoding a leak would likely take.
import * as fs from "node:fs"
import * as path from "node:path"
import { base58 } from "@scure/base"
import { mnemonicToEntropy } from "@scure/bip39"
import { wordlist } from "@scure/bip39/wordlists/english.js"
import { generatePrivateKey, privateKeyToAccount } from "viem/accounts"
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest"
import { type CustodyChain, deriveSigningKey } from "../../domain/custody/derive.ts"
import { loadOrCreateMasterMnemonic, loadOrCreateMasterSeed, resolveKek } from "../../src/custody/vault.ts"
import type { ChainTransfer, Identity, Transaction, Wallet } from "../../src/http/api.ts"
import { expectOk } from "../support/api-expect.ts"
import {
  type ApiClient,
  type ApiResponse,
  apiClient,
  type Credentials,
  type RunningPlatform,
  registerTenant,
  startPlatform,
} from "../support/platform-process.ts"

type WalletView = typeof Wallet.Type

const chains: ReadonlyArray<CustodyChain> = [
  "ethereum",
  "solana",
  "polygon",
  "bsc",
  "arbitrum",
  "optimism",
  "base",
  "avalanche",
  "tron",
  "ton",
]
/** Waits return as soon as the chain is done; the bound only matters on a slow, busy host. */
const completion_wait_ms_max = 60_000
// Tests that wait on chains more than once may take several such bounds on a slow host.
vi.setConfig({ testTimeout: 180_000 })
/** A leak of this many consecutive mnemonic words is a leak (a partial mnemonic shrinks the search). */
const mnemonic_window_words = 3

/** A secret in one encoding: `hex` ones are searched case-insensitively. */
interface Secret {
  readonly name: string
  readonly value: string
  readonly case_insensitive: boolean
}

const hexSecrets = (name: string, bytes: Uint8Array): ReadonlyArray<Secret> => {
  const hex = Buffer.from(bytes).toString("hex")
  return [
    { name: `${name} (hex)`, value: hex, case_insensitive: true },
    { name: `${name} (0x hex)`, value: `0x${hex}`, case_insensitive: true },
  ]
}

const byteSecrets = (name: string, bytes: Uint8Array): ReadonlyArray<Secret> => [
  ...hexSecrets(name, bytes),
  { name: `${name} (base64)`, value: Buffer.from(bytes).toString("base64"), case_insensitive: false },
  { name: `${name} (base64url)`, value: Buffer.from(bytes).toString("base64url"), case_insensitive: false },
  { name: `${name} (base58)`, value: base58.encode(bytes), case_insensitive: false },
]

/** Every window of `mnemonic_window_words` consecutive words, matched across any separators. */
const mnemonicSecrets = (mnemonic: string): ReadonlyArray<Secret> => {
  const words = mnemonic.split(" ")
  const windows: Secret[] = []
  for (let start = 0; start + mnemonic_window_words <= words.length; start += 1) {
    const value = words.slice(start, start + mnemonic_window_words).join(" ")
    windows.push({
      name: `mnemonic words ${start + 1}..${start + mnemonic_window_words}`,
      value,
      case_insensitive: true,
    })
  }
  return windows
}

/** The names of the secrets found in `text`; words are compared with separators collapsed to one space. */
const leaksIn = (text: string, secrets: ReadonlyArray<Secret>): ReadonlyArray<string> => {
  const lower = text.toLowerCase()
  const words = lower.replace(/[^a-z]+/g, " ")
  return secrets
    .filter((secret) => {
      if (!secret.case_insensitive) return text.includes(secret.value)
      const value = secret.value.toLowerCase()
      return lower.includes(value) || (/^[a-z ]+$/.test(value) && words.includes(value))
    })
    .map((secret) => secret.name)
}

let platform: RunningPlatform
let client: ApiClient
let credentials: Credentials
const wallets: WalletView[] = []
const collected: string[] = []

/** Keeps the response's status, headers and body for the search, and returns it. */
const keep = <T>(response: ApiResponse<T>): ApiResponse<T> => {
  collected.push(
    String(response.status),
    JSON.stringify([...response.headers]),
    JSON.stringify(response.body),
  )
  return response
}

beforeAll(async () => {
  platform = await startPlatform({
    SANDBOX_EVM_CHAINS: "ethereum",
    SANDBOX_SOLANA: "true",
    SANDBOX_TON: "true",
    LOG_LEVEL: "debug",
  })
  ;({ client, credentials } = await registerTenant(platform.url))
  collected.push(JSON.stringify(credentials))
})

afterAll(async () => {
  await platform?.stop()
})

describe("leak search", () => {
  it("finds a planted secret in every encoding, and nothing in clean text", () => {
    const planted = Uint8Array.from({ length: 32 }, (_, index) => index * 7 + 1)
    const secrets = [
      ...byteSecrets("planted", planted),
      ...mnemonicSecrets("abandon ability able about above"),
    ]
    for (const secret of secrets) {
      expect(leaksIn(`key=${secret.value};`, secrets)).toContain(secret.name)
      if (secret.case_insensitive) {
        expect(leaksIn(`{"log":"signing with ${secret.value.toUpperCase()}"}`, secrets)).toContain(
          secret.name,
        )
      }
    }
    expect(leaksIn('{"msg":"ABILITY-able_about"}', secrets)).toContain("mnemonic words 2..4")
    expect(leaksIn("nothing secret here: abandon about", secrets)).toEqual([])
  })
})

describe("a tenant's whole journey", () => {
  it("creates wallets on all ten chains, pays socially and sends on chain, and reads everything back", async () => {
    for (const chain of chains) {
      const created = keep(
        await client.post<WalletView>("/api/v1/wallets", {
          external_id: `leak-${chain}`,
          label: chain,
          chain,
        }),
      )
      wallets.push(expectOk(created, 201))
    }
    const payee = expectOk(
      keep(
        await client.post<WalletView>("/api/v1/wallets", {
          external_id: "leak-payee",
          label: "payee",
          chain: "ethereum",
        }),
      ),
      201,
    )
    wallets.push(payee)
    const sender = wallets[0] as WalletView
    keep(
      await client.post("/api/v1/sandbox/faucet", {
        wallet_id: sender.wallet_id,
        token: "USDC",
        amount: "100",
      }),
    )
    const identity = expectOk(
      keep(
        await client.post<typeof Identity.Type>("/api/v1/identities", {
          wallet_id: payee.wallet_id,
          kind: "email",
          value: "payee@example.com",
        }),
      ),
      201,
    )
    const paid = expectOk(
      keep(
        await client.post<typeof Transaction.Type>("/api/social-payments/pay", {
          recipient: identity.value,
          amount: "5",
          token: "USDC",
          from_wallet: sender.wallet_id,
        }),
      ),
    )
    // One on-chain transfer per family that runs here, each to another custody wallet of its chain.
    const sendOnChain = async (chain: CustodyChain, token: string) => {
      const from = wallets.find((wallet) => wallet.chain === chain) as WalletView
      const to = expectOk(
        keep(
          await client.post<WalletView>("/api/v1/wallets", {
            external_id: `leak-${chain}-recipient`,
            label: `${chain} recipient`,
            chain,
          }),
        ),
        201,
      )
      wallets.push(to)
      if (chain !== "ethereum")
        keep(await client.post("/api/v1/sandbox/faucet", { wallet_id: from.wallet_id, token, amount: "100" }))
      const requested = expectOk(
        keep(
          await client.post<typeof ChainTransfer.Type>("/api/v2/transfers", {
            from_wallet: from.wallet_id,
            to_address: chain === "ethereum" ? privateKeyToAccount(generatePrivateKey()).address : to.address,
            amount: "10",
            token,
            chain,
          }),
        ),
        202,
      )
      const started = Date.now()
      let current = requested
      while (current.status === "pending" && Date.now() - started < completion_wait_ms_max) {
        await new Promise((resolve) => setTimeout(resolve, 200))
        current = expectOk(
          keep(await client.get<typeof ChainTransfer.Type>(`/api/v2/transfers/${requested.transaction_id}`)),
        )
      }
      expect(current.status, `${chain} transfer`).toBe("completed")
    }
    await Promise.all([
      sendOnChain("ethereum", "USDC"),
      sendOnChain("solana", "USDC"),
      sendOnChain("ton", "USDT"),
    ])

    const reads = [
      "/api/v1/wallets?limit=100",
      "/api/v1/transactions?limit=100",
      `/api/v1/transactions/${paid.transaction_id}`,
      "/api/v1/identities",
      "/api/v2/chains",
      "/api/v1/tenant",
      "/api/v1/api-keys",
    ]
    for (const wallet of wallets) {
      reads.push(`/api/v1/wallets/${wallet.wallet_id}`, `/api/v1/wallets/${wallet.wallet_id}/balance`)
    }
    for (const route of reads) expect(keep(await client.get(route)).status, route).toBe(200)
    keep(await apiClient(platform.url).get("/openapi.json"))
  })

  it("shows no KEK, mnemonic, seed, entropy or wallet private key in any response or log line", async () => {
    const kek_file = path.join(platform.dataDir, "custody.kek")
    expect(fs.existsSync(kek_file), "the platform keeps its KEK in DATA_DIR").toBe(true)
    const { kek } = await resolveKek({ env: {}, dataDir: platform.dataDir })
    const pool = platform.database.pool
    const mnemonic = await loadOrCreateMasterMnemonic(pool, "sandbox", kek)
    const seed = await loadOrCreateMasterSeed(pool, "sandbox", kek)
    const tenant = await pool.query<{ custody_index: number }>(
      "select custody_index from platform.tenants where tenant_id = $1",
      [credentials.tenant_id],
    )
    const tenant_index = tenant.rows[0]?.custody_index
    expect(tenant_index).toBeTypeOf("number")

    const secrets: Secret[] = [
      ...mnemonicSecrets(mnemonic),
      { name: "mnemonic", value: mnemonic, case_insensitive: true },
      ...hexSecrets("seed", seed),
      ...hexSecrets("entropy", mnemonicToEntropy(mnemonic, wordlist)),
      ...byteSecrets("KEK", kek),
    ]
    expect(wallets).toHaveLength(chains.length + 4)
    for (const wallet of wallets) {
      const found = await pool.query<{ derivation_index: number }>(
        "select derivation_index from platform.wallets where wallet_id = $1",
        [wallet.wallet_id],
      )
      const wallet_index = found.rows[0]?.derivation_index as number
      const key = deriveSigningKey(seed, {
        chain: wallet.chain as CustodyChain,
        tenant_index: tenant_index as number,
        wallet_index,
      })
      const name = `${wallet.chain} wallet ${wallet.wallet_id} private key`
      const secret = key.exposeSecret()
      secrets.push(...byteSecrets(name, secret))
      if (key.curve === "ed25519") {
        // Solana's secret key form: the 32-byte seed followed by the public key.
        const keypair = new Uint8Array([...secret, ...key.public_key])
        secrets.push(...byteSecrets(`${name} (64-byte keypair)`, keypair))
      }
    }

    const output = platform.output()
    expect(output, "the search covers the process's log").toContain("transfer worker running")
    expect(leaksIn([...collected, output].join("\n"), secrets)).toEqual([])
  })
})
