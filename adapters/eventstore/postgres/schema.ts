/**
 * The event store's tables (migration versions 100-199).
 *
 * `events` holds every event once, forever. `global_position` comes from an identity sequence, so
 * positions commit out of order; subscribers therefore page by `(transaction_id, global_position)`
 * and read only transactions older than every running one that may append (see
 * `readSubscriptionBatch` in event-store.ts), which the index `events_transaction_position` serves. `streams` holds each
 * stream's head (last version and hash) so that an append reads one row instead of scanning.
 *
 * `events` is append-only at the database level: a trigger rejects UPDATE, DELETE and TRUNCATE.
 * It guards against mistakes, not against the table owner: a test (or an operator repairing an
 * accident) may run `alter table events disable trigger events_append_only` and must enable it
 * again. Tampering that bypasses it is what the hash chain detects. In production, the application
 * role should also lack UPDATE, DELETE and TRUNCATE privileges on `events`.
 */
import type { Migration } from "../../../src/db/migrate.ts"

export const eventStoreMigrations: ReadonlyArray<Migration> = [
  {
    version: 100,
    name: "event store: events and stream heads",
    sql: `
      create table events (
        global_position bigint generated always as identity primary key,
        stream_id text not null check (stream_id <> ''),
        stream_version bigint not null check (stream_version >= 1),
        event_id uuid not null,
        event_type text not null check (event_type <> ''),
        schema_version integer not null check (schema_version >= 1),
        data jsonb not null check (jsonb_typeof(data) = 'object'),
        metadata jsonb not null check (jsonb_typeof(metadata) = 'object'),
        recorded_at timestamptz not null,
        transaction_id xid8 not null default pg_current_xact_id(),
        hash bytea not null check (octet_length(hash) = 32),
        prev_hash bytea not null check (octet_length(prev_hash) = 32),
        constraint events_event_id_unique unique (event_id),
        constraint events_stream_version_unique unique (stream_id, stream_version)
      );
      create index events_transaction_position on events (transaction_id, global_position);

      create table streams (
        stream_id text primary key,
        version bigint not null check (version >= 1),
        last_hash bytea not null check (octet_length(last_hash) = 32),
        updated_at timestamptz not null
      );
    `,
  },
  {
    version: 101,
    name: "event store: events are append-only",
    sql: `
      create function events_reject_change() returns trigger language plpgsql as $$
      begin
        raise exception 'events are append-only: % is not allowed', tg_op
          using errcode = 'insufficient_privilege',
                hint = 'a correction is a new event; never edit or delete a recorded one';
      end
      $$;
      create trigger events_append_only before update or delete on events
        for each row execute function events_reject_change();
      create trigger events_no_truncate before truncate on events
        for each statement execute function events_reject_change();
    `,
  },
  {
    version: 102,
    name: "event store: append in one statement",
    // Data and metadata come as two JSON arrays (one text parameter each) rather than arrays of
    // jsonb, whose array-literal escaping costs more than the insert. One round trip per append:
    // the stream lock, the version and hash check against the head the
    // client chained its events from, the insert, the head move and the notification. The client
    // computes the hashes (they cover canonical JSON it builds); the check proves it chained them
    // from the current head. The lock comes first, before anything can assign a transaction id.
    sql: `
      create function event_store_append(
        p_stream_id text, p_base_version bigint, p_base_hash bytea, p_recorded_at timestamptz,
        p_versions bigint[], p_event_ids uuid[], p_types text[], p_schema_versions integer[],
        p_data jsonb, p_metadata jsonb, p_hashes bytea[], p_prev_hashes bytea[], p_channel text)
      returns table (out_position bigint, out_version bigint, out_conflict boolean)
      language plpgsql as $$
      declare
        v_version bigint;
        v_hash bytea;
        v_count integer := cardinality(p_versions);
      begin
        if pg_current_xact_id_if_assigned() is not null then
          raise exception 'an append must be its transaction''s first write' using errcode = 'P0001';
        end if;
        if current_setting('transaction_isolation') <> 'read committed' then
          raise exception 'appends need READ COMMITTED' using errcode = 'P0001';
        end if;
        perform pg_advisory_xact_lock(hashtextextended(p_stream_id, 0));
        select s.version, s.last_hash into v_version, v_hash from streams s where s.stream_id = p_stream_id;
        if coalesce(v_version, 0) <> p_base_version
           or coalesce(v_hash, decode(repeat('00', 32), 'hex')) <> p_base_hash then
          return query select null::bigint, coalesce(v_version, 0), true;
          return;
        end if;
        return query
          with appended as (
            insert into events (stream_id, stream_version, event_id, event_type, schema_version, data,
                                metadata, recorded_at, hash, prev_hash)
            select p_stream_id, e.v, e.id, e.t, e.sv, d.value, m.value, p_recorded_at, e.h, e.ph
            from unnest(p_versions, p_event_ids, p_types, p_schema_versions, p_hashes, p_prev_hashes)
                   with ordinality as e(v, id, t, sv, h, ph, ordinal)
              join jsonb_array_elements(p_data) with ordinality as d(value, ordinal) on d.ordinal = e.ordinal
              join jsonb_array_elements(p_metadata) with ordinality as m(value, ordinal) on m.ordinal = e.ordinal
            order by e.ordinal
            returning events.global_position, events.stream_version
          ), head as (
            insert into streams (stream_id, version, last_hash, updated_at)
            values (p_stream_id, p_base_version + v_count, p_hashes[v_count], p_recorded_at)
            on conflict (stream_id) do update
              set version = excluded.version, last_hash = excluded.last_hash, updated_at = excluded.updated_at
          )
          select a.global_position, a.stream_version, false
          from appended a
          order by a.stream_version;
        -- NOTIFY holds a database-wide lock from pre-commit until the commit record is flushed, so
        -- it serialises every committing transaction that uses it. The store's own appends pass no
        -- channel and notify after their commit instead; appends inside a caller's transaction do.
        if p_channel is not null then
          perform pg_notify(p_channel, p_stream_id);
        end if;
      end
      $$;
    `,
  },
  {
    version: 103,
    name: "event store: append to several streams in one statement",
    // Group commit across streams: one transaction appends the batches of many streams. Every
    // stream's lock is taken first, in one global order (the lock key's), before anything can assign
    // a transaction id: transactions that share streams never deadlock, and within each stream
    // transaction ids still increase with versions. A stream whose head is not the base its client
    // chained from is reported as a conflict and gets nothing; the other streams are appended.
    sql: `
      create function event_store_append_streams(
        p_stream_ids text[], p_base_versions bigint[], p_base_hashes bytea[], p_recorded_at timestamptz,
        p_streams integer[], p_versions bigint[], p_event_ids uuid[], p_types text[],
        p_schema_versions integer[], p_data jsonb, p_metadata jsonb, p_hashes bytea[], p_prev_hashes bytea[])
      returns table (out_stream integer, out_position bigint, out_version bigint, out_conflict boolean)
      language plpgsql as $$
      declare
        v_key bigint;
        v_conflicted integer[];
      begin
        if pg_current_xact_id_if_assigned() is not null then
          raise exception 'an append must be its transaction''s first write' using errcode = 'P0001';
        end if;
        if current_setting('transaction_isolation') <> 'read committed' then
          raise exception 'appends need READ COMMITTED' using errcode = 'P0001';
        end if;
        if cardinality(p_stream_ids) <> (select count(distinct s) from unnest(p_stream_ids) s) then
          raise exception 'a stream appears twice in one append' using errcode = 'P0001';
        end if;
        for v_key in
          select distinct hashtextextended(s, 0) from unnest(p_stream_ids) s order by 1
        loop
          perform pg_advisory_xact_lock(v_key);
        end loop;
        select coalesce(array_agg(b.i), '{}') into v_conflicted
        from unnest(p_stream_ids, p_base_versions, p_base_hashes) with ordinality as b(sid, bv, bh, i)
          left join streams s on s.stream_id = b.sid
        where coalesce(s.version, 0) <> b.bv
           or coalesce(s.last_hash, decode(repeat('00', 32), 'hex')) <> b.bh;
        return query
          select b.i::integer, null::bigint, coalesce(s.version, 0), true
          from unnest(p_stream_ids) with ordinality as b(sid, i)
            left join streams s on s.stream_id = b.sid
          where b.i = any(v_conflicted);
        return query
          with appended as (
            insert into events (stream_id, stream_version, event_id, event_type, schema_version, data,
                                metadata, recorded_at, hash, prev_hash)
            select p_stream_ids[e.st], e.v, e.id, e.t, e.sv, d.value, m.value, p_recorded_at, e.h, e.ph
            from unnest(p_streams, p_versions, p_event_ids, p_types, p_schema_versions, p_hashes, p_prev_hashes)
                   with ordinality as e(st, v, id, t, sv, h, ph, ordinal)
              join jsonb_array_elements(p_data) with ordinality as d(value, ordinal) on d.ordinal = e.ordinal
              join jsonb_array_elements(p_metadata) with ordinality as m(value, ordinal) on m.ordinal = e.ordinal
            where not (e.st = any(v_conflicted))
            order by e.ordinal
            returning events.stream_id, events.global_position, events.stream_version
          ), head as (
            insert into streams (stream_id, version, last_hash, updated_at)
            select distinct on (e.st) p_stream_ids[e.st], e.v, e.h, p_recorded_at
            from unnest(p_streams, p_versions, p_hashes) as e(st, v, h)
            where not (e.st = any(v_conflicted))
            order by e.st, e.v desc
            on conflict (stream_id) do update
              set version = excluded.version, last_hash = excluded.last_hash, updated_at = excluded.updated_at
          )
          select array_position(p_stream_ids, a.stream_id), a.global_position, a.stream_version, false
          from appended a
          order by a.global_position;
      end
      $$;
    `,
  },
  {
    version: 104,
    name: "event store: the guard of a group commit sent with its COMMIT",
    // A group commit whose statements and COMMIT leave together cannot look at the append's answer
    // before committing. This guard, sent just before COMMIT, fails the transaction (so COMMIT
    // answers ROLLBACK) unless every stream's head is the one its append chained to: a stream that
    // conflicted got no events, and its commands' other writes must not commit either.
    sql: `
      create function event_store_require_heads(p_stream_ids text[], p_versions bigint[], p_hashes bytea[])
      returns void
      language plpgsql as $$
      declare
        v_missed text;
      begin
        select string_agg(h.sid, ', ') into v_missed
        from unnest(p_stream_ids, p_versions, p_hashes) as h(sid, v, lh)
          left join streams s on s.stream_id = h.sid
        where s.version is distinct from h.v or s.last_hash is distinct from h.lh;
        if v_missed is not null then
          raise exception 'the append did not reach the heads it chained to on %', v_missed
            using errcode = 'P0001';
        end if;
      end
      $$;
    `,
  },
  {
    version: 105,
    name: "event store: a group commit without conflicts skips the conflict query",
    // 103 ran the query that reports conflicted streams on every append. With no conflict (nearly
    // always) PostgreSQL planned it anew each time (a custom plan for an empty array), about a tenth
    // of the append's own cost. Only that statement is now behind a check; the rest is 103's.
    sql: `
      create or replace function event_store_append_streams(
        p_stream_ids text[], p_base_versions bigint[], p_base_hashes bytea[], p_recorded_at timestamptz,
        p_streams integer[], p_versions bigint[], p_event_ids uuid[], p_types text[],
        p_schema_versions integer[], p_data jsonb, p_metadata jsonb, p_hashes bytea[], p_prev_hashes bytea[])
      returns table (out_stream integer, out_position bigint, out_version bigint, out_conflict boolean)
      language plpgsql as $$
      declare
        v_key bigint;
        v_conflicted integer[];
      begin
        if pg_current_xact_id_if_assigned() is not null then
          raise exception 'an append must be its transaction''s first write' using errcode = 'P0001';
        end if;
        if current_setting('transaction_isolation') <> 'read committed' then
          raise exception 'appends need READ COMMITTED' using errcode = 'P0001';
        end if;
        if cardinality(p_stream_ids) <> (select count(distinct s) from unnest(p_stream_ids) s) then
          raise exception 'a stream appears twice in one append' using errcode = 'P0001';
        end if;
        for v_key in
          select distinct hashtextextended(s, 0) from unnest(p_stream_ids) s order by 1
        loop
          perform pg_advisory_xact_lock(v_key);
        end loop;
        select coalesce(array_agg(b.i), '{}') into v_conflicted
        from unnest(p_stream_ids, p_base_versions, p_base_hashes) with ordinality as b(sid, bv, bh, i)
          left join streams s on s.stream_id = b.sid
        where coalesce(s.version, 0) <> b.bv
           or coalesce(s.last_hash, decode(repeat('00', 32), 'hex')) <> b.bh;
        if cardinality(v_conflicted) > 0 then
          return query
            select b.i::integer, null::bigint, coalesce(s.version, 0), true
            from unnest(p_stream_ids) with ordinality as b(sid, i)
              left join streams s on s.stream_id = b.sid
            where b.i = any(v_conflicted);
        end if;
        return query
          with appended as (
            insert into events (stream_id, stream_version, event_id, event_type, schema_version, data,
                                metadata, recorded_at, hash, prev_hash)
            select p_stream_ids[e.st], e.v, e.id, e.t, e.sv, d.value, m.value, p_recorded_at, e.h, e.ph
            from unnest(p_streams, p_versions, p_event_ids, p_types, p_schema_versions, p_hashes, p_prev_hashes)
                   with ordinality as e(st, v, id, t, sv, h, ph, ordinal)
              join jsonb_array_elements(p_data) with ordinality as d(value, ordinal) on d.ordinal = e.ordinal
              join jsonb_array_elements(p_metadata) with ordinality as m(value, ordinal) on m.ordinal = e.ordinal
            where not (e.st = any(v_conflicted))
            order by e.ordinal
            returning events.stream_id, events.global_position, events.stream_version
          ), head as (
            insert into streams (stream_id, version, last_hash, updated_at)
            select distinct on (e.st) p_stream_ids[e.st], e.v, e.h, p_recorded_at
            from unnest(p_streams, p_versions, p_hashes) as e(st, v, h)
            where not (e.st = any(v_conflicted))
            order by e.st, e.v desc
            on conflict (stream_id) do update
              set version = excluded.version, last_hash = excluded.last_hash, updated_at = excluded.updated_at
          )
          select array_position(p_stream_ids, a.stream_id), a.global_position, a.stream_version, false
          from appended a
          order by a.global_position;
      end
      $$;
    `,
  },
  {
    version: 106,
    name: "event store: subscriptions do not wait for transactions declared never to append",
    // A subscription reads only transactions older than every running one, so one long transaction
    // holds every subscriber back for as long as it runs: a projection rebuild's index builds
    // (plain CREATE INDEX has a transaction id from its start) stalled the live projection, and with
    // it every read-your-writes query, for seconds per million events. A transaction may declare
    // itself here once it has its id; it then cannot append (an append must be its transaction's
    // first write), and subscriptions look past it.
    sql: `
      create table event_store_quiet_transactions (
        transaction_id xid8 primary key,
        declared_at timestamptz not null default now()
      );
      create function event_store_visible_before() returns xid8 language sql stable as $$
        select coalesce(
          (select min(x) from pg_snapshot_xip(pg_current_snapshot()) as x
            where not exists (select 1 from event_store_quiet_transactions q where q.transaction_id = x)),
          pg_snapshot_xmax(pg_current_snapshot()))
      $$;
    `,
  },
]
