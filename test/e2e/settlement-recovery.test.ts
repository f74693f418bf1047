// A settlement interrupted between its two steps, against the real platform process (its
// settlement sweeper every second): the reservation of a pending payment was posted to escrow by a
// process that died before the release. The payee that settlement chose is recorded with the post
// (in its transaction, by the platform's own ledger hook), so the sweeper finishes the payment into
// that wallet whatever happened to the identifier since: unlinked, or linked to the paying wallet
// itself. And a payment that cannot be settled does not hold up another one waiting for the sweeper.
// A post whose payee was unlinked before it committed is refused (rolled back), so the payment waits
// for the wallet linked next.
import { Cause, Effect, Exit } from "effect"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { makePostgresEventStore } from "../../adapters/eventstore/postgres/event-store.ts"
import type { JsonObject } from "../../domain/webhooks/events.ts"
import type { Balance, Transaction } from "../../src/http/api.ts"
import { composeHooks, makeLedgerWriter } from "../../src/ledger/writer.ts"
import type { LedgerAttachment } from "../../src/platform/payments.ts"
import { ledgerHook, PayeeUnlinked } from "../../src/platform/payments.ts"
import { postSettlement, settleWaitingPayments } from "../../src/platform/settlement.ts"
import { enqueueSubscribedEvents } from "../../src/webhooks/store.ts"
import { expectOk } from "../support/api-expect.ts"
import { createWallet } from "../support/api-fixtures.ts"
import {
  type ApiClient,
  type RunningPlatform,
  registerTenant,
  startPlatform,
} from "../support/platform-process.ts"

let platform: RunningPlatform
let client: ApiClient
let tenant_id: string

beforeAll(async () => {
  platform = await startPlatform({
    PAYMENT_PENDING_EXPIRY_SECONDS: "600",
    SETTLEMENT_SWEEP_INTERVAL_SECONDS: "1",
  })
  ;({
    client,
    credentials: { tenant_id },
  } = await registerTenant(platform.url))
})
afterAll(async () => {
  await platform?.stop()
})

const wallet = async (external_id: string) => (await createWallet(client, "ethereum", external_id)).wallet_id
const usdc = async (wallet_id: string) =>
  expectOk(await client.get<typeof Balance.Type>(`/api/v1/wallets/${wallet_id}/balance`)).tokens.find(
    (token) => token.token === "USDC",
  )
const transaction = async (transaction_id: string) =>
  expectOk(await client.get<typeof Transaction.Type>(`/api/v1/transactions/${transaction_id}`))
const settledTo = async (transaction_id: string) => {
  const deadline = Date.now() + 30_000
  for (;;) {
    const current = await transaction(transaction_id)
    if (current.status !== "pending" || Date.now() > deadline) return current
    await new Promise((resolve) => setTimeout(resolve, 200))
  }
}

/**
 * What a settlement's first step does in the platform, by a process that then dies before the
 * release; the Exit of its post.
 */
const postOnly = async (transaction_id: string, to_wallet_id: string) =>
  await Effect.runPromiseExit(
    postSettlement(
      settlementWriter(),
      { tenant_id, environment: "sandbox" },
      { transaction_id },
      to_wallet_id,
    ),
  )
/** A writer with the platform's ledger hook, as a settling process has. */
const settlementWriter = () => {
  const store = makePostgresEventStore(platform.database.pool)
  return makeLedgerWriter(store, {
    transaction: {
      appendStreams: store.appendStreamsInTransaction,
      hook: composeHooks(
        ledgerHook((db, rows) =>
          enqueueSubscribedEvents(
            db,
            rows.map((row) => ({ ...row, data: row.data as JsonObject })),
          ),
        ),
      ),
    },
  })
}
const postThenDie = async (transaction_id: string, to_wallet_id: string) => {
  const posted = await postOnly(transaction_id, to_wallet_id)
  expect(Exit.isSuccess(posted)).toBe(true)
}

/** An identity row as the link endpoint leaves it. */
const identity = (id: string, value: string, wallet_id: string) =>
  platform.database.pool.query(
    `with position as (
       update platform.tenant_environments set next_identity_position = next_identity_position + 1
        where tenant_id = $2 and environment = 'sandbox'
       returning next_identity_position - 1 as list_position)
     insert into platform.identities (identity_id, tenant_id, environment, kind, value, wallet_id, linked_at, unlinked_at, list_position)
     select $1, $2, 'sandbox', 'phone', $3, $4, now(), null, list_position from position`,
    [id, tenant_id, value, wallet_id],
  )
/** The unlink endpoint's statement (a row lock until `db` commits). */
const unlink = (db: Pick<typeof platform.database.pool, "query">, id: string) =>
  db.query(
    "update platform.identities set unlinked_at = now() where identity_id = $1 and unlinked_at is null",
    [id],
  )

describe("a settlement interrupted after its post", () => {
  it("is finished into the payee it recorded, unlinked since or linked to the payer, and holds up no other payment", async () => {
    const payer = await wallet("payer")
    const payee = await wallet("payee")
    const other = await wallet("other")
    expectOk(await client.post("/api/v1/sandbox/faucet", { wallet_id: payer, token: "USDC", amount: "100" }))
    const pay = async (recipient: string, amount: string) =>
      expectOk(
        await client.post<typeof Transaction.Type>("/api/social-payments/pay", {
          recipient,
          amount,
          token: "USDC",
        }),
      )
    const unlinked = await pay("+14155550101", "10")
    const to_payer = await pay("+14155550102", "20")
    const waiting = await pay("+14155550103", "1")
    expect([unlinked.status, to_payer.status, waiting.status]).toEqual(["pending", "pending", "pending"])

    // Both settlements posted while linked (payee recorded), then died; the identifiers moved on
    // before a sweep.
    await identity("idn_recovery_1", "+14155550101", payee)
    await identity("idn_recovery_2", "+14155550102", payee)
    await postThenDie(unlinked.transaction_id, payee)
    await postThenDie(to_payer.transaction_id, payee)
    expect((await transaction(unlinked.transaction_id)).to_wallet).toBe(payee)
    await unlink(platform.database.pool, "idn_recovery_1")
    await unlink(platform.database.pool, "idn_recovery_2")
    // A payment to the unlinked identifier that no settlement posted: it waits for a new link, and
    // must not follow the other one into the wallet the identifier was linked to before. (Made
    // after the unlink: made before, a sweep while the identifier was linked would settle it.)
    const later = await pay("+14155550101", "2")
    expect(later.status).toBe("pending")
    await identity("idn_recovery_3", "+14155550102", payer)
    // A third payment waits for the sweeper only (its recipient linked without a settlement).
    await identity("idn_recovery_4", "+14155550103", other)

    for (const [payment, amount] of [
      [unlinked, "10.00"],
      [to_payer, "20.00"],
    ] as const) {
      const done = await settledTo(payment.transaction_id)
      expect(done).toMatchObject({ status: "completed", to_wallet: payee, amount })
    }
    expect(await settledTo(waiting.transaction_id)).toMatchObject({ status: "completed", to_wallet: other })
    // Several sweeps later, the payment to the unlinked identifier still waits, reserved.
    await new Promise((resolve) => setTimeout(resolve, 2_500))
    expect(await transaction(later.transaction_id)).toMatchObject({ status: "pending", to_wallet: null })
    // Paid once each, fees once: 100 - (10 + 20 + 1) - 0.3 % of each, and 2 + 0.006 reserved.
    expect(await usdc(payee)).toMatchObject({ amount: "30.00", reserved: "0.00" })
    expect(await usdc(other)).toMatchObject({ amount: "1.00", reserved: "0.00" })
    expect(await usdc(payer)).toMatchObject({ amount: "66.901", reserved: "2.006" })
  }, 120_000)
})

describe("a settlement's post racing an unlink", () => {
  it("is refused once the unlink committed first (waiting for it when it holds the link), and the payment waits for the next link", async () => {
    const payer = await wallet("race-payer")
    const first = await wallet("race-first")
    const second = await wallet("race-second")
    expectOk(await client.post("/api/v1/sandbox/faucet", { wallet_id: payer, token: "USDC", amount: "10" }))
    const payment = expectOk(
      await client.post<typeof Transaction.Type>("/api/social-payments/pay", {
        recipient: "+14155550111",
        amount: "4",
        token: "USDC",
        from_wallet: payer,
      }),
    )
    expect(payment.status).toBe("pending")
    // A settlement read the link to `first`; the unlink's transaction holds the link's row when the
    // post reaches the ledger: the post waits for it, then finds the link gone.
    await identity("idn_race_1", "+14155550111", first)
    const unlinking = await platform.database.pool.connect()
    try {
      await unlinking.query("begin")
      await unlink(unlinking, "idn_race_1")
      const post = postOnly(payment.transaction_id, first)
      await new Promise((resolve) => setTimeout(resolve, 500))
      await unlinking.query("commit")
      const refused = await post
      expect(Exit.isFailure(refused) && Cause.squash(refused.cause)).toBeInstanceOf(PayeeUnlinked)
    } finally {
      unlinking.release()
    }
    expect(await transaction(payment.transaction_id)).toMatchObject({ status: "pending", to_wallet: null })
    expect(await usdc(first)).toMatchObject({ amount: "0.00", reserved: "0.00" })
    expect(await usdc(payer)).toMatchObject({ amount: "5.988", reserved: "4.012" })
    // Linked to another wallet, the sweeper settles it there, once.
    await identity("idn_race_2", "+14155550111", second)
    expect(await settledTo(payment.transaction_id)).toMatchObject({ status: "completed", to_wallet: second })
    expect(await usdc(second)).toMatchObject({ amount: "4.00", reserved: "0.00" })
    expect(await usdc(payer)).toMatchObject({ amount: "5.988", reserved: "0.00" })
    expect(await usdc(first)).toMatchObject({ amount: "0.00", reserved: "0.00" })
  }, 60_000)
})

describe("a settlement's same_wallet refusal racing an unlink", () => {
  it("is rolled back once the unlink committed first, and the payment goes to the wallet linked next", async () => {
    const payer = await wallet("void-race-payer")
    const next = await wallet("void-race-next")
    expectOk(await client.post("/api/v1/sandbox/faucet", { wallet_id: payer, token: "USDC", amount: "10" }))
    const recipient = "+14155550151"
    const payment = expectOk(
      await client.post<typeof Transaction.Type>("/api/social-payments/pay", {
        recipient,
        amount: "4",
        token: "USDC",
        from_wallet: payer,
      }),
    )
    expect(payment.status).toBe("pending")
    // The platform's own sweeper stands still: this settlement is the only one.
    platform.pause()
    let settled: number | undefined
    try {
      // The identifier is linked to the paying wallet when the settlement reads it; the unlink's
      // transaction holds the link's row when the refusal's void reaches the ledger.
      await identity("idn_void_race_1", recipient, payer)
      const unlinking = await platform.database.pool.connect()
      try {
        await unlinking.query("begin")
        await unlink(unlinking, "idn_void_race_1")
        const settling = Effect.runPromise(
          settleWaitingPayments(
            platform.database.pool,
            settlementWriter(),
            { tenant_id, environment: "sandbox" },
            recipient,
            payer,
          ),
        )
        await new Promise((resolve) => setTimeout(resolve, 500))
        await unlinking.query("commit")
        settled = await settling
      } finally {
        unlinking.release()
      }
    } finally {
      platform.resume()
    }
    expect(settled).toBe(0)
    expect(await transaction(payment.transaction_id)).toMatchObject({ status: "pending", to_wallet: null })
    expect(await usdc(payer)).toMatchObject({ amount: "5.988", reserved: "4.012" })
    await identity("idn_void_race_2", recipient, next)
    expect(await settledTo(payment.transaction_id)).toMatchObject({ status: "completed", to_wallet: next })
    expect(await usdc(next)).toMatchObject({ amount: "4.00", reserved: "0.00" })
    expect(await usdc(payer)).toMatchObject({ amount: "5.988", reserved: "0.00" })
  }, 60_000)
})

describe("a settlement that chose its payee on a stale read", () => {
  it("never takes another settlement's post as its own, and a post recorded before payees were fingerprinted is still finished", async () => {
    const payer = await wallet("stale-payer")
    const old_wallet = await wallet("stale-old")
    const new_wallet = await wallet("stale-new")
    expectOk(await client.post("/api/v1/sandbox/faucet", { wallet_id: payer, token: "USDC", amount: "100" }))
    const pay = async (recipient: string) =>
      expectOk(
        await client.post<typeof Transaction.Type>("/api/social-payments/pay", {
          recipient,
          amount: "3",
          token: "USDC",
          from_wallet: payer,
        }),
      )
    const moved = await pay("+14155550131")
    // The identifier was linked to `old_wallet` when a settlement read it; it has moved to
    // `new_wallet` since, and another settlement posted there (and died before the release).
    await identity("idn_stale_1", "+14155550131", new_wallet)
    await postThenDie(moved.transaction_id, new_wallet)
    // The stale settlement's post is refused: replaying the other's would send it on to release the
    // money into `old_wallet`.
    const stale = await postOnly(moved.transaction_id, old_wallet)
    expect(Exit.isFailure(stale) && Cause.squash(stale.cause)).toMatchObject({ _tag: "IdempotencyKeyReused" })
    expect(await settledTo(moved.transaction_id)).toMatchObject({
      status: "completed",
      to_wallet: new_wallet,
    })

    // A post an earlier version made (its fingerprint without the payee), then a crash: the
    // sweeper finishes it into the payee it recorded, or, from a version that recorded none
    // (before 2026-11-28), into the wallet linked now. The sweeper may settle a payment itself
    // between the link and that post; then another payment is tried.
    const legacyPost = async (recipient: string, records_payee: boolean) => {
      const txn = (await pay(recipient)).transaction_id
      await identity(`idn_${recipient}`, recipient, new_wallet)
      const attachment: LedgerAttachment = {
        kind: "settlement_posted",
        tenant_id,
        environment: "sandbox",
        transaction_id: txn,
        to_wallet_id: new_wallet,
      }
      const posted = await Effect.runPromiseExit(
        settlementWriter().execute(
          { tenant: tenant_id, environment: "sandbox" },
          { type: "PostPendingTransfer", transfer_id: `${txn}:post`, pending_id: txn, now_ms: Date.now() },
          {
            actor: "settlement",
            correlation_id: txn,
            idempotency_key: `settle:${txn}:post`,
            ...(records_payee ? { attachment } : {}),
          },
        ),
      )
      expect(await settledTo(txn)).toMatchObject({ status: "completed", to_wallet: new_wallet })
      return Exit.isSuccess(posted) && !posted.value.replayed
    }
    let settled = 0
    for (const [records_payee, prefix] of [
      [true, "+1415555014"],
      [false, "+1415555016"],
    ] as const) {
      let tries = 1
      while (!(await legacyPost(`${prefix}${tries}`, records_payee)) && tries < 5) tries += 1
      expect(tries).toBeLessThan(5)
      settled += tries
    }
    expect(await usdc(old_wallet)).toMatchObject({ amount: "0.00", reserved: "0.00" })
    expect(await usdc(new_wallet)).toMatchObject({ amount: `${3 * (settled + 1)}.00`, reserved: "0.00" })
  }, 60_000)
})

describe("unlinking while a link's settlement runs", () => {
  it("stops it: only payments whose payee was recorded before the unlink go to the old wallet, the rest to the next link", async () => {
    const payer = await wallet("busy-payer")
    const old_wallet = await wallet("busy-old")
    const new_wallet = await wallet("busy-new")
    expectOk(await client.post("/api/v1/sandbox/faucet", { wallet_id: payer, token: "USDC", amount: "1000" }))
    const recipient = "+14155550121"
    const count = 600
    for (let sent = 0; sent < count; sent += 20) {
      const answers = await Promise.all(
        Array.from({ length: 20 }, () =>
          client.post<typeof Transaction.Type>("/api/social-payments/pay", {
            recipient,
            amount: "1",
            token: "USDC",
            from_wallet: payer,
          }),
        ),
      )
      for (const answer of answers) expect(expectOk(answer).status).toBe("pending")
    }
    const payees = async (wallet_id: string) =>
      Number(
        (
          await platform.database.pool.query<{ n: string }>(
            "select count(*) as n from platform.payments where tenant_id = $1 and to_wallet_id = $2",
            [tenant_id, wallet_id],
          )
        ).rows[0]?.n,
      )
    // The link's own settlement runs in its request; the identity is visible before it ends.
    const linking = client.post<{ identity_id: string }>("/api/v1/identities", {
      wallet_id: old_wallet,
      kind: "phone",
      value: recipient,
    })
    const deadline = Date.now() + 10_000
    let identity_id: string | undefined
    while (identity_id === undefined && Date.now() < deadline) {
      const listed = expectOk(
        await client.get<{ data: Array<{ identity_id: string }> }>(
          `/api/v1/identities?wallet_id=${old_wallet}`,
        ),
      )
      identity_id = listed.data[0]?.identity_id
    }
    expect(identity_id).toBeDefined()
    expectOk(await client.delete(`/api/v1/identities/${identity_id}`))
    // Every payee recorded by now was posted before the unlink committed; no other may follow.
    const recorded_before = await payees(old_wallet)
    expectOk(
      await client.post("/api/v1/identities", { wallet_id: new_wallet, kind: "phone", value: recipient }),
      201,
    )
    expectOk(await linking, 201)
    const settled = Date.now() + 30_000
    while ((await payees(old_wallet)) + (await payees(new_wallet)) < count && Date.now() < settled) {
      await new Promise((resolve) => setTimeout(resolve, 200))
    }
    const statuses = await platform.database.pool.query<{ status: string; to_wallet_id: string; n: string }>(
      `select status, to_wallet_id, count(*) as n from platform.payments
        where tenant_id = $1 and from_wallet_id = $2 group by 1, 2 order by 1, 2`,
      [tenant_id, payer],
    )
    expect(await payees(old_wallet)).toBe(recorded_before)
    expect(recorded_before).toBeLessThan(count)
    expect(statuses.rows.map((row) => [row.status, row.to_wallet_id, Number(row.n)])).toEqual(
      [
        ["completed", old_wallet, recorded_before],
        ["completed", new_wallet, count - recorded_before],
      ].filter((row) => row[2] !== 0),
    )
  }, 120_000)
})
