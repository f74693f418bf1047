/**
 * The custody vault: one BIP-39 master seed per environment, stored encrypted under a
 * key-encryption key (KEK) from configuration, and the custody service that turns it into wallet
 * addresses.
 *
 * What is stored is the 32 bytes of mnemonic entropy, not the 64-byte seed. The entropy is the
 * 24-word mnemonic itself, so an operator can write it down and restore it into any BIP-39 wallet;
 * the seed is a one-way PBKDF2 output from which no mnemonic can be recovered. The price is one
 * PBKDF2-HMAC-SHA512 (2048 rounds, milliseconds) per environment and process, on first use. There is
 * no BIP-39 passphrase: the KEK already guards the stored entropy, and a second secret would only be
 * one more thing to lose.
 *
 * Encryption is AES-256-GCM with a fresh 96-bit IV (each row is written once) and associated data
 * naming the table and the environment: a sandbox ciphertext copied into the production row fails
 * authentication instead of quietly serving sandbox keys in production.
 */
import { createHash, randomBytes } from "node:crypto"
import * as fs from "node:fs/promises"
import * as path from "node:path"
import { entropyToMnemonic, generateMnemonic, mnemonicToEntropy, mnemonicToSeed } from "@scure/bip39"
import { wordlist } from "@scure/bip39/wordlists/english.js"
import type pg from "pg"
import { assert } from "../../domain/assert.ts"
import {
  type CustodyChain,
  deriveAddress,
  deriveSigningKey,
  type SigningKey,
} from "../../domain/custody/derive.ts"
import { ConfigError } from "../config.ts"
import type { Migration } from "../db/migrate.ts"
import { aeadOpen, aeadSeal } from "./aead.ts"

export type CustodyEnvironment = "sandbox" | "production"
const custodyEnvironments: ReadonlyArray<string> = ["sandbox", "production"]

/** Migration range 400-499: custody. */
export const custodyMigrations: ReadonlyArray<Migration> = [
  {
    version: 400,
    name: "custody master seeds",
    sql: `
      create schema if not exists platform_custody;
      create table platform_custody.master_seeds (
        environment text primary key check (environment in ('sandbox', 'production')),
        ciphertext bytea not null,
        iv bytea not null check (octet_length(iv) = 12),
        auth_tag bytea not null check (octet_length(auth_tag) = 16),
        kek_id text not null,
        created_at timestamptz not null default now()
      );
      comment on table platform_custody.master_seeds is
        'One BIP-39 master seed per environment: its mnemonic entropy under AES-256-GCM with the custody KEK. Never plaintext.';`,
  },
]

const kek_length_bytes = 32
/** 256 bits of entropy: a 24-word mnemonic. */
const entropy_length_bits = 256
const kek_file_name = "custody.kek"

/** The configured KEK cannot open the stored seed: another key, or an altered row. */
export class CustodyKekMismatch extends Error {
  override readonly name = "CustodyKekMismatch"
}

interface SealedEntropy {
  readonly ciphertext: Buffer
  readonly iv: Buffer
  readonly auth_tag: Buffer
  readonly kek_id: string
}

/**
 * The environment's master mnemonic (24 words), created on first use. Two processes racing on
 * first use both end with the one row that won the insert. For backup ceremonies; wallets use
 * `loadOrCreateMasterSeed`. Never log the result.
 * @example const words = await loadOrCreateMasterMnemonic(pool, "production", kek)
 */
export async function loadOrCreateMasterMnemonic(
  pool: pg.Pool,
  environment: CustodyEnvironment,
  kek: Uint8Array,
): Promise<string> {
  assert(custodyEnvironments.includes(environment), `unknown custody environment ${String(environment)}`)
  assert(kek.length === kek_length_bytes, "a custody KEK is 32 bytes")
  let sealed = await readSealed(pool, environment)
  if (sealed === null) {
    const generated = mnemonicToEntropy(generateMnemonic(wordlist, entropy_length_bits), wordlist)
    const fresh = seal(generated, environment, kek)
    generated.fill(0)
    await pool.query(
      `insert into platform_custody.master_seeds (environment, ciphertext, iv, auth_tag, kek_id)
       values ($1, $2, $3, $4, $5) on conflict (environment) do nothing`,
      [environment, fresh.ciphertext, fresh.iv, fresh.auth_tag, fresh.kek_id],
    )
    sealed = await readSealed(pool, environment)
  }
  assert(sealed !== null, "a master seed row exists after its insert")
  const entropy = unseal(sealed, environment, kek)
  try {
    return entropyToMnemonic(entropy, wordlist)
  } finally {
    entropy.fill(0)
  }
}

/**
 * The environment's 64-byte BIP-39 seed (empty passphrase), created on first use; see
 * `loadOrCreateMasterMnemonic`. Throws `CustodyKekMismatch` when `kek` does not open the stored row.
 * @example const seed = await loadOrCreateMasterSeed(pool, "sandbox", kek)
 */
export async function loadOrCreateMasterSeed(
  pool: pg.Pool,
  environment: CustodyEnvironment,
  kek: Uint8Array,
): Promise<Uint8Array> {
  return mnemonicToSeed(await loadOrCreateMasterMnemonic(pool, environment, kek), "")
}

async function readSealed(pool: pg.Pool, environment: CustodyEnvironment): Promise<SealedEntropy | null> {
  const result = await pool.query<SealedEntropy>(
    "select ciphertext, iv, auth_tag, kek_id from platform_custody.master_seeds where environment = $1",
    [environment],
  )
  return result.rows[0] ?? null
}

/** Binds a ciphertext to its table, format version and environment. */
function associatedData(environment: CustodyEnvironment): Buffer {
  return Buffer.from(`platform_custody.master_seeds/v1/${environment}`, "utf8")
}

/** A fingerprint that names a KEK in the row (for rotation and errors) without revealing it. */
function kekId(kek: Uint8Array): string {
  const digest = createHash("sha256").update("platform custody kek id/v1\n").update(kek).digest("hex")
  return `sha256:${digest.slice(0, 16)}`
}

function seal(entropy: Uint8Array, environment: CustodyEnvironment, kek: Uint8Array): SealedEntropy {
  const { iv, ciphertext, tag } = aeadSeal(kek, associatedData(environment), entropy)
  return { ciphertext, iv, auth_tag: tag, kek_id: kekId(kek) }
}

function unseal(sealed: SealedEntropy, environment: CustodyEnvironment, kek: Uint8Array): Uint8Array {
  const entropy = aeadOpen(kek, associatedData(environment), {
    iv: sealed.iv,
    ciphertext: sealed.ciphertext,
    tag: sealed.auth_tag,
  })
  if (entropy === undefined) {
    const configured = kekId(kek)
    const why =
      sealed.kek_id === configured
        ? "the key matches the row's kek_id, so the row was altered or moved from another environment"
        : `the row was sealed under ${sealed.kek_id}, the configured key is ${configured}`
    throw new CustodyKekMismatch(
      `CUSTODY_KEK does not decrypt the stored master seed (${environment}): ${why}`,
    )
  }
  assert(entropy.length === entropy_length_bits / 8, "the stored entropy is 32 bytes")
  return entropy
}

export interface ResolvedKek {
  readonly kek: Uint8Array
  /** `env`: from CUSTODY_KEK; `file`: generated for local development into `<dataDir>/custody.kek`. */
  readonly source: "env" | "file"
}

/**
 * The custody KEK: `CUSTODY_KEK` (64 hex characters, or the base64 of 32 bytes) when set; otherwise,
 * for local development, the key in `<dataDir>/custody.kek`, generated with mode 0600 on first use.
 * Throws `ConfigError` naming the variable (or file) when the value is malformed, never echoing it.
 * @example const { kek, source } = await resolveKek({ env: process.env, dataDir: config.dataDir })
 */
export async function resolveKek(options: {
  readonly env: NodeJS.ProcessEnv
  readonly dataDir: string
}): Promise<ResolvedKek> {
  const text = options.env.CUSTODY_KEK
  if (text !== undefined && text !== "") return { kek: parseKek(text, "CUSTODY_KEK"), source: "env" }
  return { kek: await readOrCreateKekFile(path.join(options.dataDir, kek_file_name)), source: "file" }
}

function parseKek(text: string, origin: string): Uint8Array {
  const trimmed = text.trim()
  let decoded: Buffer | null = null
  if (/^[0-9a-fA-F]{64}$/.test(trimmed)) decoded = Buffer.from(trimmed, "hex")
  else {
    const base64 = Buffer.from(trimmed, "base64")
    // Buffer's decoder skips junk; the round trip accepts only canonical base64.
    if (base64.length === kek_length_bytes && base64.toString("base64") === trimmed) decoded = base64
  }
  if (decoded === null) {
    throw new ConfigError(
      `${origin} must be 64 hex characters or the base64 of 32 bytes ` +
        `(got ${trimmed.length} characters; the value is not shown)`,
    )
  }
  // A copy of our own: small Buffers share a pool, which would keep the key beside unrelated data.
  const kek = Uint8Array.from(decoded)
  decoded.fill(0)
  return kek
}

async function readOrCreateKekFile(file: string): Promise<Uint8Array> {
  const existing = await readKekFile(file)
  if (existing !== null) return existing
  await fs.mkdir(path.dirname(file), { recursive: true, mode: 0o700 })
  // Written whole under a private name, then linked into place: link fails if another process won
  // the race, so nobody ever reads a half-written key and everybody ends with the winner's key.
  const temporary = `${file}.${process.pid}.${randomBytes(6).toString("hex")}.tmp`
  const handle = await fs.open(temporary, "wx", 0o600)
  try {
    await handle.writeFile(`${randomBytes(kek_length_bytes).toString("hex")}\n`, "utf8")
    await handle.sync()
  } finally {
    await handle.close()
  }
  try {
    await fs.link(temporary, file)
  } catch (error) {
    if (!hasErrorCode(error, "EEXIST")) throw error
  } finally {
    await fs.rm(temporary, { force: true })
  }
  const created = await readKekFile(file)
  assert(created !== null, "the custody KEK file exists after its creation")
  return created
}

async function readKekFile(file: string): Promise<Uint8Array | null> {
  try {
    return parseKek(await fs.readFile(file, "utf8"), file)
  } catch (error) {
    if (hasErrorCode(error, "ENOENT")) return null
    throw error
  }
}

function hasErrorCode(error: unknown, code: string): boolean {
  return error instanceof Error && "code" in error && error.code === code
}

/** Derives wallet addresses from the environments' master seeds. */
export interface Custody {
  /**
   * The address of a tenant's wallet on `chain`; loads (or creates) the environment's seed once.
   * Rejects with `CustodyKekMismatch` when the KEK does not open the stored seed.
   */
  readonly addressFor: (
    environment: CustodyEnvironment,
    chain: CustodyChain,
    tenant_index: number,
    wallet_index: number,
  ) => Promise<string>
  /**
   * The signing key of the same wallet, for one signature; it prints as `[redacted]`. Never log,
   * store or return it.
   */
  readonly signingKeyFor: (
    environment: CustodyEnvironment,
    chain: CustodyChain,
    tenant_index: number,
    wallet_index: number,
  ) => Promise<SigningKey>
}

/** Wallet addresses one process remembers (oldest forgotten first). */
const address_cache_size_max = 100_000

/**
 * The custody service over `pool`, keeping each environment's decrypted seed in memory after its
 * first use (a failed load is retried on the next call), and the addresses it derived. Signing keys
 * are derived anew for every signature and never kept.
 * @example await makeCustody(pool, kek).addressFor("sandbox", "ethereum", 0, 0) // "0x..."
 */
export function makeCustody(pool: pg.Pool, kek: Uint8Array): Custody {
  const key = kek.slice()
  const seeds = new Map<CustodyEnvironment, Promise<Uint8Array>>()
  const seedFor = (environment: CustodyEnvironment): Promise<Uint8Array> => {
    const cached = seeds.get(environment)
    if (cached !== undefined) return cached
    const loading = loadOrCreateMasterSeed(pool, environment, key)
    seeds.set(environment, loading)
    loading.catch(() => seeds.delete(environment))
    return loading
  }
  // Addresses are public (the API shows them) and cost a key derivation each: remembered, bounded.
  const addresses = new Map<string, string>()
  return {
    addressFor: async (environment, chain, tenant_index, wallet_index) => {
      const cache_key = `${environment}:${chain}:${tenant_index}:${wallet_index}`
      const cached = addresses.get(cache_key)
      if (cached !== undefined) return cached
      const address = deriveAddress(await seedFor(environment), { chain, tenant_index, wallet_index })
      if (addresses.size >= address_cache_size_max) {
        const oldest = addresses.keys().next().value
        if (oldest !== undefined) addresses.delete(oldest)
      }
      addresses.set(cache_key, address)
      return address
    },
    signingKeyFor: async (environment, chain, tenant_index, wallet_index) =>
      deriveSigningKey(await seedFor(environment), { chain, tenant_index, wallet_index }),
  }
}
