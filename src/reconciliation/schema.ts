/**
 * Reconciliation reports (versions 520-529): the latest comparison of ledger liabilities with
 * on-chain custody balances per tenant, environment, chain and token. One row per group, replaced by
 * each run; `drift_since` keeps the moment a drift was first seen while it lasts, so an operator sees
 * how long money has been unexplained. A chain that cannot be read makes its groups `unavailable`
 * (with the `error`), and `last_matched_at` says when each group last agreed.
 */
import type { Migration } from "../db/migrate.ts"

export const reconciliationMigrations: ReadonlyArray<Migration> = [
  {
    version: 520,
    name: "reconciliation reports",
    sql: `
create schema if not exists platform;
create table platform.reconciliation_reports (
  tenant_id text not null,
  environment text not null check (environment in ('sandbox', 'production')),
  chain text not null,
  token text not null,
  token_decimals integer not null check (token_decimals between 0 and 38),
  status text not null check (status in ('matched', 'in_flight', 'drift')),
  ledger_balance numeric(39, 0) not null,
  on_chain_balance numeric(39, 0) not null check (on_chain_balance >= 0),
  pending_outgoing numeric(39, 0) not null check (pending_outgoing >= 0),
  pending_incoming numeric(39, 0) not null check (pending_incoming >= 0),
  difference numeric(40, 0) not null,
  drift numeric(40, 0) not null,
  accounts jsonb not null,
  checked_at timestamptz not null,
  drift_since timestamptz,
  primary key (tenant_id, environment, chain, token)
);`,
  },
  {
    version: 521,
    name: "reconciliation reports: unavailable chains",
    sql: `
alter table platform.reconciliation_reports drop constraint reconciliation_reports_status_check;
alter table platform.reconciliation_reports
  add constraint reconciliation_reports_status_check
    check (status in ('matched', 'in_flight', 'drift', 'unavailable')),
  add column error text check ((error is null) = (status <> 'unavailable')),
  add column last_matched_at timestamptz;
update platform.reconciliation_reports set last_matched_at = checked_at where status = 'matched';`,
  },
  {
    version: 522,
    name: "reconciliation reports: no on-chain figures before the first complete read",
    // An `unavailable` report of a group never read completely has no on-chain side to show: its
    // on-chain balance, difference and drift are null (they read 0, beside a real ledger balance).
    sql: `
alter table platform.reconciliation_reports
  alter column on_chain_balance drop not null,
  alter column difference drop not null,
  alter column drift drop not null,
  add constraint reconciliation_reports_unread_check
    check ((on_chain_balance is null) = (difference is null) and (difference is null) = (drift is null)
           and (on_chain_balance is not null or status = 'unavailable'));`,
  },
  {
    version: 523,
    name: "reconciliation reports: no on-chain figures stored for groups never read",
    // Reports stored before 522 for a group never read completely show 0 on chain beside a real
    // ledger balance (no account of theirs has an on-chain balance): they get null, like new ones.
    sql: `
update platform.reconciliation_reports r
   set on_chain_balance = null, difference = null, drift = null
 where r.status = 'unavailable' and r.on_chain_balance = 0 and r.difference = 0 and r.drift = 0
   and not exists (select 1 from jsonb_array_elements(r.accounts) account
                    where account->>'on_chain_balance' is not null);`,
  },
]
