/**
 * Proves that the ledger projection, fed by the real PostgreSQL event store, holds exactly the
 * balances and transfers the events imply, applies every event exactly once whatever happens to its
 * runners, lets a reader wait for its own writes, and rebuilds from zero into identical tables.
 */
import { Effect } from "effect"
import pg from "pg"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import {
  makePostgresEventStore,
  type PostgresEventStore,
} from "../../adapters/eventstore/postgres/event-store.ts"
import { foldLedgerBatch, ProjectionViolation, StreamMap } from "../../projections/ledger.ts"
import { live_schema, projectionTablesSql } from "../../projections/schema.ts"
import { uuidv7 } from "../../src/ids.ts"
import {
  getAccount,
  getAccountConsistent,
  getTransfer,
  InvalidQueryParameter,
  type LedgerTransfer,
  listAccounts,
  listTransfers,
  ProjectionTimeout,
  waitForProjection,
  waitForStreamHead,
} from "../../src/ledger/queries.ts"
import type { NewEvent, RecordedEvent } from "../../src/ports/event-store.ts"
import { commitBatch, loadCheckpoint, lock_class_leader } from "../../src/projections/batch.ts"
import { compareSchemas, rebuildProjection } from "../../src/projections/rebuild.ts"
import { type RunningProjection, startProjection } from "../../src/projections/runner.ts"
import { freshDatabase, type TestDatabase } from "../support/db.ts"
import { type SyntheticLedger, syntheticLedger } from "../support/projections-fixture.ts"

let db: TestDatabase
let store: PostgresEventStore

beforeAll(async () => {
  db = await freshDatabase()
  store = makePostgresEventStore(db.pool)
})

afterAll(async () => {
  await Effect.runPromise(store.close)
  await db.drop()
})

/** Appends the ledgers' events interleaved, `chunk` events per append, as concurrent writers would. */
const appendInterleaved = async (ledgers: ReadonlyArray<SyntheticLedger>, chunk: number): Promise<void> => {
  const offsets = ledgers.map(() => 0)
  let remaining = true
  while (remaining) {
    remaining = false
    await Promise.all(
      ledgers.map(async (ledger, index) => {
        const from = offsets[index] ?? 0
        const slice = ledger.events.slice(from, from + chunk)
        if (slice.length === 0) return
        offsets[index] = from + slice.length
        remaining = true
        await Effect.runPromise(store.append(ledger.stream_id, "any", slice))
      }),
    )
  }
}

const waitAll = async (ledgers: ReadonlyArray<SyntheticLedger>, timeout_ms = 30_000): Promise<void> => {
  for (const ledger of ledgers) await waitForStreamHead(db.pool, ledger.stream_id, timeout_ms)
}

/** The projection's rows against the fixture's own bookkeeping. */
const expectMatchesOracle = async (ledger: SyntheticLedger): Promise<void> => {
  for (const [account_id, expected] of ledger.accounts) {
    const actual = await getAccount(db.pool, ledger.stream_id, account_id)
    expect(actual, account_id).toMatchObject({
      asset: { code: expected.asset_code },
      kind: expected.kind,
      debits_pending: expected.debits_pending,
      debits_posted: expected.debits_posted,
      credits_pending: expected.credits_pending,
      credits_posted: expected.credits_posted,
    })
  }
  const statuses = await db.pool.query<{ transfer_id: string; status: string }>(
    `select transfer_id, status from ${live_schema}.ledger_transfers where stream_id = $1`,
    [ledger.stream_id],
  )
  expect(new Map(statuses.rows.map((r) => [r.transfer_id, r.status]))).toEqual(ledger.statuses)
}

const ledgerA = syntheticLedger({ tenant: "acme", environment: "sandbox", seed: 1, operation_count: 1_500 })
const ledgerB = syntheticLedger({ tenant: "acme", environment: "production", seed: 2, operation_count: 800 })
const ledgerC = syntheticLedger({ tenant: "globex", environment: "sandbox", seed: 3, operation_count: 600 })

describe("ledger projection", () => {
  let runner: RunningProjection

  it("projects several ledgers: balances, transfers and their statuses match the events", async () => {
    await appendInterleaved([ledgerA, ledgerB, ledgerC], 37)
    runner = startProjection(db.pool, store, { batch_size: 113, idle_wait_ms: 200 })
    await waitAll([ledgerA, ledgerB, ledgerC])
    for (const ledger of [ledgerA, ledgerB, ledgerC]) await expectMatchesOracle(ledger)

    const wallet = await getAccount(db.pool, ledgerB.stream_id, [...ledgerB.accounts.keys()].at(-1) ?? "")
    expect(wallet).toMatchObject({ tenant: "acme", environment: "production", kind: "wallet" })
    // Double entry holds per asset in the table, pending and posted apart.
    const sums = await db.pool.query(
      `select stream_id, asset_code, sum(debits_posted) = sum(credits_posted) as posted,
              sum(debits_pending) = sum(credits_pending) as pending
         from ${live_schema}.ledger_accounts group by 1, 2`,
    )
    expect(sums.rows.length).toBe(6)
    for (const row of sums.rows) expect(row).toMatchObject({ posted: true, pending: true })
  })

  it("records each transfer kind with its amounts, resolution and position", async () => {
    const transfers = await db.pool.query<{ kind: string; status: string; n: string }>(
      `select kind, status, count(*)::text as n from ${live_schema}.ledger_transfers
        where stream_id = $1 group by 1, 2 order by 1, 2`,
      [ledgerA.stream_id],
    )
    const kinds = transfers.rows.map((r) => `${r.kind}:${r.status}`)
    expect(kinds).toEqual(
      expect.arrayContaining([
        "single:posted",
        "pending:posted",
        "pending:voided",
        "pending:expired",
        "post_pending:posted",
        "void_pending:voided",
      ]),
    )
    const post = (
      await db.pool.query<{ transfer_id: string; pending_id: string }>(
        `select transfer_id, pending_id from ${live_schema}.ledger_transfers
          where stream_id = $1 and kind = 'post_pending' limit 1`,
        [ledgerA.stream_id],
      )
    ).rows[0]
    if (post === undefined) throw new Error("the fixture has no post")
    const posting = await getTransfer(db.pool, ledgerA.stream_id, post.transfer_id)
    const pending = await getTransfer(db.pool, ledgerA.stream_id, post.pending_id)
    expect(pending).toMatchObject({ kind: "pending", status: "posted", posted_amount: posting?.amount })
    expect(pending?.resolved_at).toBe(posting?.created_at)
    expect(posting).toMatchObject({
      debit_account_id: pending?.debit_account_id,
      credit_account_id: pending?.credit_account_id,
      code: pending?.code,
    })
    expect((posting?.global_position ?? 0n) > (pending?.global_position ?? 0n)).toBe(true)
  })

  it("lists transfers by account, status and time with cursor pagination", async () => {
    const wallet = [...ledgerA.accounts.entries()].find(([, a]) => a.kind === "wallet")?.[0] ?? ""
    const all = await db.pool.query<{ transfer_id: string }>(
      `select transfer_id from ${live_schema}.ledger_transfers
        where stream_id = $1 and (debit_account_id = $2 or credit_account_id = $2)
        order by global_position desc`,
      [ledgerA.stream_id, wallet],
    )
    const seen: string[] = []
    let starting_after: string | undefined
    for (let page = 0; page < 1_000; page += 1) {
      const result = await listTransfers(db.pool, ledgerA.stream_id, {
        account_id: wallet,
        limit: 7,
        ...(starting_after === undefined ? {} : { starting_after }),
      })
      seen.push(...result.data.map((t) => t.transfer_id))
      expect(result.data.length).toBeLessThanOrEqual(7)
      if (!result.has_more) {
        expect(result.next_cursor).toBeNull()
        break
      }
      starting_after = result.next_cursor ?? undefined
    }
    expect(seen).toEqual(all.rows.map((r) => r.transfer_id))

    const pending = await listTransfers(db.pool, ledgerA.stream_id, { status: "expired", limit: 100 })
    expect(pending.data.length).toBeGreaterThan(0)
    expect(pending.data.every((t) => t.status === "expired" && t.kind === "pending")).toBe(true)

    const middle = (await listTransfers(db.pool, ledgerA.stream_id, { limit: 100 })).data
    const newest = middle[0] as LedgerTransfer
    const older = middle[50] as LedgerTransfer
    const window = await listTransfers(db.pool, ledgerA.stream_id, {
      created_at_gte: older.created_at,
      created_at_lt: newest.created_at,
      limit: 100,
    })
    expect(
      window.data.every((t) => t.created_at >= older.created_at && t.created_at < newest.created_at),
    ).toBe(true)
    expect(window.data.map((t) => t.transfer_id)).toContain(older.transfer_id)
    expect(window.data.map((t) => t.transfer_id)).not.toContain(newest.transfer_id)

    const accounts = await listAccounts(db.pool, ledgerA.stream_id, { limit: 5, kind: "wallet" })
    const rest = await listAccounts(db.pool, ledgerA.stream_id, {
      limit: 100,
      kind: "wallet",
      starting_after: accounts.next_cursor ?? "",
    })
    expect(accounts.data.length + rest.data.length).toBe(10)
    expect(rest.has_more).toBe(false)

    await expect(listTransfers(db.pool, ledgerA.stream_id, { limit: 101 })).rejects.toBeInstanceOf(
      InvalidQueryParameter,
    )
    await expect(
      listTransfers(db.pool, ledgerA.stream_id, { starting_after: uuidv7() }),
    ).rejects.toMatchObject({
      param: "starting_after",
    })
  })

  it("lets a reader wait for its own write: a balance read after an acknowledged transfer reflects it", async () => {
    const [world, wallet] = [...ledgerC.accounts.entries()]
      .filter(([, a]) => a.asset_code === "USDC@ethereum" && (a.kind === "world" || a.kind === "wallet"))
      .map(([id]) => id)
    if (world === undefined || wallet === undefined) throw new Error("fixture accounts missing")
    for (let round = 0; round < 5; round += 1) {
      const before = await getAccount(db.pool, ledgerC.stream_id, wallet)
      const appended = await Effect.runPromise(
        store.append(ledgerC.stream_id, "any", [
          transferEvent(ledgerC, world, wallet, 1_234n, "2026-01-01T00:00:00.000Z"),
        ]),
      )
      const after = await getAccountConsistent(db.pool, ledgerC.stream_id, wallet, 15_000)
      expect(after?.credits_posted).toBe((before?.credits_posted ?? 0n) + 1_234n)
      expect(after?.last_stream_version).toBe(appended.next_expected_version)
    }
  })

  it("fails a wait with a typed timeout when the projection does not get there", async () => {
    const error = await waitForProjection(db.pool, ledgerC.stream_id, 1_000_000, 30).catch((e: unknown) => e)
    expect(error).toBeInstanceOf(ProjectionTimeout)
    expect(error).toMatchObject({ stream_id: ledgerC.stream_id, min_version: 1_000_000, timeout_ms: 30 })
  })

  it("rebuilds from zero into a shadow schema identical to the live tables", async () => {
    await waitAll([ledgerA, ledgerB, ledgerC])
    await runner.stop()
    const progress: number[] = []
    const result = await rebuildProjection(db.pool, store, {
      swap: false,
      shadow_schema: "rebuild_check",
      batch_size: 500,
      onProgress: (p) => progress.push(p.event_count),
    })
    expect(result.schema).toBe("rebuild_check")
    expect(progress.at(-1)).toBe(result.event_count)
    expect(await compareSchemas(db.pool, live_schema, "rebuild_check")).toEqual([])
    // Reading through the event store port instead of the events table gives the same tables.
    await rebuildProjection(db.pool, store, { swap: false, shadow_schema: "rebuild_port", reader: "store" })
    expect(await compareSchemas(db.pool, "rebuild_port", "rebuild_check")).toEqual([])
    await db.pool.query("drop schema rebuild_port cascade")
    // The comparison does see a difference when there is one.
    await db.pool.query(
      "update rebuild_check.ledger_accounts set credits_posted = credits_posted + 1 where ctid in (select ctid from rebuild_check.ledger_accounts limit 1)",
    )
    const differences = await compareSchemas(db.pool, live_schema, "rebuild_check")
    expect(differences.map((d) => [d.table, d.only_in_a.length, d.only_in_b.length])).toEqual([
      ["ledger_accounts", 1, 1],
    ])
    await db.pool.query("drop schema rebuild_check cascade")
  })

  it("swaps a rebuild in while the live runner runs and writers append, losing and doubling nothing", async () => {
    const ledgerD = syntheticLedger({
      tenant: "initech",
      environment: "sandbox",
      seed: 4,
      operation_count: 1_500,
    })
    runner = startProjection(db.pool, store, { batch_size: 50, idle_wait_ms: 100 })
    const writing = appendInterleaved([ledgerD], 20)
    const result = await rebuildProjection(db.pool, store, { batch_size: 300 })
    expect(result.schema).toBe(live_schema)
    await writing
    await waitAll([ledgerA, ledgerB, ledgerC, ledgerD])
    await expectMatchesOracle(ledgerD)
    await expectMatchesOracle(ledgerA)
    await rebuildProjection(db.pool, store, { swap: false, shadow_schema: "rebuild_check" })
    await waitAll([ledgerD])
    expect(await compareSchemas(db.pool, live_schema, "rebuild_check")).toEqual([])
    await runner.stop()
    await db.pool.query("drop schema rebuild_check cascade")
  })

  it("a rebuild's index builds hold no reader back: a balance read after an acknowledged transfer reflects it meanwhile", async () => {
    runner = startProjection(db.pool, store, { batch_size: 50, idle_wait_ms: 100 })
    const [world, wallet] = [...ledgerC.accounts.entries()]
      .filter(([, a]) => a.asset_code === "USDC@ethereum" && (a.kind === "world" || a.kind === "wallet"))
      .map(([id]) => id)
    if (world === undefined || wallet === undefined) throw new Error("fixture accounts missing")
    // The index phase is held for as long as the test needs: a lock on the shadow's table that
    // CREATE INDEX waits for, with its transaction (and transaction id) open.
    const locker = await db.pool.connect()
    let locking: Promise<unknown> | undefined
    const rebuilding = rebuildProjection(db.pool, store, {
      swap: false,
      shadow_schema: "rebuild_stall",
      onProgress: (p) => {
        if (p.phase === "index" && locking === undefined)
          locking = locker
            .query("begin")
            .then(() => locker.query("lock table rebuild_stall.ledger_transfers in row exclusive mode"))
      },
    })
    try {
      const deadline = Date.now() + 10_000
      let waiting = 0
      while (waiting === 0 && Date.now() < deadline) {
        await new Promise((resolve) => setTimeout(resolve, 20))
        const found = await db.pool.query<{ n: number }>(
          `select count(*)::int as n from pg_stat_activity
            where datname = current_database() and wait_event_type = 'Lock' and query ilike 'create index%'`,
        )
        waiting = found.rows[0]?.n ?? 0
      }
      expect(waiting).toBeGreaterThan(0)
      const before = await getAccount(db.pool, ledgerC.stream_id, wallet)
      const appended = await Effect.runPromise(
        store.append(ledgerC.stream_id, "any", [
          transferEvent(ledgerC, world, wallet, 77n, "2026-01-01T00:00:01.000Z"),
        ]),
      )
      const after = await getAccountConsistent(db.pool, ledgerC.stream_id, wallet, 5_000)
      expect(after?.credits_posted).toBe((before?.credits_posted ?? 0n) + 77n)
      expect(after?.last_stream_version).toBe(appended.next_expected_version)
    } finally {
      await locking
      await locker.query("commit")
      locker.release()
      await rebuilding
      await runner.stop()
    }
    await db.pool.query("drop schema rebuild_stall cascade")
  })

  it("rebuilds on a pool of two connections (the index builds leave one free for their declarations)", async () => {
    const small = new pg.Pool({ connectionString: db.url, max: 2 })
    small.on("error", () => {})
    const outcome = await Promise.race([
      rebuildProjection(small, makePostgresEventStore(small), {
        swap: false,
        shadow_schema: "rebuild_small",
      }).then(
        () => "done",
        (error: unknown) => `failed: ${String(error)}`,
      ),
      new Promise<string>((resolve) => setTimeout(() => resolve("still running after 20 s"), 20_000)),
    ])
    expect(outcome).toBe("done")
    await small.end()
    await db.pool.query("drop schema rebuild_small cascade")
  }, 60_000)
})

/** A single-phase transfer event on `ledger` (for appends beyond the fixture). */
const transferEvent = (
  ledger: SyntheticLedger,
  debit: string,
  credit: string,
  amount: bigint,
  at: string,
): NewEvent => ({
  event_id: uuidv7(),
  event_type: "TransferCreated",
  schema_version: 1,
  data: {
    transfer_id: uuidv7(),
    debit_account_id: debit,
    credit_account_id: credit,
    asset_code: ledger.accounts.get(debit)?.asset_code ?? "",
    amount: amount.toString(),
    code: 1,
    user_data: null,
    linked_group_id: null,
    created_at: at,
  },
  metadata: {
    tenant: "t",
    environment: "e",
    actor: "test",
    correlation_id: uuidv7(),
    causation_id: null,
    idempotency_key: null,
  },
})

describe("exactly once", () => {
  it("counts every event once across runner restarts, crashes and a second runner standing by", async () => {
    const schema = "exactly_once"
    await db.pool.query(`create schema ${schema}`)
    await db.pool.query(projectionTablesSql(schema))
    const ledger = syntheticLedger({
      tenant: "umbrella",
      environment: "sandbox",
      seed: 5,
      operation_count: 1_200,
    })
    const writing = appendInterleaved([ledger], 25)
    const options = { schema, batch_size: 40, idle_wait_ms: 50, standby_retry_ms: 20 }
    const runners = [startProjection(db.pool, store, options), startProjection(db.pool, store, options)]
    let kill_count = 0
    for (let round = 0; round < 16; round += 1) {
      await new Promise((resolve) => setTimeout(resolve, 30))
      if (round % 2 === 0) {
        // A crash: the leader's connection dies, mid-transaction or between two; its lock goes with it.
        const killed = await db.pool.query(
          `select pg_terminate_backend(pid) from pg_locks
            where locktype = 'advisory' and classid = $1 and granted`,
          [lock_class_leader],
        )
        kill_count += killed.rowCount ?? 0
        continue
      }
      const leader = runners.findIndex((r) => r.isLeader())
      if (leader < 0) continue
      // A clean stop of the leader, and a fresh runner: the standby takes over from the checkpoint.
      await runners[leader]?.stop()
      runners[leader] = startProjection(db.pool, store, options)
    }
    expect(kill_count).toBeGreaterThan(0)
    await writing
    const head = await Effect.runPromise(store.streamVersion(ledger.stream_id))
    await waitForProjectionIn(schema, ledger.stream_id, head)
    await Promise.all(runners.map((r) => r.stop()))
    const rows = await db.pool.query<{ account_id: string; credits_posted: string; debits_posted: string }>(
      `select account_id, credits_posted::text, debits_posted::text from ${schema}.ledger_accounts where stream_id = $1`,
      [ledger.stream_id],
    )
    expect(rows.rows.length).toBe(ledger.accounts.size)
    for (const row of rows.rows) {
      const expected = ledger.accounts.get(row.account_id)
      expect([row.account_id, BigInt(row.credits_posted), BigInt(row.debits_posted)]).toEqual([
        row.account_id,
        expected?.credits_posted,
        expected?.debits_posted,
      ])
    }
    const transfers = await db.pool.query(
      `select count(*)::int as n from ${schema}.ledger_transfers where stream_id = $1`,
      [ledger.stream_id],
    )
    expect(transfers.rows[0]?.n).toBe(ledger.statuses.size)
  })

  it("writes nothing for a batch whose starting checkpoint is no longer the stored one", async () => {
    const schema = "exactly_once"
    const client = await db.pool.connect()
    try {
      const stored = await loadCheckpoint(client, schema, "ledger")
      const batch = await Effect.runPromise(
        store.readSubscriptionBatch({ transaction_id: "0", global_position: 0n }, 10),
      )
      const before = await db.pool.query(`select count(*)::int as n from ${schema}.ledger_accounts`)
      const mustNotApply = () => Promise.reject(new Error("must not be called"))
      const options = {
        schema,
        projection_name: "ledger",
        applier: {
          apply: mustNotApply,
          write: mustNotApply,
          flush: mustNotApply,
          prepare: () => {
            throw new Error("must not be called")
          },
          needsReads: () => true,
          discard: () => {},
        },
        take_batch_lock: true,
        synchronous_commit: true,
        notify: true,
      }
      expect(await commitBatch(client, options, { transaction_id: "0", global_position: 0n }, batch)).toBe(
        false,
      )
      const after = await db.pool.query(`select count(*)::int as n from ${schema}.ledger_accounts`)
      expect(after.rows[0]?.n).toBe(before.rows[0]?.n)
      expect(await loadCheckpoint(client, schema, "ledger")).toEqual(stored)
    } finally {
      client.release()
    }
  })
})

const waitForProjectionIn = async (schema: string, stream_id: string, version: number): Promise<void> => {
  const deadline = Date.now() + 30_000
  while (Date.now() < deadline) {
    const found = await db.pool.query<{ version: number }>(
      `select version from ${schema}.projection_streams where projection = 'ledger' and stream_id = $1`,
      [stream_id],
    )
    if ((found.rows[0]?.version ?? 0) >= version) return
    await new Promise((resolve) => setTimeout(resolve, 20))
  }
  throw new Error(`projection in ${schema} did not reach ${stream_id}@${version}`)
}

describe("the fold re-checks what it consumes", () => {
  const recorded = (events: ReadonlyArray<NewEvent>): RecordedEvent[] =>
    events.map((event, index) => ({
      ...event,
      stream_id: "ledger-x-sandbox",
      stream_version: index + 1,
      global_position: BigInt(index + 1),
      recorded_at: "2025-01-01T00:00:00.000Z",
      hash: "0".repeat(64),
      prev_hash: "0".repeat(64),
    }))
  const base = syntheticLedger({
    tenant: "x",
    environment: "sandbox",
    seed: 9,
    operation_count: 0,
    wallet_count: 2,
  })
  const ids = [...base.accounts.keys()]
  const [world, , , walletA, walletB] = ids as [string, string, string, string, string]
  const fold = (extra: ReadonlyArray<NewEvent>) =>
    foldLedgerBatch(
      { accounts: new StreamMap(), pendings: new StreamMap() },
      recorded([...base.events, ...extra]),
    )
  const at = "2025-01-02T00:00:00.000Z"
  const transfer = (debit: string, credit: string, data: Record<string, unknown> = {}): NewEvent => {
    const event = transferEvent(base, debit, credit, 1n, at)
    return { ...event, data: { ...event.data, ...data } }
  }
  const cases: ReadonlyArray<{ name: string; event: NewEvent; reason: RegExp }> = [
    {
      name: "a transfer that overdraws a constrained wallet",
      event: transfer(walletA, walletB),
      reason: /overdrawn/,
    },
    {
      name: "a transfer from an account that was never opened",
      event: transfer(walletA, walletB, { debit_account_id: uuidv7() }),
      reason: /account .* does not exist/,
    },
    {
      name: "a transfer between accounts of different assets",
      event: transfer(world, ids.at(-1) ?? ""),
      reason: /holds USDT@tron, not USDC@ethereum/,
    },
    {
      name: "a post of an unknown pending transfer",
      event: {
        ...transfer(world, walletA),
        event_type: "PendingTransferPosted",
        data: {
          transfer_id: uuidv7(),
          pending_id: uuidv7(),
          amount: "1",
          linked_group_id: null,
          posted_at: at,
        },
      },
      reason: /pending transfer .* does not exist/,
    },
    {
      name: "an amount that is not a decimal string",
      event: transfer(world, walletA, { amount: "1.5" }),
      reason: /decimal string/,
    },
  ]
  it.each(cases)("rejects $name, naming the event", ({ event, reason }) => {
    const error = (() => {
      try {
        fold([event])
        return undefined
      } catch (e) {
        return e
      }
    })()
    expect(error).toBeInstanceOf(ProjectionViolation)
    expect((error as ProjectionViolation).event_id).toBe(event.event_id)
    expect((error as Error).message).toMatch(reason)
  })

  it("ignores events that are not ledger events", () => {
    const other = {
      ...transferEvent(base, world, walletA, 1n, "2025-01-02T00:00:00.000Z"),
      event_type: "TenantRegistered",
    }
    expect(fold([other]).applied_count).toBe(base.events.length)
  })
})
