/**
 * What an API key may do. A key carries a set of scopes; each endpoint names the one it needs. Keys
 * issued at registration and for production carry every scope unless the caller asks for fewer.
 */
export const apiScopes = [
  "wallets:read",
  "wallets:write",
  "identities:read",
  "identities:write",
  "payments:read",
  "payments:write",
  "webhooks:read",
  "webhooks:write",
  "keys:manage",
  "tenant:manage",
] as const
export type ApiScope = (typeof apiScopes)[number]

/** One line per scope, for the docs and the OpenAPI description. */
export const scopeDescriptions: Readonly<Record<ApiScope, string>> = {
  "wallets:read": "read wallets and their balances",
  "wallets:write": "create wallets, choose the default wallet, use the sandbox faucet",
  "identities:read": "read linked social identities",
  "identities:write": "link and unlink social identities",
  "payments:read": "read transactions",
  "payments:write": "send payments",
  "webhooks:read": "read webhook endpoints and their deliveries",
  "webhooks:write": "create, change, delete and test webhook endpoints; redeliver events",
  "keys:manage": "create, list, rotate and revoke API keys",
  "tenant:manage": "read the tenant, submit verification (KYC/KYB)",
}

/** @example isApiScope("payments:write") // true */
export function isApiScope(value: string): value is ApiScope {
  return (apiScopes as ReadonlyArray<string>).includes(value)
}

export const environments = ["sandbox", "production"] as const
export type Environment = (typeof environments)[number]

export const plans = ["basic", "professional", "enterprise"] as const
export type Plan = (typeof plans)[number]

/**
 * Requests per second a plan allows, per tenant and per API key (token buckets; the burst is
 * twice the rate). Tenants never share a bucket.
 */
export const rateLimits: Readonly<
  Record<Plan, { readonly tenant_per_s: number; readonly key_per_s: number }>
> = {
  basic: { tenant_per_s: 100, key_per_s: 50 },
  professional: { tenant_per_s: 500, key_per_s: 250 },
  enterprise: { tenant_per_s: 2_000, key_per_s: 1_000 },
}
