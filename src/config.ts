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
  }
}
