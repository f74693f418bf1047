/**
 * The webhook engine's tables (schema `platform`, migration versions 320-339).
 *
 * - `webhooks`: a tenant's endpoints. While a secret rotates the old one stays in
 *   `previous_secret` until `previous_secret_expires_at`, and deliveries carry both signatures.
 *   Both are stored sealed (src/webhooks/secrets.ts), beside a keyed fingerprint and the last four
 *   characters of the current one.
 * - `webhook_events`: the outbox. Rows are written in the transaction of the change they announce,
 *   so a rolled-back change announces nothing. `position` orders the dispatcher's reads; the
 *   partial index keeps finding undispatched rows cheap however long the table grows. A row with a
 *   `target_webhook_id` (a test event) goes to that endpoint only.
 * - `webhook_deliveries`: one per (event, endpoint), unique, so an event is never dispatched twice to
 *   one endpoint; `webhook_attempts`: one row per HTTP request made for a delivery.
 *
 * Ids compare byte by byte (`collate "C"`) and are time-ordered to the millisecond (a UUID v7 behind
 * a prefix), so listing by id lists by creation and a cursor is the last id seen.
 */
import type { Migration } from "../db/migrate.ts"

export const webhookMigrations: ReadonlyArray<Migration> = [
  {
    version: 320,
    name: "webhooks: endpoints",
    sql: `
create schema if not exists platform;

create table platform.webhooks (
  webhook_id text collate "C" primary key check (webhook_id ~ '^whk_[0-9a-f]{32}$'),
  tenant_id text collate "C" not null check (tenant_id <> ''),
  environment text not null check (environment in ('sandbox', 'production')),
  url text not null check (url ~ '^https?://'),
  events text[] not null check (cardinality(events) >= 1),
  secret text not null check (secret <> ''),
  previous_secret text,
  previous_secret_expires_at timestamptz,
  description text,
  enabled boolean not null,
  created_at timestamptz not null,
  updated_at timestamptz not null,
  deleted_at timestamptz,
  check ((previous_secret is null) = (previous_secret_expires_at is null))
);
create index webhooks_tenant_list on platform.webhooks (tenant_id, environment, webhook_id)
  where deleted_at is null;
`,
  },
  {
    version: 321,
    name: "webhooks: event outbox",
    sql: `
create schema if not exists platform;

create table platform.webhook_events (
  event_id text collate "C" primary key check (event_id ~ '^evt_[0-9a-f]{32}$'),
  position bigint generated always as identity,
  tenant_id text collate "C" not null check (tenant_id <> ''),
  environment text not null check (environment in ('sandbox', 'production')),
  event_type text not null check (event_type <> ''),
  data jsonb not null check (jsonb_typeof(data) = 'object'),
  created_at timestamptz not null,
  target_webhook_id text collate "C",
  dispatched_at timestamptz
);
create index webhook_events_undispatched on platform.webhook_events (position)
  where dispatched_at is null;
create index webhook_events_tenant_list on platform.webhook_events (tenant_id, environment, event_id);
`,
  },
  {
    version: 322,
    name: "webhooks: deliveries and attempts",
    sql: `
create table platform.webhook_deliveries (
  delivery_id text collate "C" primary key check (delivery_id ~ '^dlv_[0-9a-f]{32}$'),
  event_id text collate "C" not null references platform.webhook_events,
  webhook_id text collate "C" not null references platform.webhooks,
  tenant_id text collate "C" not null,
  environment text not null check (environment in ('sandbox', 'production')),
  status text not null check (status in ('pending', 'succeeded', 'failed')),
  attempt_count integer not null check (attempt_count >= 0),
  next_attempt_at timestamptz,
  last_status_code integer,
  created_at timestamptz not null,
  updated_at timestamptz not null,
  constraint webhook_deliveries_once unique (event_id, webhook_id)
);
create index webhook_deliveries_webhook_list on platform.webhook_deliveries
  (tenant_id, environment, webhook_id, delivery_id);

create table platform.webhook_attempts (
  delivery_id text collate "C" not null references platform.webhook_deliveries,
  attempt integer not null check (attempt >= 1),
  started_at timestamptz not null,
  latency_ms integer not null check (latency_ms >= 0),
  response_status integer,
  response_excerpt text check (octet_length(response_excerpt) <= 1024),
  error text check (octet_length(error) <= 1024),
  signature_timestamp bigint not null,
  primary key (delivery_id, attempt)
);
`,
  },
  {
    version: 323,
    name: "webhooks: sealed signing secrets",
    // The secrets themselves are sealed by the platform at its next start (it holds the KEK, SQL
    // does not): src/webhooks/secrets.ts, sealStoredSecrets. Until then `secret_fingerprint` is null.
    sql: `
alter table platform.webhooks
  add column secret_fingerprint text check (secret_fingerprint ~ '^[0-9a-f]{64}$'),
  add column secret_last4 text;
update platform.webhooks set secret_last4 = right(secret, 4);
alter table platform.webhooks alter column secret_last4 set not null;
`,
  },
  {
    version: 324,
    name: "webhooks: one sender per attempt",
    // The job that claimed the delivery's next attempt: another job of the same attempt skips it.
    sql: `
alter table platform.webhook_deliveries
  add column claim_attempt integer,
  add column claim_job_id text;
`,
  },
  {
    version: 325,
    name: "webhooks: a claim expires with its job",
    // A claim older than a job may run belongs to a job that died for good: another may take it.
    sql: `
alter table platform.webhook_deliveries add column claimed_at timestamptz;
`,
  },
  {
    version: 326,
    name: "webhooks: a redelivery asked for during an attempt",
    // When the last redelivery was asked for: an attempt claimed before then, still being sent,
    // owes the receiver a fresh attempt right after it (src/webhooks/delivery.ts, recordAttempt).
    sql: `
alter table platform.webhook_deliveries add column redelivery_asked_at timestamptz;
`,
  },
]
