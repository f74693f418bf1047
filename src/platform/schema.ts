/**
 * The platform's own tables (schema `platform`): tenants and their credentials, wallets, social
 * identities, payments and stored idempotent responses. Money itself lives in the ledger's events;
 * these tables hold what the API needs around it. Ids compare byte by byte (`collate "C"`): they are
 * opaque and time-ordered (UUID v7 inside a readable prefix), so listing by id lists by creation
 * time; the lists kept oldest first (wallets, identities) are ordered by commit instead (see 306).
 */
import type { Migration } from "../db/migrate.ts"

export const platformTableMigrations: ReadonlyArray<Migration> = [
  {
    version: 300,
    name: "platform tenants, keys, wallets, identities, payments, idempotency",
    sql: `
create schema if not exists platform;

create table platform.tenants (
  tenant_id text collate "C" primary key,
  email text not null,
  password_hash text not null,
  company_name text not null,
  plan text not null check (plan in ('basic', 'professional', 'enterprise')),
  kyc_status text not null default 'unverified'
    check (kyc_status in ('unverified', 'verified', 'rejected')),
  kyc_level smallint not null default 0 check (kyc_level between 0 and 3),
  kyc_submission jsonb,
  kyc_reason text,
  kyc_decided_at timestamptz,
  custody_index integer not null unique check (custody_index >= 0),
  created_at timestamptz not null
);
create unique index tenants_email on platform.tenants (email);
create sequence platform.tenant_custody_index as integer minvalue 0 start 0;

create table platform.tenant_environments (
  tenant_id text collate "C" not null references platform.tenants,
  environment text not null check (environment in ('sandbox', 'production')),
  default_wallet_id text collate "C",
  next_wallet_index integer not null default 0,
  primary key (tenant_id, environment)
);

create table platform.api_keys (
  key_id text collate "C" primary key,
  tenant_id text collate "C" not null references platform.tenants,
  environment text not null check (environment in ('sandbox', 'production')),
  secret_sha256 bytea not null unique,
  prefix text not null,
  scopes text[] not null,
  name text,
  created_at timestamptz not null,
  expires_at timestamptz,
  revoked_at timestamptz,
  rotated_to text collate "C"
);
create index api_keys_tenant on platform.api_keys (tenant_id, environment, key_id);

create table platform.wallets (
  wallet_id text collate "C" primary key,
  tenant_id text collate "C" not null,
  environment text not null,
  chain text not null,
  address text not null,
  derivation_index integer not null,
  external_id text not null,
  label text not null,
  created_at timestamptz not null,
  unique (tenant_id, environment, derivation_index),
  foreign key (tenant_id, environment) references platform.tenant_environments
);
create index wallets_tenant on platform.wallets (tenant_id, environment, wallet_id);
create index wallets_external_id on platform.wallets (tenant_id, environment, external_id, wallet_id);

create table platform.identities (
  identity_id text collate "C" primary key,
  tenant_id text collate "C" not null,
  environment text not null,
  kind text not null check (kind in ('phone', 'email', 'handle')),
  value text collate "C" not null,
  wallet_id text collate "C" not null references platform.wallets,
  linked_at timestamptz not null,
  unlinked_at timestamptz
);
-- One identifier links to one wallet at a time per tenant and environment.
create unique index identities_active on platform.identities (tenant_id, environment, value)
  where unlinked_at is null;
create index identities_tenant on platform.identities (tenant_id, environment, identity_id);

create table platform.payments (
  transaction_id text collate "C" primary key,
  tenant_id text collate "C" not null,
  environment text not null,
  type text not null check (type in ('social_payment')),
  status text not null check (status in ('pending', 'completed', 'failed')),
  from_wallet_id text collate "C" not null,
  to_wallet_id text collate "C",
  recipient text not null,
  recipient_kind text not null,
  token text not null,
  chain text not null,
  decimals integer not null,
  amount numeric(39, 0) not null check (amount > 0),
  fee numeric(39, 0) not null check (fee >= 0),
  note text,
  metadata jsonb not null,
  failure_code text,
  failure_message text,
  created_at timestamptz not null,
  expires_at timestamptz,
  completed_at timestamptz,
  failed_at timestamptz
);
create index payments_tenant on platform.payments (tenant_id, environment, transaction_id);
create index payments_from_wallet on platform.payments (tenant_id, environment, from_wallet_id, transaction_id);
create index payments_to_wallet on platform.payments (tenant_id, environment, to_wallet_id, transaction_id);
create index payments_waiting on platform.payments (tenant_id, environment, recipient) where status = 'pending';

-- The response an idempotent POST gave, keyed by the tenant's key; written in the same transaction
-- as the request's effect, so a stored response always means the effect happened.
create table platform.idempotency_keys (
  tenant_id text collate "C" not null,
  environment text not null,
  idempotency_key text collate "C" not null,
  fingerprint text not null,
  response_status integer not null,
  response_body jsonb not null,
  created_at timestamptz not null default now(),
  primary key (tenant_id, environment, idempotency_key)
);
`,
  },
  {
    version: 301,
    name: "idempotency: stored responses kept as sent; no plaintext API keys",
    // json, not jsonb: a replay answers the very text first sent, keys in their order. Responses
    // that carried a new API key are stored sealed since this version; the ones stored before, in
    // plain text, are deleted (a retry of such a request with its Idempotency-Key then creates a
    // new key, and the old one can be listed and revoked).
    sql: `
delete from platform.idempotency_keys
 where response_body->>'api_key' ~ '^sk_(sandbox|live)_'
    or response_body->'new_key'->>'api_key' ~ '^sk_(sandbox|live)_';
alter table platform.idempotency_keys alter column response_body type json using response_body::json;
`,
  },
  {
    version: 302,
    name: "wallets found by address, in any letter case",
    // An on-chain transfer's destination is looked up among the platform's custody addresses.
    sql: `create index wallets_address on platform.wallets (lower(address));`,
  },
  {
    version: 303,
    name: "pending payments found by expiry",
    // The settlement sweep looks for pending payments past their expiry whose reservation the
    // ledger released (failStrandedPayments): normally none, found without reading every pending one.
    sql: `create index payments_pending_expiry on platform.payments (expires_at) where status = 'pending';`,
  },
  {
    version: 304,
    name: "e-mail addresses case-folded",
    // normaliseEmail now folds what toLowerCase leaves apart (a final sigma and a sigma, the micro
    // sign and mu...: case_fold_from and case_fold_to in domain/platform/identifiers.ts) and
    // composes again after lower-casing (J + caron lower-cases to j + caron, which is ǰ). Addresses
    // stored before are folded and composed likewise, each row on its own: one whose new form
    // another row already holds (two tenants or two linked identities that should have been one)
    // keeps its spelling rather than fail the migration.
    sql: foldStoredEmails(
      "E'\\u00b5\\u017f\\u0345\\u03c2\\u03d0\\u03d1\\u03d5\\u03d6\\u03f0\\u03f1\\u03f5\\u1e9b\\u1fbe'",
      "E'\\u03bc\\u0073\\u03b9\\u03c3\\u03b2\\u03b8\\u03c6\\u03c0\\u03ba\\u03c1\\u03b5\\u1e61\\u03b9'",
    ),
  },
  {
    version: 305,
    name: "e-mail addresses case-folded: old Cyrillic letter forms, the long s t ligature",
    // normaliseEmail now also folds U+1C80-U+1C88 (rounded ve, tall te...) to the Cyrillic letters
    // they are, and U+FB05 to U+FB06; addresses stored before are folded likewise, as 304 did.
    sql: foldStoredEmails(
      "E'\\u1c80\\u1c81\\u1c82\\u1c83\\u1c84\\u1c85\\u1c86\\u1c87\\u1c88\\ufb05'",
      "E'\\u0432\\u0434\\u043e\\u0441\\u0442\\u0442\\u044a\\u0463\\ua64b\\ufb06'",
    ),
  },
  {
    version: 306,
    name: "identities listed in the order their links committed",
    // An id is made before its transaction commits, so listing by id let a client that pages on
    // from the last id it saw miss an identity committed after a later id was listed. A position
    // taken from a per-tenant counter (its row locked until the link commits) follows commit order;
    // wallets have theirs already (derivation_index). Existing identities keep their id order.
    sql: `
alter table platform.tenant_environments add column next_identity_position bigint not null default 0;
alter table platform.identities add column list_position bigint;
update platform.identities i set list_position = ranked.position
  from (select identity_id,
               row_number() over (partition by tenant_id, environment order by identity_id) - 1 as position
          from platform.identities) ranked
 where ranked.identity_id = i.identity_id;
update platform.tenant_environments t set next_identity_position = counted.n
  from (select tenant_id, environment, count(*) as n from platform.identities group by tenant_id, environment) counted
 where counted.tenant_id = t.tenant_id and counted.environment = t.environment;
alter table platform.identities alter column list_position set not null;
create unique index identities_list_position on platform.identities (tenant_id, environment, list_position);
`,
  },
  {
    version: 307,
    name: "API keys: first use",
    // A production key whose secret never reached its tenant (its answer lost, and no replay after
    // 24 hours) must not keep the tenant's sandbox keys out of production for ever. Keys made before
    // count as used.
    sql: `
alter table platform.api_keys add column first_used_at timestamptz;
update platform.api_keys set first_used_at = created_at;`,
  },
  {
    version: 308,
    name: "payments: their parties checked at commit",
    // A payment reads the recipient's link and the tenant's default wallet when it arrives and
    // commits later. An unlink and a change of the default take the ledger's stream lock, so this
    // check, run in the append's transaction after that lock, sees every one that was answered
    // before; a payment whose parties changed is rolled back and planned again (payments.ts).
    sql: `
create function platform.payments_require_parties(
  p_tenant_ids text[], p_environments text[], p_transaction_ids text[], p_recipients text[],
  p_to_wallet_ids text[], p_default_payers text[])
returns void
language plpgsql as $$
declare
  v_changed text;
begin
  select string_agg(c.transaction_id, ',') into v_changed
    from unnest(p_tenant_ids, p_environments, p_transaction_ids, p_recipients, p_to_wallet_ids, p_default_payers)
      as c(tenant_id, environment, transaction_id, recipient, to_wallet_id, default_payer)
   where (c.to_wallet_id is not null and not exists (
            select 1 from platform.identities i
             where i.tenant_id = c.tenant_id and i.environment = c.environment and i.value = c.recipient
               and i.wallet_id = c.to_wallet_id and i.unlinked_at is null))
      or (c.default_payer is not null and not exists (
            select 1 from platform.tenant_environments e
             where e.tenant_id = c.tenant_id and e.environment = c.environment
               and e.default_wallet_id = c.default_payer));
  if v_changed is not null then
    raise exception 'payment parties changed: %', v_changed using errcode = 'PP001';
  end if;
end
$$;`,
  },
]

/**
 * Folds the stored e-mail addresses (tenants, identities, payments' recipients) with `fold_from`
 * and `fold_to` (SQL string literals of equal length) and composes them again, each row on its
 * own: one whose new form another row already holds keeps its spelling.
 */
function foldStoredEmails(fold_from: string, fold_to: string): string {
  return `
do $$
declare
  fold_from constant text := ${fold_from};
  fold_to constant text := ${fold_to};
  r record;
begin
  create temporary table folded_email (spelling text primary key, folded text not null) on commit drop;
  insert into folded_email
    select v, normalize(translate(normalize(v, nfd), fold_from, fold_to), nfc)
      from (select email from platform.tenants
            union select value from platform.identities where kind = 'email'
            union select recipient from platform.payments where recipient_kind = 'email') as stored(v);
  delete from folded_email where folded = spelling;
  for r in select t.tenant_id, f.folded from platform.tenants t join folded_email f on f.spelling = t.email loop
    begin
      update platform.tenants set email = r.folded where tenant_id = r.tenant_id;
    exception when unique_violation then null;
    end;
  end loop;
  for r in select i.identity_id, f.folded from platform.identities i join folded_email f on f.spelling = i.value
            where i.kind = 'email' loop
    begin
      update platform.identities set value = r.folded where identity_id = r.identity_id;
    exception when unique_violation then null;
    end;
  end loop;
  update platform.payments p set recipient = f.folded from folded_email f
   where p.recipient_kind = 'email' and p.recipient = f.spelling;
end
$$;
`
}
