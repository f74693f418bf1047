/**
 * The platform's HTTP API definition: schemas only (handlers live in src/http/handlers/). Paths of
 * the seed document are kept exactly (`/api/tenant/register`, `/api/social-payments/pay`); the rest
 * lives under `/api/v1`. Every authenticated endpoint names the scope it needs (`RequiredScope`);
 * the Authentication middleware enforces it. Errors are `ApiError` (src/http/errors.ts), rendered as
 * `{"error":{...}}`; the OpenAPI document lists them for every operation.
 */
import { Context, Schema, SchemaTransformation } from "effect"
import {
  HttpApi,
  HttpApiEndpoint,
  HttpApiGroup,
  HttpApiMiddleware,
  HttpApiSecurity,
  OpenApi,
} from "effect/http-api"
import type { ApiScope } from "../../domain/platform/scopes.ts"
import type { Caller } from "../platform/credentials.ts"
import { apiDescription, documentConventions } from "./openapi.ts"

/**
 * Every string the API takes: PostgreSQL text cannot hold U+0000, so it is refused at the edge
 * (400 naming the field) instead of failing deep inside a statement.
 */
const Text = Schema.String.check(
  Schema.makeFilter((value: string) =>
    value.includes("\u0000") ? "must not contain the NUL character (U+0000)" : undefined,
  ),
)

export const Healthy = Schema.Struct({ status: Schema.Literal("healthy") })

/** The 503 body: what failed, in plain JSON (no internal tag). */
export const Unhealthy = Schema.Struct({
  status: Schema.Literal("unhealthy"),
  database: Schema.String,
}).annotate({
  identifier: "Unhealthy",
  httpApiStatus: 503,
})

/** The scope an endpoint requires (an endpoint annotation read by the Authentication middleware). */
export class RequiredScope extends Context.Service<RequiredScope, ApiScope>()(
  "platform/http/RequiredScope",
) {}

/**
 * An endpoint a production key may still call while its tenant's verification is rejected (every
 * other endpoint answers it 403 `tenant_not_verified`): what the tenant needs to recover, reading its
 * state, submitting its verification again, and listing and revoking its keys.
 */
export class OpenWhileSuspended extends Context.Service<OpenWhileSuspended, true>()(
  "platform/http/OpenWhileSuspended",
) {}

/** The authenticated tenant, environment and key of the current request. */
export class CurrentCaller extends Context.Service<CurrentCaller, Caller>()("platform/http/CurrentCaller") {}

export class Authentication extends HttpApiMiddleware.Service<Authentication, { provides: CurrentCaller }>()(
  "platform/http/Authentication",
  { security: { bearer: HttpApiSecurity.bearer } },
) {}

interface Annotatable<Self> {
  annotate<I, S>(key: Context.Key<I, S>, value: S): Self
}

const scoped = <E extends Annotatable<E>>(endpoint: E, scope: ApiScope): E =>
  endpoint.annotate(RequiredScope, scope).annotate(OpenApi.Description, `Requires scope \`${scope}\`.`)

/** `scoped`, and open to a suspended production key (see `OpenWhileSuspended`). */
const scopedOpenWhileSuspended = <E extends Annotatable<E>>(endpoint: E, scope: ApiScope): E =>
  endpoint
    .annotate(RequiredScope, scope)
    .annotate(OpenWhileSuspended, true)
    .annotate(
      OpenApi.Description,
      `Requires scope \`${scope}\`; open to a production key while the tenant's verification is rejected.`,
    )

// --- Shared shapes ----------------------------------------------------------------------------

const Timestamp = Schema.String
const Amount = Schema.Union([Schema.Finite, Text]).annotate({
  description: 'A decimal string ("12.50") or a JSON number; at most the token\'s decimals.',
})
const Page = <S extends Schema.Top>(item: S) =>
  Schema.Struct({
    data: Schema.Array(item),
    has_more: Schema.Boolean,
    next_cursor: Schema.NullOr(Schema.String),
  })
const ListQuery = { limit: Schema.optional(Text), starting_after: Schema.optional(Text) }
/** Keys are checked by the handler (length, NUL), which names the key; a key schema would say "excess property". */
const Metadata = Schema.Record(Schema.String, Text)

// Responses are built by the platform, not decoded from clients: plain strings, no input checks.
export const Wallet = Schema.Struct({
  wallet_id: Schema.String,
  address: Schema.String,
  chain: Schema.String,
  external_id: Schema.String,
  label: Schema.String,
  is_default: Schema.Boolean,
  created_at: Timestamp,
}).annotate({ identifier: "Wallet" })

export const Balance = Schema.Struct({
  wallet_id: Schema.String,
  tokens: Schema.Array(
    Schema.Struct({
      token: Schema.String,
      amount: Schema.String,
      chain: Schema.String,
      reserved: Schema.String,
    }),
  ),
}).annotate({ identifier: "Balance" })

export const Identity = Schema.Struct({
  identity_id: Schema.String,
  wallet_id: Schema.String,
  kind: Schema.Literals(["phone", "email", "handle"]),
  value: Schema.String,
  status: Schema.Literals(["linked", "unlinked"]),
  linked_at: Timestamp,
  unlinked_at: Schema.NullOr(Timestamp),
}).annotate({ identifier: "Identity" })

export const Transaction = Schema.Struct({
  transaction_id: Schema.String,
  type: Schema.Literal("social_payment"),
  status: Schema.Literals(["pending", "completed", "failed"]),
  amount: Schema.String,
  fee: Schema.String,
  token: Schema.String,
  chain: Schema.String,
  recipient: Schema.String,
  from_wallet: Schema.String,
  to_wallet: Schema.NullOr(Schema.String),
  note: Schema.NullOr(Schema.String),
  metadata: Schema.Record(Schema.String, Schema.String),
  failure: Schema.NullOr(Schema.Struct({ code: Schema.String, message: Schema.String })),
  created_at: Timestamp,
  expires_at: Schema.NullOr(Timestamp),
  completed_at: Schema.NullOr(Timestamp),
  failed_at: Schema.NullOr(Timestamp),
}).annotate({ identifier: "Transaction" })

export const ApiKey = Schema.Struct({
  key_id: Schema.String,
  environment: Schema.Literals(["sandbox", "production"]),
  prefix: Schema.String,
  scopes: Schema.Array(Schema.String),
  name: Schema.NullOr(Schema.String),
  created_at: Timestamp,
  expires_at: Schema.NullOr(Timestamp),
  revoked_at: Schema.NullOr(Timestamp),
  status: Schema.Literals(["active", "expiring", "expired", "revoked"]),
}).annotate({ identifier: "ApiKey" })

export const NewApiKey = Schema.Struct({ ...ApiKey.fields, api_key: Schema.String }).annotate({
  identifier: "NewApiKey",
})

export const Tenant = Schema.Struct({
  tenant_id: Schema.String,
  email: Schema.String,
  company_name: Schema.String,
  plan: Schema.Literals(["basic", "professional", "enterprise"]),
  environment: Schema.Literals(["sandbox", "production"]),
  verification: Schema.Struct({
    status: Schema.Literals(["unverified", "verified", "rejected"]),
    kyc_level: Schema.Finite,
    reason: Schema.NullOr(Schema.String),
    decided_at: Schema.NullOr(Timestamp),
  }),
  created_at: Timestamp,
}).annotate({ identifier: "Tenant" })

export const Webhook = Schema.Struct({
  webhook_id: Schema.String,
  environment: Schema.Literals(["sandbox", "production"]),
  url: Schema.String,
  events: Schema.Array(Schema.String),
  enabled: Schema.Boolean,
  description: Schema.NullOr(Schema.String),
  secret_last4: Schema.String,
  /** While set, deliveries are signed with the old secret too. */
  previous_secret_expires_at: Schema.NullOr(Timestamp),
  created_at: Timestamp,
  updated_at: Timestamp,
}).annotate({ identifier: "Webhook" })

export const WebhookDelivery = Schema.Struct({
  delivery_id: Schema.String,
  event_id: Schema.String,
  event_type: Schema.String,
  webhook_id: Schema.String,
  status: Schema.Literals(["pending", "succeeded", "failed"]),
  attempt_count: Schema.Finite,
  next_attempt_at: Schema.NullOr(Timestamp),
  created_at: Timestamp,
  attempts: Schema.Array(
    Schema.Struct({
      attempt: Schema.Finite,
      started_at: Timestamp,
      latency_ms: Schema.Finite,
      response_status: Schema.NullOr(Schema.Finite),
      response_excerpt: Schema.NullOr(Schema.String),
      error: Schema.NullOr(Schema.String),
    }),
  ),
}).annotate({ identifier: "WebhookDelivery" })

export const ChainInfo = Schema.Struct({
  chain: Schema.String,
  name: Schema.String,
  family: Schema.Literals(["evm", "solana", "tron", "ton"]),
  chain_id: Schema.NullOr(Schema.Finite),
  native_token: Schema.Struct({ symbol: Schema.String, decimals: Schema.Finite }),
  confirmations: Schema.Struct({
    count: Schema.Finite,
    unit: Schema.Literals(["blocks", "slots", "masterchain_blocks"]),
    reason: Schema.String,
  }),
  tokens: Schema.Array(
    Schema.Struct({
      token: Schema.String,
      decimals: Schema.Finite,
      contract_address: Schema.NullOr(Schema.String),
    }),
  ),
  gas: Schema.NullOr(
    Schema.Struct({
      native: Schema.String.annotate({
        description: "The most a native transfer pays in fees now, in the native token (decimal string).",
      }),
      usd: Schema.NullOr(Schema.String).annotate({
        description: "The same in USD (rounded up to 6 decimals); null without a configured rate.",
      }),
    }),
  ).annotate({
    description: "Live fee estimate from the chain's adapter; null when none runs (see gas_status).",
  }),
  gas_status: Schema.Literals(["live", "unavailable"]),
}).annotate({ identifier: "Chain" })

// --- Groups -----------------------------------------------------------------------------------

export class SystemApi extends HttpApiGroup.make("system", { topLevel: true })
  .add(HttpApiEndpoint.get("health", "/health", { success: Healthy, error: Unhealthy }))
  .add(HttpApiEndpoint.get("apiHealth", "/api/health", { success: Healthy, error: Unhealthy })) {}

export class RegistrationApi extends HttpApiGroup.make("registration", { topLevel: true }).add(
  HttpApiEndpoint.post("register", "/api/tenant/register", {
    payload: Schema.Struct({
      email: Text,
      password: Text,
      company_name: Text,
      plan: Text,
    }),
    success: Schema.Struct({
      tenant_id: Schema.String,
      api_key: Schema.String,
      environment: Schema.Literal("sandbox"),
    }).annotate({ httpApiStatus: 201 }),
  }),
) {}

export class TenantApi extends HttpApiGroup.make("tenant")
  .add(
    scopedOpenWhileSuspended(
      HttpApiEndpoint.get("get", "/api/v1/tenant", { success: Tenant }),
      "tenant:manage",
    ),
  )
  .add(
    scopedOpenWhileSuspended(
      HttpApiEndpoint.post("submitVerification", "/api/v1/tenant/verification", {
        payload: Schema.Struct({
          legal_name: Text,
          registration_number: Text,
          country: Text,
          representative: Schema.Struct({ name: Text, country: Text }),
          documents: Schema.optional(Schema.Array(Text)),
        }),
        success: Tenant,
      }),
      "tenant:manage",
    ),
  )
  .middleware(Authentication) {}

/**
 * The payload of an endpoint whose body fields are all optional, so the body itself may be left out:
 * no body (or JSON `null`) decodes as `empty`, exactly like `{}`. HttpApi decodes an empty body as
 * `null` when one of the payload's schemas encodes to `null`, hence the second schema. The OpenAPI
 * document shows an object or null; `optionalBody` marks the body not required.
 */
const omittableBody = <Fields extends Schema.Struct.Fields>(
  body: Schema.Struct<Fields>,
  empty: Schema.Struct<Fields>["Type"],
) =>
  [
    body,
    Schema.Null.pipe(
      Schema.decodeTo(
        Schema.toType(body),
        SchemaTransformation.transform({ decode: () => empty, encode: () => null }),
      ),
    ),
  ] as const

/** HttpApi documents every request body as required; an `omittableBody` is not. */
const optionalBody = (operation: Record<string, unknown>): Record<string, unknown> => ({
  ...operation,
  requestBody: { ...(operation.requestBody as Record<string, unknown>), required: false },
})

export class KeysApi extends HttpApiGroup.make("apiKeys")
  .add(
    scoped(
      HttpApiEndpoint.post("create", "/api/v1/api-keys", {
        payload: omittableBody(
          Schema.Struct({
            environment: Schema.optional(Text),
            scopes: Schema.optional(Schema.Array(Text)),
            name: Schema.optional(Text),
          }),
          {},
        ),
        success: NewApiKey.annotate({ httpApiStatus: 201 }),
      }).annotate(OpenApi.Transform, optionalBody),
      "keys:manage",
    ),
  )
  .add(
    scopedOpenWhileSuspended(
      HttpApiEndpoint.get("list", "/api/v1/api-keys", { query: ListQuery, success: Page(ApiKey) }),
      "keys:manage",
    ),
  )
  .add(
    scoped(
      HttpApiEndpoint.post("rotate", "/api/v1/api-keys/:key_id/rotate", {
        params: { key_id: Text },
        payload: omittableBody(Schema.Struct({ grace_period_seconds: Schema.optional(Schema.Finite) }), {}),
        success: Schema.Struct({ new_key: NewApiKey, old_key: ApiKey }),
      }).annotate(OpenApi.Transform, optionalBody),
      "keys:manage",
    ),
  )
  .add(
    scopedOpenWhileSuspended(
      HttpApiEndpoint.post("revoke", "/api/v1/api-keys/:key_id/revoke", {
        params: { key_id: Text },
        success: ApiKey,
      }),
      "keys:manage",
    ),
  )
  .middleware(Authentication) {}

export class WalletsApi extends HttpApiGroup.make("wallets")
  .add(
    scoped(
      HttpApiEndpoint.post("create", "/api/v1/wallets", {
        payload: Schema.Struct({ external_id: Text, label: Text, chain: Text }),
        success: Wallet.annotate({ httpApiStatus: 201 }),
      }),
      "wallets:write",
    ),
  )
  .add(
    scoped(
      HttpApiEndpoint.get("list", "/api/v1/wallets", {
        query: { ...ListQuery, external_id: Schema.optional(Text) },
        success: Page(Wallet),
      }),
      "wallets:read",
    ),
  )
  .add(
    scoped(
      HttpApiEndpoint.get("get", "/api/v1/wallets/:wallet_id", {
        params: { wallet_id: Text },
        success: Wallet,
      }),
      "wallets:read",
    ),
  )
  .add(
    scoped(
      HttpApiEndpoint.get("balance", "/api/v1/wallets/:wallet_id/balance", {
        params: { wallet_id: Text },
        success: Balance,
      }),
      "wallets:read",
    ),
  )
  .add(
    scoped(
      HttpApiEndpoint.post("makeDefault", "/api/v1/wallets/:wallet_id/default", {
        params: { wallet_id: Text },
        success: Wallet,
      }),
      "wallets:write",
    ),
  )
  .middleware(Authentication) {}

export class ChainsApi extends HttpApiGroup.make("chains")
  .add(
    scoped(
      HttpApiEndpoint.get("list", "/api/v2/chains", {
        success: Schema.Struct({ data: Schema.Array(ChainInfo) }),
      }),
      "wallets:read",
    ).annotate(
      OpenApi.Description,
      "Requires scope `wallets:read`. The ten chains wallets can be created on, with their family, " +
        "EIP-155 chain id (null where none exists), native gas token, confirmation policy and the tokens " +
        "carried in the caller's environment (in the sandbox: the contracts deployed on the local chains, " +
        "null where the chain does not run locally). `gas` is a live fee estimate read from the chain's " +
        'adapter with `gas_status` "live", or null with `gas_status` "unavailable" where no adapter runs ' +
        "or the node did not answer in time.",
    ),
  )
  .middleware(Authentication) {}

export class SandboxApi extends HttpApiGroup.make("sandbox")
  .add(
    scoped(
      HttpApiEndpoint.post("faucet", "/api/v1/sandbox/faucet", {
        payload: Schema.Struct({ wallet_id: Text, token: Text, amount: Amount }),
        success: Balance,
      }),
      "wallets:write",
    ),
  )
  .add(
    scoped(
      HttpApiEndpoint.post("simulateWebhook", "/api/v1/sandbox/webhooks/simulate", {
        payload: Schema.Struct({ event_type: Text, webhook_id: Schema.optional(Text) }),
        success: Schema.Struct({
          event_id: Schema.String,
          event_type: Schema.String,
        }).annotate({
          httpApiStatus: 202,
        }),
      }),
      "webhooks:write",
    ),
  )
  .middleware(Authentication) {}

export class IdentitiesApi extends HttpApiGroup.make("identities")
  .add(
    scoped(
      HttpApiEndpoint.post("link", "/api/v1/identities", {
        payload: Schema.Struct({ wallet_id: Text, kind: Text, value: Text }),
        success: Identity.annotate({ httpApiStatus: 201 }),
      }),
      "identities:write",
    ),
  )
  .add(
    scoped(
      HttpApiEndpoint.get("list", "/api/v1/identities", {
        query: { ...ListQuery, wallet_id: Schema.optional(Text) },
        success: Page(Identity),
      }),
      "identities:read",
    ),
  )
  .add(
    scoped(
      HttpApiEndpoint.get("get", "/api/v1/identities/:identity_id", {
        params: { identity_id: Text },
        success: Identity,
      }),
      "identities:read",
    ),
  )
  .add(
    scoped(
      HttpApiEndpoint.delete("unlink", "/api/v1/identities/:identity_id", {
        params: { identity_id: Text },
        success: Identity,
      }),
      "identities:write",
    ),
  )
  .middleware(Authentication) {}

export class PaymentsApi extends HttpApiGroup.make("payments")
  .add(
    scoped(
      HttpApiEndpoint.post("pay", "/api/social-payments/pay", {
        payload: Schema.Struct({
          recipient: Text,
          amount: Amount,
          token: Text,
          note: Schema.optional(Text),
          from_wallet: Schema.optional(Text),
          metadata: Schema.optional(Metadata),
          chain: Schema.optional(Text),
        }),
        success: Transaction,
      }),
      "payments:write",
    ),
  )
  .add(
    scoped(
      HttpApiEndpoint.get("get", "/api/v1/transactions/:transaction_id", {
        params: { transaction_id: Text },
        success: Transaction,
      }),
      "payments:read",
    ),
  )
  .add(
    scoped(
      HttpApiEndpoint.get("list", "/api/v1/transactions", {
        query: {
          ...ListQuery,
          wallet_id: Schema.optional(Text),
          status: Schema.optional(Text),
          created_gte: Schema.optional(Text),
          created_lt: Schema.optional(Text),
        },
        success: Page(Transaction),
      }),
      "payments:read",
    ),
  )
  .middleware(Authentication) {}

const WebhookInput = {
  url: Text,
  events: Schema.Array(Text),
  secret: Text,
  description: Schema.optional(Text),
}

export class WebhooksApi extends HttpApiGroup.make("webhooks")
  .add(
    scoped(
      HttpApiEndpoint.post("create", "/api/v1/webhooks", {
        payload: Schema.Struct(WebhookInput),
        success: Webhook.annotate({ httpApiStatus: 201 }),
      }),
      "webhooks:write",
    ),
  )
  .add(
    scoped(
      HttpApiEndpoint.get("list", "/api/v1/webhooks", { query: ListQuery, success: Page(Webhook) }),
      "webhooks:read",
    ),
  )
  .add(
    scoped(
      HttpApiEndpoint.get("get", "/api/v1/webhooks/:webhook_id", {
        params: { webhook_id: Text },
        success: Webhook,
      }),
      "webhooks:read",
    ),
  )
  .add(
    scoped(
      HttpApiEndpoint.patch("update", "/api/v1/webhooks/:webhook_id", {
        params: { webhook_id: Text },
        payload: Schema.Struct({
          url: Schema.optional(Text),
          events: Schema.optional(Schema.Array(Text)),
          secret: Schema.optional(Text),
          description: Schema.optional(Schema.NullOr(Text)),
          enabled: Schema.optional(Schema.Boolean),
        }),
        success: Webhook,
      }),
      "webhooks:write",
    ),
  )
  .add(
    scoped(
      HttpApiEndpoint.delete("delete", "/api/v1/webhooks/:webhook_id", {
        params: { webhook_id: Text },
        success: Schema.Struct({ webhook_id: Schema.String, deleted: Schema.Literal(true) }),
      }),
      "webhooks:write",
    ),
  )
  .add(
    scoped(
      HttpApiEndpoint.get("deliveries", "/api/v1/webhooks/:webhook_id/deliveries", {
        params: { webhook_id: Text },
        query: ListQuery,
        success: Page(WebhookDelivery),
      }),
      "webhooks:read",
    ),
  )
  .add(
    scoped(
      HttpApiEndpoint.post("redeliver", "/api/v1/webhooks/:webhook_id/deliveries/:delivery_id/redeliver", {
        params: { webhook_id: Text, delivery_id: Text },
        success: WebhookDelivery.annotate({ httpApiStatus: 202 }),
      }),
      "webhooks:write",
    ),
  )
  .middleware(Authentication) {}

export const ChainTransfer = Schema.Struct({
  transaction_id: Schema.String,
  type: Schema.Literal("chain_transfer"),
  status: Schema.Literals(["pending", "completed", "failed"]),
  amount: Schema.String,
  fee: Schema.String,
  token: Schema.String,
  chain: Schema.String,
  from_wallet: Schema.String,
  from_address: Schema.String,
  to_address: Schema.String,
  tx_hash: Schema.NullOr(Schema.String),
  proof: Schema.NullOr(
    Schema.Struct({
      tx_hash: Schema.String,
      block_number: Schema.String,
      block_hash: Schema.String,
      log_index: Schema.NullOr(Schema.Finite),
      confirmations: Schema.Finite,
    }),
  ),
  failure: Schema.NullOr(Schema.Struct({ code: Schema.String, message: Schema.NullOr(Schema.String) })),
  /** The request's `metadata` ({} without), carried into its webhooks like a payment's. */
  metadata: Schema.Record(Schema.String, Schema.String),
  created_at: Schema.String,
  completed_at: Schema.NullOr(Schema.String),
  failed_at: Schema.NullOr(Schema.String),
}).annotate({ identifier: "ChainTransfer" })

/**
 * An on-chain transfer re-read from its chain: the chain's status and proof now, and whether the
 * token Transfer the chain holds carries the ledger record's amount, token, sender and receiver.
 */
export const TransactionVerification = Schema.Struct({
  transaction_id: Schema.String,
  chain: Schema.String,
  tx_hash: Schema.String,
  status: Schema.Literals(["seen", "confirmed", "finalized", "reverted", "dropped"]),
  proof: Schema.NullOr(
    Schema.Struct({
      block_number: Schema.String,
      block_hash: Schema.String,
      log_index: Schema.NullOr(Schema.Finite),
      confirmations: Schema.Finite,
    }),
  ),
  checks: Schema.Struct({
    amount: Schema.Boolean,
    token: Schema.Boolean,
    sender: Schema.Boolean,
    receiver: Schema.Boolean,
  }),
  matches: Schema.Boolean,
}).annotate({ identifier: "TransactionVerification" })

export class TransfersApi extends HttpApiGroup.make("transfers")
  .add(
    scoped(
      HttpApiEndpoint.post("create", "/api/v2/transfers", {
        payload: Schema.Struct({
          from_wallet: Text,
          to_address: Text,
          amount: Amount,
          token: Text,
          chain: Text,
          metadata: Schema.optional(Metadata),
        }),
        success: ChainTransfer.annotate({ httpApiStatus: 202 }),
      }),
      "payments:write",
    ),
  )
  .add(
    scoped(
      HttpApiEndpoint.get("list", "/api/v2/transfers", {
        query: { ...ListQuery, wallet_id: Schema.optional(Text), status: Schema.optional(Text) },
        success: Page(ChainTransfer),
      }),
      "payments:read",
    ).annotate(
      OpenApi.Description,
      "Requires scope `payments:read`. The caller's on-chain transfers, newest first, optionally of one " +
        "sending wallet (`wallet_id`) or one `status` (pending, completed, failed).",
    ),
  )
  .add(
    scoped(
      HttpApiEndpoint.get("get", "/api/v2/transfers/:transfer_id", {
        params: { transfer_id: Text },
        success: ChainTransfer,
      }),
      "payments:read",
    ),
  )
  .add(
    scoped(
      HttpApiEndpoint.get("verify", "/api/v1/transactions/:transaction_id/verify", {
        params: { transaction_id: Text },
        success: TransactionVerification,
      }),
      "payments:read",
    ),
  )
  .middleware(Authentication) {}

/** A token transfer into one of the tenant's custody addresses (see src/deposits). */
export const Deposit = Schema.Struct({
  deposit_id: Schema.String,
  wallet_id: Schema.String,
  status: Schema.Literals(["seen", "credited", "orphaned"]),
  chain: Schema.String,
  token: Schema.String,
  amount: Schema.String,
  from_address: Schema.String,
  to_address: Schema.String,
  tx_hash: Schema.String,
  log_index: Schema.Finite,
  block_number: Schema.String,
  block_hash: Schema.String,
  confirmations: Schema.NullOr(Schema.Finite),
  seen_at: Timestamp,
  credited_at: Schema.NullOr(Timestamp),
}).annotate({ identifier: "Deposit" })

export class DepositsApi extends HttpApiGroup.make("deposits")
  .add(
    scoped(
      HttpApiEndpoint.get("list", "/api/v2/deposits", {
        query: { ...ListQuery, wallet_id: Schema.optional(Text) },
        success: Page(Deposit),
      }),
      "wallets:read",
    ).annotate(
      OpenApi.Description,
      "Requires scope `wallets:read`. Token transfers into the caller's custody wallets, newest first, " +
        "optionally of one wallet: `seen` while the chain has the transfer less deep than its " +
        "confirmation depth, `credited` once it is final and the wallet's balance holds it (announced " +
        "by `deposit.confirmed`), `orphaned` when a reorganisation took it away (never credited).",
    ),
  )
  .middleware(Authentication) {}

/**
 * The latest reconciliation of one chain and token: the ledger's liabilities against the on-chain
 * balances of the tenant's custody addresses, with money in flight and every account involved.
 */
export const ReconciliationReport = Schema.Struct({
  chain: Schema.String,
  token: Schema.String,
  status: Schema.Literals(["matched", "in_flight", "drift", "unavailable"]),
  ledger_balance: Schema.String,
  /** Null (with `difference` and `drift`) only while `unavailable` before any complete read. */
  on_chain_balance: Schema.NullOr(Schema.String),
  pending_outgoing: Schema.String,
  pending_incoming: Schema.String,
  difference: Schema.NullOr(Schema.String),
  drift: Schema.NullOr(Schema.String),
  accounts: Schema.Array(
    Schema.Struct({
      account_id: Schema.NullOr(Schema.String),
      kind: Schema.String,
      wallet_id: Schema.NullOr(Schema.String),
      address: Schema.NullOr(Schema.String),
      ledger_balance: Schema.NullOr(Schema.String),
      on_chain_balance: Schema.NullOr(Schema.String),
    }),
  ),
  /** Why the chain could not be read; null unless `unavailable`. */
  error: Schema.NullOr(Schema.String),
  checked_at: Timestamp,
  drift_since: Schema.NullOr(Timestamp),
  last_matched_at: Schema.NullOr(Timestamp),
}).annotate({ identifier: "ReconciliationReport" })

const reconciliationDescription =
  "For each chain and token the caller's wallets are on (chains with a running adapter): " +
  "`ledger_balance` is what the ledger owes (posted balances of the wallet, fee and escrow accounts), " +
  "`on_chain_balance` what the custody addresses hold. `pending_outgoing` (transfers reserved, perhaps " +
  "already mined) and `pending_incoming` (deposits seen, not yet final) explain a `difference` " +
  '(on chain minus ledger) while money is in flight: status "in_flight". Anything they do not explain is ' +
  '`drift` (status "drift", found on two reads a second apart), with `drift_since`. `accounts` lists every ' +
  "ledger account and custody address of the group with both balances. A chain whose node cannot be read " +
  'is reported with status "unavailable" and its `error`; its figures and accounts are those of the ' +
  "last complete read (`on_chain_balance`, `difference` and `drift` null when there was none), and " +
  "`last_matched_at` says when the group last matched."

export class ReconciliationApi extends HttpApiGroup.make("reconciliation")
  .add(
    scoped(
      HttpApiEndpoint.get("latest", "/api/v2/reconciliation", {
        success: Schema.Struct({ data: Schema.Array(ReconciliationReport) }),
      }),
      "payments:read",
    ).annotate(
      OpenApi.Description,
      `Requires scope \`payments:read\`. The latest report of the scheduled reconciliation job. ${reconciliationDescription}`,
    ),
  )
  .add(
    scoped(
      HttpApiEndpoint.post("run", "/api/v2/reconciliation/runs", {
        success: Schema.Struct({ data: Schema.Array(ReconciliationReport) }),
      }),
      "payments:read",
    ).annotate(
      OpenApi.Description,
      `Requires scope \`payments:read\`. Reconciles the caller's chains now and answers the new reports. ${reconciliationDescription}`,
    ),
  )
  .middleware(Authentication) {}

export class PlatformApi extends HttpApi.make("platform")
  .add(SystemApi)
  .add(RegistrationApi)
  .add(TenantApi)
  .add(KeysApi)
  .add(WalletsApi)
  .add(ChainsApi)
  .add(SandboxApi)
  .add(IdentitiesApi)
  .add(PaymentsApi)
  .add(TransfersApi)
  .add(DepositsApi)
  .add(ReconciliationApi)
  .add(WebhooksApi)
  .annotate(HttpApi.PayloadParseOptions, { onExcessProperty: "error" })
  .annotateMerge(
    OpenApi.annotations({
      title: "Multi-chain payments platform",
      version: "1.0.0",
      description: apiDescription,
      transform: documentConventions,
    }),
  ) {}
