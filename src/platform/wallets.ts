/**
 * Wallets: a chain address derived from the environment's master seed for a tenant (custody index)
 * and a wallet (the tenant's next wallet index), plus one ledger account per token of its chain.
 * The first wallet of a tenant in an environment becomes its default wallet (the payer of a social
 * payment without `from_wallet`); the tenant may choose another.
 */
import type pg from "pg"
import type { Environment } from "../../domain/platform/scopes.ts"
import { toPage } from "../db/page.ts"

export interface WalletRow {
  readonly wallet_id: string
  readonly tenant_id: string
  readonly environment: Environment
  readonly chain: string
  readonly address: string
  readonly external_id: string
  readonly label: string
  readonly created_at: Date
}

export interface WalletView {
  readonly wallet_id: string
  readonly address: string
  readonly chain: string
  readonly external_id: string
  readonly label: string
  readonly is_default: boolean
  readonly created_at: string
}

export const toWalletView = (row: WalletRow, default_wallet_id: string | null): WalletView => ({
  wallet_id: row.wallet_id,
  address: row.address,
  chain: row.chain,
  external_id: row.external_id,
  label: row.label,
  is_default: row.wallet_id === default_wallet_id,
  created_at: row.created_at.toISOString(),
})

const walletColumns = "wallet_id, tenant_id, environment, chain, address, external_id, label, created_at"

/** Wallet rows never change once written, so they are cached by id (bounded). */
const wallet_cache_size_max = 100_000

export const makeWalletReader = (pool: pg.Pool) => {
  const cache = new Map<string, WalletRow>()
  return {
    /**
     * `get` without a database read: `{ row }` when the wallet is cached (`row` undefined if it is
     * not the tenant environment's), undefined when it is not cached.
     */
    peek: (
      tenant_id: string,
      environment: Environment,
      wallet_id: string,
    ): { readonly row: WalletRow | undefined } | undefined => {
      const cached = cache.get(wallet_id)
      if (cached === undefined) return undefined
      return {
        row: cached.tenant_id === tenant_id && cached.environment === environment ? cached : undefined,
      }
    },
    /** The wallet if it belongs to the tenant's environment; otherwise undefined. */
    get: async (
      tenant_id: string,
      environment: Environment,
      wallet_id: string,
    ): Promise<WalletRow | undefined> => {
      const cached = cache.get(wallet_id)
      if (cached !== undefined) {
        return cached.tenant_id === tenant_id && cached.environment === environment ? cached : undefined
      }
      const found = await pool.query<WalletRow>(
        `select ${walletColumns} from platform.wallets where wallet_id = $1`,
        [wallet_id],
      )
      const row = found.rows[0]
      if (row === undefined) return undefined
      if (cache.size >= wallet_cache_size_max) cache.clear()
      cache.set(wallet_id, row)
      return row.tenant_id === tenant_id && row.environment === environment ? row : undefined
    },
  }
}

export type WalletReader = ReturnType<typeof makeWalletReader>

export const defaultWalletId = async (
  db: pg.Pool | pg.PoolClient,
  tenant_id: string,
  environment: Environment,
) =>
  (
    await db.query<{ default_wallet_id: string | null }>(
      "select default_wallet_id from platform.tenant_environments where tenant_id = $1 and environment = $2",
      [tenant_id, environment],
    )
  ).rows[0]?.default_wallet_id ?? null

/**
 * Reserves the tenant's next wallet index and inserts the wallet; the first wallet becomes the
 * default. Runs in the caller's transaction (the index row lock orders concurrent creations).
 */
export const insertWallet = async (
  client: pg.PoolClient,
  spec: {
    readonly wallet_id: string
    readonly tenant_id: string
    readonly environment: Environment
    readonly chain: string
    readonly external_id: string
    readonly label: string
    readonly address: (wallet_index: number) => Promise<string>
  },
): Promise<{ readonly row: WalletRow; readonly is_default: boolean }> => {
  const reserved = await client.query<{ index: number; default_wallet_id: string | null }>(
    `insert into platform.tenant_environments (tenant_id, environment, next_wallet_index) values ($1, $2, 1)
     on conflict (tenant_id, environment) do update set next_wallet_index = tenant_environments.next_wallet_index + 1
     returning next_wallet_index - 1 as index, default_wallet_id`,
    [spec.tenant_id, spec.environment],
  )
  const { index, default_wallet_id } = reserved.rows[0] ?? { index: 0, default_wallet_id: null }
  const address = await spec.address(index)
  const inserted = await client.query<WalletRow>(
    `insert into platform.wallets (wallet_id, tenant_id, environment, chain, address, derivation_index, external_id, label, created_at)
     values ($1, $2, $3, $4, $5, $6, $7, $8, now()) returning ${walletColumns}`,
    [
      spec.wallet_id,
      spec.tenant_id,
      spec.environment,
      spec.chain,
      address,
      index,
      spec.external_id,
      spec.label,
    ],
  )
  const row = inserted.rows[0]
  if (row === undefined) throw new Error("wallet insert returned nothing")
  if (default_wallet_id === null) {
    await client.query(
      "update platform.tenant_environments set default_wallet_id = $3 where tenant_id = $1 and environment = $2",
      [spec.tenant_id, spec.environment, spec.wallet_id],
    )
  }
  return { row, is_default: default_wallet_id === null }
}

export const listWallets = async (
  pool: pg.Pool,
  tenant_id: string,
  environment: Environment,
  filter: {
    readonly external_id?: string | undefined
    readonly starting_after?: string | undefined
    readonly limit: number
  },
) => {
  const found = await pool.query<WalletRow>(
    `select ${walletColumns} from platform.wallets
      where tenant_id = $1 and environment = $2 and ($3::text is null or external_id = $3)
        and ($4::text is null or derivation_index > (
              select derivation_index from platform.wallets
               where tenant_id = $1 and environment = $2 and wallet_id = $4))
      order by derivation_index limit $5`,
    [tenant_id, environment, filter.external_id ?? null, filter.starting_after ?? null, filter.limit + 1],
  )
  const fallback = await defaultWalletId(pool, tenant_id, environment)
  return toPage(
    found.rows,
    filter.limit,
    (row) => toWalletView(row, fallback),
    (wallet) => wallet.wallet_id,
  )
}
