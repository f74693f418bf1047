/**
 * Everything the API handlers need, as one service: the database, the ledger writer, credentials,
 * custody, rate limits, the outbox and the platform's settings. Built in the composition root.
 */
import { Context, type Effect } from "effect"
import type pg from "pg"
import type { Environment } from "../../domain/platform/scopes.ts"
import type { Custody as VaultCustody } from "../custody/vault.ts"
import type { LedgerWriterService } from "../ledger/writer.ts"
import type { WebhookDelivery } from "../webhooks/store.ts"
import type { KeyAuthenticator } from "./credentials.ts"
import type { EnqueueEvents } from "./outbox.ts"
import type { PartyResolver } from "./parties.ts"
import type { makeRateLimiter } from "./rate-limit.ts"
import type { WalletReader } from "./wallets.ts"

/** What the API may do with custody: wallet addresses (signing keys stay with the transfer worker). */
export type Custody = Pick<VaultCustody, "addressFor">

export interface PlatformSettings {
  /** How long a payment to an unlinked identifier waits for it before it is released. */
  readonly pending_payment_expiry_ms: number
  /** `TRUSTED_PROXY_HOPS`: see src/http/client-address.ts. */
  readonly trusted_proxy_hops: number
}

export const defaultSettings: PlatformSettings = {
  pending_payment_expiry_ms: 7 * 24 * 3_600_000,
  trusted_proxy_hops: 0,
}

export interface PlatformDeps {
  readonly pool: pg.Pool
  readonly writer: LedgerWriterService
  readonly keys: KeyAuthenticator
  readonly limiter: ReturnType<typeof makeRateLimiter>
  readonly custody: Custody
  readonly wallets: WalletReader
  /** The default wallet and the recipient's linked wallet of a social payment. */
  readonly parties: PartyResolver
  readonly enqueue: EnqueueEvents
  readonly settings: PlatformSettings
  /**
   * Runs `effect` after the request has its answer, in a fiber the platform owns: shutdown
   * interrupts it. For work whose failure the answer must not show (it is logged by `effect`).
   */
  readonly background: (effect: Effect.Effect<void>) => Effect.Effect<void>
  /** Schedules a fresh attempt of a webhook delivery of the tenant (undefined: no such delivery). */
  /** Given a client, the redelivery is made in its transaction (with the request's stored response). */
  readonly redeliver: (
    scope: { readonly tenant_id: string; readonly environment: Environment },
    delivery_id: string,
    client?: pg.PoolClient,
  ) => Promise<WebhookDelivery | undefined>
}

export class Platform extends Context.Service<Platform, PlatformDeps>()("platform/Platform") {}
