/**
 * Platform configuration, read once from the environment. Every variable is documented in the README.
 */
import * as path from "node:path"

export type LogLevel = "debug" | "info" | "warn" | "error"

export interface PlatformConfig {
  readonly port: number
  readonly dataDir: string
  /** External PostgreSQL; `undefined` starts the embedded server in `dataDir/pg`. */
  readonly databaseUrl: string | undefined
  readonly logLevel: LogLevel
  /** How long a payment to an unlinked identifier waits before its funds are released. */
  readonly pendingPaymentExpiryMs: number
  /** First webhook retry delay; it doubles per failure (capped at 6 h). Tests shorten it. */
  readonly webhookRetryBaseMs: number
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
  return {
    port,
    dataDir: path.resolve(env.DATA_DIR ?? "./.data"),
    databaseUrl,
    logLevel: logLevel as LogLevel,
    pendingPaymentExpiryMs:
      positiveInteger(env, "PAYMENT_PENDING_EXPIRY_SECONDS", 7 * 24 * 3600, 365 * 24 * 3600) * 1000,
    webhookRetryBaseMs: positiveInteger(env, "WEBHOOK_RETRY_BASE_MS", 30_000, 3_600_000),
  }
}
