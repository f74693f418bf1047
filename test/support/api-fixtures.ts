/**
 * Small steps end-to-end tests take over HTTP again and again.
 */
import type { Wallet } from "../../src/http/api.ts"
import { expectOk } from "./api-expect.ts"
import type { ApiClient } from "./platform-process.ts"

/** Creates a wallet on `chain` whose external id is also its label; 201 expected. */
export const createWallet = async (api: ApiClient, chain: string, external_id: string) =>
  expectOk(
    await api.post<typeof Wallet.Type>("/api/v1/wallets", { external_id, label: external_id, chain }),
    201,
  )
