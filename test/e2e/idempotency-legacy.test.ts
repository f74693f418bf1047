// Mutation-review test: a stored response whose request's fingerprint was never kept (a key copied
// by a migration, as migration 502 did for earlier on-chain transfers: `anyRequestOf`) is replayed
// to any request of its operation, and is another request (409) to every other operation.
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { anyRequestOf } from "../../src/platform/idempotency.ts"
import { expectError } from "../support/api-expect.ts"
import { createWallet } from "../support/api-fixtures.ts"
import { type RunningPlatform, registerTenant, startPlatform } from "../support/platform-process.ts"

let platform: RunningPlatform
beforeAll(async () => {
  platform = await startPlatform()
})
afterAll(async () => {
  await platform?.stop()
})

describe("a stored response without its request's fingerprint", () => {
  it("replays to any request of its operation, and is 409 to another operation", async () => {
    const { client, credentials } = await registerTenant(platform.url, "basic")
    const key = `legacy-${Date.now()}`
    const first = await client.post<{ wallet_id: string }>(
      "/api/v1/wallets",
      { external_id: "legacy-1", label: "legacy-1", chain: "ethereum" },
      { "idempotency-key": key },
    )
    expect(first.status).toBe(201)
    // As a migration copies a key whose request was never fingerprinted.
    const updated = await platform.database.pool.query(
      "update platform.idempotency_keys set fingerprint = $3 where tenant_id = $1 and idempotency_key = $2",
      [credentials.tenant_id, key, anyRequestOf("wallets.create")],
    )
    expect(updated.rowCount).toBe(1)
    const retry = await client.post<{ wallet_id: string }>(
      "/api/v1/wallets",
      { external_id: "legacy-1", label: "a label written differently", chain: "ethereum" },
      { "idempotency-key": key },
    )
    expect(retry.status).toBe(201)
    expect(retry.headers.get("idempotent-replayed")).toBe("true")
    expect(retry.body.wallet_id).toBe(first.body.wallet_id)
    const other = await createWallet(client, "ethereum", "legacy-2")
    expectError(
      await client.post(`/api/v1/wallets/${other.wallet_id}/default`, undefined, { "idempotency-key": key }),
      409,
      "idempotency_key_reused",
    )
  })
})
