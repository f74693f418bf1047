/**
 * Who pays and who receives a social payment: the tenant's default wallet (the payer when the
 * request names none) and the wallet the recipient identifier is linked to, if any. Concurrent
 * payments share one query (see src/db/coalesce.ts); each still sees every link committed before
 * its request arrived.
 */
import type pg from "pg"
import type { Environment } from "../../domain/platform/scopes.ts"
import { makeCoalescedRead } from "../db/coalesce.ts"

export interface PartiesQuery {
  readonly tenant_id: string
  readonly environment: Environment
  /** The recipient identifier, normalised. */
  readonly recipient: string
}

export interface Parties {
  readonly default_wallet_id: string | null
  readonly to_wallet_id: string | null
}

const partiesSql = `
  select (select default_wallet_id from platform.tenant_environments e
           where e.tenant_id = k.tenant_id and e.environment = k.environment) as default_wallet_id,
         (select wallet_id from platform.identities i
           where i.tenant_id = k.tenant_id and i.environment = k.environment and i.value = k.recipient
             and i.unlinked_at is null) as to_wallet_id
  from unnest($1::text[], $2::text[], $3::text[]) with ordinality as k(tenant_id, environment, recipient, n)
  order by k.n`

export const makePartyResolver = (pool: pg.Pool): ((query: PartiesQuery) => Promise<Parties>) =>
  makeCoalescedRead(async (queries: ReadonlyArray<PartiesQuery>) => {
    const found = await pool.query<Parties>({
      name: "payments_resolve_parties",
      text: partiesSql,
      values: [
        queries.map((q) => q.tenant_id),
        queries.map((q) => q.environment),
        queries.map((q) => q.recipient),
      ],
    })
    return found.rows
  })

export type PartyResolver = ReturnType<typeof makePartyResolver>
