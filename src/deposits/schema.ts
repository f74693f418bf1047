/**
 * The deposit records (version 510, in the on-chain range 500-519). One row per token transfer into
 * a custody address that a watcher saw in a block: `seen` until the chain has it deep enough, then
 * `credited` (in the same transaction as its ledger transfer) or `orphaned` (reorganised away and
 * never re-included: no money moved). A chain transfer is one row: (environment, chain, tx_hash,
 * log_index) is unique. The cursor table holds, per chain, the first block the watcher has not
 * scanned yet.
 */
import type { Migration } from "../db/migrate.ts"

export const depositMigrations: ReadonlyArray<Migration> = [
  {
    version: 510,
    name: "chain deposits and their watcher cursors",
    sql: `
create schema if not exists platform;
create table platform.chain_deposits (
  deposit_id text collate "C" primary key,
  tenant_id text collate "C" not null,
  environment text not null check (environment in ('sandbox', 'production')),
  wallet_id text collate "C" not null,
  chain text not null,
  token text not null,
  token_decimals integer not null check (token_decimals between 0 and 38),
  token_contract text not null,
  to_address text not null,
  from_address text not null,
  amount numeric(78, 0) not null check (amount > 0),
  tx_hash text not null,
  log_index integer not null check (log_index >= 0),
  block_number numeric(78, 0) not null check (block_number >= 0),
  block_hash text not null,
  status text not null check (status in ('seen', 'credited', 'orphaned')),
  confirmations integer,
  seen_at timestamptz not null,
  credited_at timestamptz,
  orphaned_at timestamptz,
  unique (environment, chain, tx_hash, log_index),
  check ((status = 'credited') = (credited_at is not null)),
  check ((status = 'orphaned') = (orphaned_at is not null))
);
create index chain_deposits_seen on platform.chain_deposits (environment, chain, block_number)
  where status = 'seen';
create index chain_deposits_tx on platform.chain_deposits (environment, chain, tx_hash);
create index chain_deposits_tenant on platform.chain_deposits (tenant_id, environment, deposit_id);
create index chain_deposits_wallet on platform.chain_deposits (tenant_id, environment, wallet_id, deposit_id);

create table platform.chain_deposit_cursors (
  environment text not null,
  chain text not null,
  next_block numeric(78, 0) not null check (next_block >= 0),
  primary key (environment, chain)
);
`,
  },
  {
    version: 511,
    name: "chain deposits: when a seen row was last judged",
    // The judge takes the rows judged longest ago first: a row that waits for ever (its transaction
    // parked in a pool after a reorg) no longer holds up the rows behind it.
    sql: "alter table platform.chain_deposits add column judged_at timestamptz;",
  },
]
