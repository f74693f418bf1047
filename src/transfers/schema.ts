/**
 * The on-chain transfer records (versions 500-509). One row per transfer the platform sends to a
 * chain: what was asked, the signed transaction persisted before its broadcast (so a retry or a
 * restart rebroadcasts the same bytes and never signs anew), and the outcome with its proof.
 */
import type { Migration } from "../db/migrate.ts"

import { anyRequestOf } from "../platform/idempotency.ts"

/** The fingerprint of a transfer's key copied from before transfers kept theirs (migration 502). */
export const legacy_transfer_fingerprint = anyRequestOf("transfers.create")

export const transferMigrations: ReadonlyArray<Migration> = [
  {
    version: 500,
    name: "chain transfers",
    sql: `
create schema if not exists platform;
create table platform.chain_transfers (
  transfer_id text primary key,
  tenant_id text not null,
  environment text not null,
  wallet_id text not null,
  chain text not null,
  token text not null,
  token_decimals integer not null check (token_decimals between 0 and 38),
  token_contract text not null,
  from_address text not null,
  key_tenant_index integer not null check (key_tenant_index >= 0),
  key_wallet_index integer not null check (key_wallet_index >= 0),
  to_address text not null,
  amount numeric(39, 0) not null check (amount > 0),
  fee numeric(39, 0) not null check (fee >= 0),
  status text not null check (status in ('pending', 'completed', 'failed')),
  raw_transaction text,
  tx_hash text,
  nonce bigint check (nonce >= 0),
  signed_at timestamptz,
  broadcast_at timestamptz,
  poll_count integer not null default 0,
  proof jsonb,
  failure_code text,
  failure_message text,
  idempotency_key text,
  created_at timestamptz not null,
  completed_at timestamptz,
  failed_at timestamptz,
  check ((raw_transaction is null) = (tx_hash is null) and (tx_hash is null) = (nonce is null)),
  check (status <> 'completed' or proof is not null),
  check (status <> 'failed' or failure_code is not null)
);
create unique index chain_transfers_tx_hash on platform.chain_transfers (chain, tx_hash) where tx_hash is not null;
create index chain_transfers_unresolved_sender on platform.chain_transfers (chain, from_address)
  where status = 'pending' and nonce is not null;
create unique index chain_transfers_idempotency on platform.chain_transfers (tenant_id, environment, idempotency_key)
  where idempotency_key is not null;
create index chain_transfers_tenant on platform.chain_transfers (tenant_id, environment, created_at desc);
`,
  },
  {
    version: 501,
    name: "chain transfer replacements",
    sql: `
alter table platform.chain_transfers
  add column replacement_raw_transaction text,
  add column replacement_tx_hash text,
  add constraint chain_transfers_replacement_whole
    check ((replacement_raw_transaction is null) = (replacement_tx_hash is null)),
  add constraint chain_transfers_replacement_after_signing
    check (replacement_tx_hash is null or tx_hash is not null);
`,
  },
  {
    version: 502,
    name: "chain transfer idempotency keys in the shared store",
    // Transfers store their key in platform.idempotency_keys since this version, so no other
    // endpoint can take it. Keys of earlier transfers are copied there with a marker fingerprint
    // (their request's fingerprint was never kept, so it matches any transfer request): a transfer
    // retry with one is a replay, any other endpoint's request with one is 409.
    sql: `
insert into platform.idempotency_keys
  (tenant_id, environment, idempotency_key, fingerprint, response_status, response_body, created_at)
select tenant_id, environment, idempotency_key, '${legacy_transfer_fingerprint}', 202,
       json_build_object('transaction_id', transfer_id), created_at
  from platform.chain_transfers
 where idempotency_key is not null
on conflict do nothing;
`,
  },
  {
    version: 503,
    name: "chain transfer broadcast attempts",
    // Recorded before the bytes are first handed to a node: a refusal after it is no proof that the
    // bytes are nowhere (an earlier attempt may sit in a pool or a block). Transfers signed before
    // this version may have been sent without a record of it, so they count as attempted.
    sql: `
alter table platform.chain_transfers add column broadcast_attempted_at timestamptz;
update platform.chain_transfers set broadcast_attempted_at = coalesce(broadcast_at, now())
 where raw_transaction is not null;
`,
  },
  {
    version: 504,
    name: "chain transfer settling outcome",
    // A settlement posts or voids the fee's reservation, then the amount's: the outcome is recorded
    // with the first, so a settlement interrupted between the two always finishes the same way
    // (a restart's later "dropped" never tries to void a fee already posted).
    sql: `
alter table platform.chain_transfers add column settling jsonb;
`,
  },
  {
    version: 505,
    name: "chain transfers: metadata",
    // The request's metadata, carried into the transfer's answers and webhooks like a payment's.
    sql: "alter table platform.chain_transfers add column metadata jsonb not null default '{}'::jsonb;",
  },
  {
    version: 506,
    name: "chain transfers: broadcast lease",
    // One job at a time sends a transfer's bytes, under a lease on its row (src/transfers/worker.ts).
    sql: "alter table platform.chain_transfers add column broadcast_lease_until timestamptz;",
  },
]
