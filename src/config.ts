/**
 * Platform configuration, read once from the environment. Every variable is documented in the README.
 */
import * as path from "node:path"
import { type ChainIdentifier, chainIdentifiers } from "../domain/chains/registry.ts"
import { type EvmChain, evmChains } from "../domain/custody/derive.ts"

export type LogLevel = "debug" | "info" | "warn" | "error"

export interface PlatformConfig {
  readonly port: number
  readonly dataDir: string
  /** External PostgreSQL; `undefined` starts the embedded server in `dataDir/pg`. */
  readonly databaseUrl: string | undefined
  readonly logLevel: LogLevel
  /** How long a payment to an unlinked identifier waits before its funds are released. */
  readonly pendingPaymentExpiryMs: number
  /** Proxies in front of the platform whose `X-Forwarded-For` entries name the client (0: none). */
  readonly trustedProxyHops: number
  /** First webhook retry delay; it doubles per failure (capped at 6 h). Tests shorten it. */
  readonly webhookRetryBaseMs: number
  /** Between two scheduled reconciliations of ledger liabilities with on-chain custody balances. */
  readonly reconciliationIntervalMs: number
  /** Between two sweeps for pending payments whose recipient is linked (left by a crash). */
  readonly settlementSweepIntervalMs: number
  /**
   * How long the platform waits for one database statement, or for a connection, before it gives
   * up on the database (the request is answered 503 `database_unavailable`).
   */
  readonly databaseQueryTimeoutMs: number
  /** EVM chains the sandbox runs locally (one anvil each); empty: none. */
  readonly sandboxEvmChains: ReadonlyArray<EvmChain>
  /** Whether the sandbox runs its local Solana chain (LiteSVM in this process). */
  readonly sandboxSolana: boolean
  /** Whether the sandbox runs its local TON chain (@ton/sandbox in this process). */
  readonly sandboxTon: boolean
  /** USD per whole native token, by chain (decimal strings), for gas estimates in USD. */
  readonly gasUsdRates: ReadonlyMap<string, string>
  /**
   * Production endpoints, from `CHAIN_RPC_URL_<CHAIN>`: JSON-RPC for the EVM chains and Solana, a TON
   * Center compatible JSON-RPC API for TON, a java-tron full node's HTTP API for Tron.
   */
  readonly chainRpcUrls: ReadonlyMap<ChainIdentifier, string>
  /** Their API keys where the provider wants one, from `CHAIN_API_KEY_<CHAIN>` (TON and Tron). */
  readonly chainApiKeys: ReadonlyMap<ChainIdentifier, string>
}

const positiveInteger = (env: NodeJS.ProcessEnv, name: string, fallback: number, max: number): number => {
  const text = env[name]
  if (text === undefined || text === "") return fallback
  const value = Number(text)
  if (!/^\d+$/.test(text) || value < 1 || value > max) {
    throw new ConfigError(`${name} must be an integer from 1 to ${max}, got ${JSON.stringify(text)}`)
  }
  return value
}

const logLevels: ReadonlyArray<LogLevel> = ["debug", "info", "warn", "error"]

export class ConfigError extends Error {
  override readonly name = "ConfigError"
}

/** `SANDBOX_EVM_CHAINS`: a comma list of EVM chains; unset means all seven, empty means none. */
const sandboxEvmChains = (env: NodeJS.ProcessEnv): ReadonlyArray<EvmChain> => {
  const text = env.SANDBOX_EVM_CHAINS
  if (text === undefined) return evmChains
  const names = text
    .split(",")
    .map((name) => name.trim().toLowerCase())
    .filter((name) => name !== "")
  for (const name of names) {
    if (!(evmChains as ReadonlyArray<string>).includes(name)) {
      throw new ConfigError(
        `SANDBOX_EVM_CHAINS: ${JSON.stringify(name)} is not one of ${evmChains.join(", ")}`,
      )
    }
  }
  return [...new Set(names as Array<EvmChain>)]
}

/** A switch such as `SANDBOX_SOLANA`: `true` (the default when unset or empty) or `false`. */
const onByDefault = (env: NodeJS.ProcessEnv, name: string): boolean => {
  const text = (env[name] ?? "").trim().toLowerCase()
  if (text === "" || text === "true") return true
  if (text === "false") return false
  throw new ConfigError(`${name} must be true or false, got ${JSON.stringify(env[name])}`)
}

/** `GAS_USD_RATES`: `chain=rate` pairs, e.g. `ethereum=3500,polygon=0.5`. */
const gasUsdRates = (env: NodeJS.ProcessEnv): ReadonlyMap<string, string> => {
  const rates = new Map<string, string>()
  for (const pair of (env.GAS_USD_RATES ?? "").split(",")) {
    if (pair.trim() === "") continue
    const [chain, rate] = pair.split("=").map((part) => part.trim())
    if (chain === undefined || rate === undefined || !/^\d+(\.\d+)?$/.test(rate)) {
      throw new ConfigError(`GAS_USD_RATES must be chain=decimal pairs, got ${JSON.stringify(pair)}`)
    }
    rates.set(chain.toLowerCase(), rate)
  }
  return rates
}

/** `CHAIN_RPC_URL_<CHAIN>` of every chain that has one (any of the ten). */
const chainRpcUrls = (env: NodeJS.ProcessEnv): ReadonlyMap<ChainIdentifier, string> => {
  const urls = new Map<ChainIdentifier, string>()
  for (const chain of chainIdentifiers) {
    const url = env[`CHAIN_RPC_URL_${chain.toUpperCase()}`]
    if (url !== undefined && url !== "") urls.set(chain, url)
  }
  return urls
}

/** `CHAIN_API_KEY_<CHAIN>`: the key some providers want with the endpoint (TON Center, TronGrid). */
const chainApiKeys = (env: NodeJS.ProcessEnv): ReadonlyMap<ChainIdentifier, string> => {
  const keys = new Map<ChainIdentifier, string>()
  for (const chain of chainIdentifiers) {
    const key = env[`CHAIN_API_KEY_${chain.toUpperCase()}`]
    if (key !== undefined && key !== "") keys.set(chain, key)
  }
  return keys
}

/** A URL node-postgres reads as a server to connect to: the postgres: or postgresql: scheme and a host. */
const isPostgresUrl = (text: string): boolean => {
  try {
    const url = new URL(text)
    return (url.protocol === "postgres:" || url.protocol === "postgresql:") && url.hostname !== ""
  } catch {
    return false
  }
}

/** Reads and validates the configuration; throws `ConfigError` naming the bad variable. */
export const readConfig = (env: NodeJS.ProcessEnv = process.env): PlatformConfig => {
  const portText = env.PORT ?? "3000"
  const port = Number(portText)
  if (!/^\d+$/.test(portText) || port < 0 || port > 65535) {
    throw new ConfigError(`PORT must be an integer between 0 and 65535, got ${JSON.stringify(portText)}`)
  }
  const logLevel = (env.LOG_LEVEL ?? "info").toLowerCase()
  if (!logLevels.includes(logLevel as LogLevel)) {
    throw new ConfigError(`LOG_LEVEL must be one of ${logLevels.join(", ")}, got ${JSON.stringify(logLevel)}`)
  }
  const databaseUrl = env.DATABASE_URL === undefined || env.DATABASE_URL === "" ? undefined : env.DATABASE_URL
  if (databaseUrl !== undefined && !isPostgresUrl(databaseUrl)) {
    throw new ConfigError(
      "DATABASE_URL must be a PostgreSQL URL, postgres://user:password@host:5432/database (or postgresql://)",
    )
  }
  return {
    port,
    // Empty means unset, as for DATABASE_URL (it had meant the current directory).
    dataDir: path.resolve(env.DATA_DIR === undefined || env.DATA_DIR === "" ? "./.data" : env.DATA_DIR),
    databaseUrl,
    logLevel: logLevel as LogLevel,
    pendingPaymentExpiryMs:
      positiveInteger(env, "PAYMENT_PENDING_EXPIRY_SECONDS", 7 * 24 * 3600, 365 * 24 * 3600) * 1000,
    trustedProxyHops:
      env.TRUSTED_PROXY_HOPS === undefined || env.TRUSTED_PROXY_HOPS === "0"
        ? 0
        : positiveInteger(env, "TRUSTED_PROXY_HOPS", 0, 10),
    webhookRetryBaseMs: positiveInteger(env, "WEBHOOK_RETRY_BASE_MS", 30_000, 3_600_000),
    reconciliationIntervalMs: positiveInteger(env, "RECONCILIATION_INTERVAL_SECONDS", 60, 86_400) * 1000,
    settlementSweepIntervalMs: positiveInteger(env, "SETTLEMENT_SWEEP_INTERVAL_SECONDS", 5, 86_400) * 1000,
    databaseQueryTimeoutMs: positiveInteger(env, "DATABASE_QUERY_TIMEOUT_SECONDS", 30, 3_600) * 1000,
    sandboxEvmChains: sandboxEvmChains(env),
    sandboxSolana: onByDefault(env, "SANDBOX_SOLANA"),
    sandboxTon: onByDefault(env, "SANDBOX_TON"),
    gasUsdRates: gasUsdRates(env),
    chainRpcUrls: chainRpcUrls(env),
    chainApiKeys: chainApiKeys(env),
  }
}
