/**
 * The read model's tables. They live in one PostgreSQL schema (`read_model`), checkpoints included,
 * so that a rebuild can build a complete copy in a shadow schema and swap it in with two renames:
 * rows and the checkpoint they correspond to always change together.
 *
 * `projectionTablesSql(schema)` is the current shape of every table. A later migration that alters a
 * table must change this function in the same way, because rebuilds create their shadow schema from
 * it (the migration list is for the live schema only).
 */
import type { Migration } from "../src/db/migrate.ts"

/** The schema that readers query and the live runner writes. */
export const live_schema = "read_model"

const identifier_pattern = /^[a-z_][a-z0-9_]{0,62}$/

/**
 * Quotes nothing and accepts only plain lower-case identifiers, so that a schema name can be spliced
 * into SQL text safely.
 * @example schemaIdentifier("read_model") // "read_model"
 */
export const schemaIdentifier = (schema: string): string => {
  if (!identifier_pattern.test(schema)) throw new Error(`invalid schema name ${JSON.stringify(schema)}`)
  return schema
}

/**
 * The tables of the read model in `schema` (which must exist), without secondary indexes; see
 * `projectionIndexesSql`. Rebuilds create the indexes after the bulk load, which is faster.
 * Identifiers compare byte by byte (`collate "C"`): they are opaque, and the database's linguistic
 * collation would only make every index insert and sort slower.
 * @example await client.query(projectionTablesSql("read_model_shadow"))
 */
export const projectionTablesSql = (schema: string): string => {
  const s = schemaIdentifier(schema)
  return `
create table ${s}.ledger_accounts (
  stream_id text collate "C" not null,
  account_id text collate "C" not null,
  tenant text not null,
  environment text not null,
  asset_code text not null,
  symbol text not null,
  chain text not null,
  decimals integer not null,
  kind text not null,
  debits_must_not_exceed_credits boolean not null,
  credits_must_not_exceed_debits boolean not null,
  code integer not null,
  user_data text,
  debits_pending numeric(39,0) not null check (debits_pending >= 0),
  debits_posted numeric(39,0) not null check (debits_posted >= 0),
  credits_pending numeric(39,0) not null check (credits_pending >= 0),
  credits_posted numeric(39,0) not null check (credits_posted >= 0),
  opened_at timestamptz not null,
  last_stream_version integer not null,
  primary key (stream_id, account_id)
);

create table ${s}.ledger_transfers (
  stream_id text collate "C" not null,
  transfer_id text collate "C" not null,
  kind text not null check (kind in ('single', 'pending', 'post_pending', 'void_pending')),
  pending_id text collate "C",
  debit_account_id text collate "C" not null,
  credit_account_id text collate "C" not null,
  asset_code text not null,
  amount numeric(39,0) not null check (amount >= 0),
  posted_amount numeric(39,0) check (posted_amount >= 0),
  code integer not null,
  user_data text,
  linked_group_id text,
  status text not null check (status in ('posted', 'pending', 'voided', 'expired')),
  created_at timestamptz not null,
  expires_at timestamptz,
  resolved_at timestamptz,
  stream_version integer not null,
  global_position bigint not null,
  primary key (stream_id, transfer_id)
);

create table ${s}.projection_checkpoints (
  projection text collate "C" primary key,
  transaction_id xid8 not null,
  global_position bigint not null
);

create table ${s}.projection_streams (
  projection text collate "C" not null,
  stream_id text collate "C" not null,
  version integer not null,
  primary key (projection, stream_id)
);
`
}

/**
 * Secondary indexes, one statement each (a rebuild builds them side by side): a ledger's transfers
 * newest first, optionally within a time window, and the same for one account on either side. The
 * ledger clock never goes backwards within a stream, so (created_at, global_position) orders a
 * stream's transfers as its versions do.
 *
 * The leading key is a 64-bit hash of the id (`hashtextextended`, the function PostgreSQL's hash
 * partitioning relies on staying stable) rather than the id itself: ids of one ledger share long
 * prefixes ("ledger-acme-...", UUID v7 timestamps), which makes sorting and searching on the text
 * slow, while the hash compares in one instruction and halves the time to build the index. Queries
 * match on the hash and then on the id itself (`idHashMatch`), so a collision costs a filtered row,
 * never a wrong one.
 */
export const projectionIndexesSql = (schema: string): ReadonlyArray<string> => {
  const s = schemaIdentifier(schema)
  return [
    `create index ledger_transfers_by_time on ${s}.ledger_transfers (${idHash("stream_id")}, created_at, global_position)`,
    `create index ledger_transfers_by_debit on ${s}.ledger_transfers (${idHash("debit_account_id")}, created_at, global_position)`,
    `create index ledger_transfers_by_credit on ${s}.ledger_transfers (${idHash("credit_account_id")}, created_at, global_position)`,
    // The expiry sweeper (src/ledger/expiry.ts) looks for lapsed reservations every second.
    `create index ledger_transfers_pending_expiry on ${s}.ledger_transfers (expires_at) where status = 'pending' and expires_at is not null`,
  ]
}

const idHash = (expression: string): string => `hashtextextended(${expression}, 0)`

/**
 * The condition that lets a query use the hashed indexes: `column` equals the text parameter.
 * @example idHashMatch("stream_id", "$1") // "hashtextextended(stream_id, 0) = hashtextextended($1::text, 0) and stream_id = $1"
 */
export const idHashMatch = (column: string, parameter: string): string =>
  `${idHash(column)} = ${idHash(`${parameter}::text`)} and ${column} = ${parameter}`

export const projectionMigrations: ReadonlyArray<Migration> = [
  {
    version: 200,
    name: "read model: ledger accounts, transfers, checkpoints",
    sql: `create schema if not exists ${live_schema};
${projectionTablesSql(live_schema)}
${projectionIndexesSql(live_schema).join(";\n")};`,
  },
]
