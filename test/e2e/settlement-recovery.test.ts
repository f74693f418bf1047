// A settlement interrupted between its two steps, against the real platform process (its
// settlement sweeper every second): the reservation of a pending payment was posted to escrow by a
// process that died before the release. The payee that settlement chose is recorded with the post
// (in its transaction, by the platform's own ledger hook), so the sweeper finishes the payment into
// that wallet whatever happened to the identifier since: unlinked, or linked to the paying wallet
// itself. And a payment that cannot be settled does not hold up another one waiting for the sweeper.
import { Effect, Result } from "effect"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { makePostgresEventStore } from "../../adapters/eventstore/postgres/event-store.ts"
import type { JsonObject } from "../../domain/webhooks/events.ts"
import type { Balance, Transaction } from "../../src/http/api.ts"
import { composeHooks, makeLedgerWriter } from "../../src/ledger/writer.ts"
import { ledgerHook } from "../../src/platform/payments.ts"
import { postSettlement } from "../../src/platform/settlement.ts"
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

/** What a settlement's first step does in the platform, by a process that then dies before the release. */
const postThenDie = async (transaction_id: string, to_wallet_id: string) => {
  const store = makePostgresEventStore(platform.database.pool)
  const writer = makeLedgerWriter(store, {
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
  const posted = await Effect.runPromise(
    Effect.result(
      postSettlement(writer, { tenant_id, environment: "sandbox" }, { transaction_id }, to_wallet_id),
    ),
  )
  expect(Result.isSuccess(posted)).toBe(true)
}

/** An identity row as the identities endpoints leave it (linked, or linked and later unlinked). */
const identity = (id: string, value: string, wallet_id: string, unlinked: boolean) =>
  platform.database.pool.query(
    `insert into platform.identities (identity_id, tenant_id, environment, kind, value, wallet_id, linked_at, unlinked_at)
     values ($1, $2, 'sandbox', 'phone', $3, $4, now(), ${unlinked ? "now()" : "null"})`,
    [id, tenant_id, value, wallet_id],
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
    // A payment to the unlinked identifier that no settlement posted: it waits for a new link, and
    // must not follow the other one into the wallet the identifier was linked to before.
    const later = await pay("+14155550101", "2")
    expect([unlinked.status, to_payer.status, waiting.status, later.status]).toEqual([
      "pending",
      "pending",
      "pending",
      "pending",
    ])

    // Both settlements posted (payee recorded), then died; the identifiers moved on before a sweep.
    await postThenDie(unlinked.transaction_id, payee)
    await postThenDie(to_payer.transaction_id, payee)
    expect((await transaction(unlinked.transaction_id)).to_wallet).toBe(payee)
    await identity("idn_recovery_1", "+14155550101", payee, true)
    await identity("idn_recovery_2", "+14155550102", payee, true)
    await identity("idn_recovery_3", "+14155550102", payer, false)
    // A third payment waits for the sweeper only (its recipient linked without a settlement).
    await identity("idn_recovery_4", "+14155550103", other, false)

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
