/**
 * Which adapter sends a transfer: the one running for the transfer's chain in the transfer's
 * environment. A sandbox transfer and a production transfer on the same chain name go to different
 * networks (a local chain, a public one), so the chain name alone never picks an adapter.
 */
import type { Environment } from "../../domain/platform/scopes.ts"
import type { ChainAdapter } from "../ports/chain.ts"

/** The adapters that send, per environment, by chain name (`ethereum`, `solana`, ...). */
export type ChainRoutes = { readonly [E in Environment]: ReadonlyMap<string, ChainAdapter> }

/**
 * Routes from the adapters given per environment; an environment left out has none.
 * @example chainRoutes({ sandbox: new Map([["solana", adapter]]) }).production.size // 0
 */
export const chainRoutes = (
  routes: { readonly [E in Environment]?: ReadonlyMap<string, ChainAdapter> },
): ChainRoutes => ({
  sandbox: routes.sandbox ?? new Map(),
  production: routes.production ?? new Map(),
})

/**
 * The adapter for `chain` in `environment`, or undefined when none runs there.
 * @example adapterFor(routes, "production", "ethereum")
 */
export const adapterFor = (
  routes: ChainRoutes,
  environment: Environment,
  chain: string,
): ChainAdapter | undefined => routes[environment].get(chain)
