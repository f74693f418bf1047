/**
 * A payment reads its payee (the wallet the recipient's identifier is linked to) and, when it names
 * no `from_wallet`, its payer (the tenant's default wallet) when it arrives, and commits later. An
 * unlink, a relink or a change of the default answered in between must not be overtaken by it: the
 * money goes where the identifier is linked, from the wallet that is the default, when it moves.
 *
 * Two halves make that so, and each is tested here:
 * - a payment's append checks its parties again, after it took the ledger's stream lock: the window
 *   is held open by taking that lock in shared mode (every append takes it exclusively, so the
 *   payment waits at its commit), and the change is made in the same transaction, as an unlink or a
 *   change of the default makes it under that lock;
 * - an unlink and a change of the default take that lock, so one sent while an append holds it
 *   waits for that append's commit.
 */
import pg from "pg"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { idPrefixes, newId } from "../../src/platform/ids.ts"
import { expectOk } from "../support/api-expect.ts"
import { createWallet } from "../support/api-fixtures.ts"
import {
  type ApiClient,
  type RunningPlatform,
  registerTenant,
  startPlatform,
} from "../support/platform-process.ts"

let platform: RunningPlatform
let api: ApiClient
let tenant_id: string
let db: pg.Pool

beforeAll(async () => {
  platform = await startPlatform()
  const registered = await registerTenant(platform.url)
  api = registered.client
  tenant_id = registered.credentials.tenant_id
  db = new pg.Pool({ connectionString: platform.database.url, max: 4 })
}, 120_000)

afterAll(async () => {
  await db?.end()
  await platform?.stop()
})

interface Balance {
  readonly tokens: ReadonlyArray<{ readonly token: string; readonly amount: string; readonly chain: string }>
}

const usdc = async (wallet_id: string) =>
  expectOk(await api.get<Balance>(`/api/v1/wallets/${wallet_id}/balance`)).tokens.find(
    (t) => t.token === "USDC" && t.chain === "ethereum",
  )?.amount

const ledgerStream = () => `ledger-${tenant_id}-sandbox`

/** Resolves once some session waits for the tenant's ledger stream lock. */
const ledgerLockWaited = async () => {
  const deadline = Date.now() + 20_000
  for (;;) {
    const waiting = await db.query(
      `select 1 from pg_locks
        where locktype = 'advisory' and not granted
          and ((classid::bigint << 32) | objid::bigint) = hashtextextended($1, 0)`,
      [ledgerStream()],
    )
    if (waiting.rows.length > 0) return
    if (Date.now() > deadline) throw new Error("nobody came to wait for the ledger's lock")
    await new Promise((resolve) => setTimeout(resolve, 20))
  }
}

/**
 * Holds the ledger's stream lock, `mode` as an unlink (shared) or an append (exclusive) takes it,
 * while `start` runs until it waits for the lock; then runs `change` in the lock's transaction,
 * commits, and answers what `start` answers.
 */
const whileLedgerLocked = async <A>(
  mode: "shared" | "exclusive",
  start: () => Promise<A>,
  change: (client: pg.PoolClient) => Promise<void> = async () => {},
): Promise<A> => {
  const client = await db.connect()
  try {
    await client.query("begin")
    await client.query(
      `select ${mode === "shared" ? "pg_advisory_xact_lock_shared" : "pg_advisory_xact_lock"}(hashtextextended($1, 0))`,
      [ledgerStream()],
    )
    const answer = start()
    await ledgerLockWaited()
    await change(client)
    await client.query("commit")
    return await answer
  } finally {
    client.release()
  }
}

interface Payment {
  readonly transaction_id: string
  readonly status: string
  readonly from_wallet: string
  readonly to_wallet: string | null
}

/** Unlinks `identity_id` as the API does, in the caller's transaction. */
const unlinkIn = (client: pg.PoolClient, identity_id: string) =>
  client.query(
    "update platform.identities set unlinked_at = now() where identity_id = $1 and unlinked_at is null",
    [identity_id],
  )

/** Links `value` (a phone number) to `wallet_id` as the API does, in the caller's transaction. */
const linkPhoneIn = (client: pg.PoolClient, value: string, wallet_id: string) =>
  client.query(
    `with position as (
       update platform.tenant_environments set next_identity_position = next_identity_position + 1
        where tenant_id = $2 and environment = 'sandbox'
       returning next_identity_position - 1 as list_position)
     insert into platform.identities (identity_id, tenant_id, environment, kind, value, wallet_id, linked_at, list_position)
     select $1, $2, 'sandbox', 'phone', $3, $4, now(), list_position from position`,
    [newId(idPrefixes.identity), tenant_id, value, wallet_id],
  )

const pay = (body: Record<string, string>, headers: Record<string, string> = {}) =>
  api.post<Payment>("/api/social-payments/pay", { token: "USDC", ...body }, headers)

describe("a payment whose parties change before it commits", () => {
  it("pays the wallet the identifier is relinked to, not the one it was unlinked from", async () => {
    const payer = await createWallet(api, "ethereum", "race-payer")
    const old_wallet = await createWallet(api, "ethereum", "race-old")
    const new_wallet = await createWallet(api, "ethereum", "race-new")
    expectOk(
      await api.post("/api/v1/sandbox/faucet", { wallet_id: payer.wallet_id, token: "USDC", amount: "100" }),
    )
    const phone = "+14155550177"
    const linked = expectOk(
      await api.post<{ identity_id: string }>("/api/v1/identities", {
        wallet_id: old_wallet.wallet_id,
        kind: "phone",
        value: phone,
      }),
      201,
    )
    // Every account either payment needs is open, so its only append is the payment itself.
    expectOk(await pay({ recipient: phone, amount: "1", from_wallet: payer.wallet_id }))
    expectOk(await pay({ recipient: "+14155550178", amount: "1", from_wallet: payer.wallet_id }))
    expectOk(
      await api.post("/api/v1/identities", {
        wallet_id: new_wallet.wallet_id,
        kind: "phone",
        value: "+14155550178",
      }),
      201,
    )
    const paid = await whileLedgerLocked(
      "shared",
      () =>
        pay(
          { recipient: phone, amount: "10", from_wallet: payer.wallet_id },
          { "idempotency-key": "race-relinked" },
        ),
      async (client) => {
        await unlinkIn(client, linked.identity_id)
        await linkPhoneIn(client, phone, new_wallet.wallet_id)
      },
    )
    const payment = expectOk(paid)
    expect({ status: payment.status, to_wallet: payment.to_wallet }).toEqual({
      status: "completed",
      to_wallet: new_wallet.wallet_id,
    })
    expect(await usdc(old_wallet.wallet_id)).toBe("1.00")
    expect(await usdc(new_wallet.wallet_id)).toBe("11.00")
    // 100 - 1.003 - 1.003 - 10.03
    expect(await usdc(payer.wallet_id)).toBe("87.964")
    const recorded = expectOk(await api.get<Payment>(`/api/v1/transactions/${payment.transaction_id}`))
    expect(recorded.to_wallet).toBe(new_wallet.wallet_id)
    // Its Idempotency-Key answers the payment made, not the attempt rolled back.
    const again = await pay(
      { recipient: phone, amount: "10", from_wallet: payer.wallet_id },
      { "idempotency-key": "race-relinked" },
    )
    expect(again.headers.get("idempotent-replayed")).toBe("true")
    expect(expectOk(again).transaction_id).toBe(payment.transaction_id)
    // The attempt that was rolled back left no record.
    const rows = await db.query(
      "select count(*)::int as n from platform.payments where tenant_id = $1 and amount = '10000000'",
      [tenant_id],
    )
    expect(rows.rows[0].n).toBe(1)
  }, 60_000)

  it("waits for a link when the identifier was unlinked and not relinked", async () => {
    const payer = await createWallet(api, "ethereum", "race-payer-2")
    const payee = await createWallet(api, "ethereum", "race-payee-2")
    expectOk(
      await api.post("/api/v1/sandbox/faucet", { wallet_id: payer.wallet_id, token: "USDC", amount: "50" }),
    )
    const phone = "+14155550179"
    const linked = expectOk(
      await api.post<{ identity_id: string }>("/api/v1/identities", {
        wallet_id: payee.wallet_id,
        kind: "phone",
        value: phone,
      }),
      201,
    )
    expectOk(await pay({ recipient: phone, amount: "1", from_wallet: payer.wallet_id }))
    // A pending payment's accounts (the payer's and the escrow) are open too.
    expectOk(await pay({ recipient: "+14155550180", amount: "1", from_wallet: payer.wallet_id }))
    const paid = await whileLedgerLocked(
      "shared",
      () => pay({ recipient: phone, amount: "5", from_wallet: payer.wallet_id }),
      (client) => unlinkIn(client, linked.identity_id).then(() => undefined),
    )
    const payment = expectOk(paid)
    expect({ status: payment.status, to_wallet: payment.to_wallet }).toEqual({
      status: "pending",
      to_wallet: null,
    })
    expect(await usdc(payee.wallet_id)).toBe("1.00")
  }, 60_000)

  it("is paid by the wallet that became the default, not the former default", async () => {
    const wallets = expectOk(
      await api.get<{ data: ReadonlyArray<{ wallet_id: string; is_default: boolean }> }>(
        "/api/v1/wallets?limit=100",
      ),
    )
    const former = wallets.data.find((wallet) => wallet.is_default)
    if (former === undefined) throw new Error("the tenant has no default wallet")
    const next = await createWallet(api, "ethereum", "race-next-default")
    const payee = await createWallet(api, "ethereum", "race-payee-3")
    expectOk(
      await api.post("/api/v1/sandbox/faucet", { wallet_id: next.wallet_id, token: "USDC", amount: "50" }),
    )
    expectOk(
      await api.post("/api/v1/identities", {
        wallet_id: payee.wallet_id,
        kind: "email",
        value: "race-3@example.com",
      }),
      201,
    )
    // The accounts of a payment from either wallet are open.
    expectOk(await pay({ recipient: "race-3@example.com", amount: "1", from_wallet: next.wallet_id }))
    expectOk(await pay({ recipient: "race-3@example.com", amount: "1", from_wallet: former.wallet_id }))
    const former_before = await usdc(former.wallet_id)
    const paid = await whileLedgerLocked(
      "shared",
      () => pay({ recipient: "race-3@example.com", amount: "5" }),
      async (client) => {
        await client.query(
          "update platform.tenant_environments set default_wallet_id = $1 where tenant_id = $2 and environment = 'sandbox'",
          [next.wallet_id, tenant_id],
        )
      },
    )
    const payment = expectOk(paid)
    expect({ status: payment.status, from_wallet: payment.from_wallet }).toEqual({
      status: "completed",
      from_wallet: next.wallet_id,
    })
    expect(await usdc(former.wallet_id)).toBe(former_before)
    // 50 - 1.003 - 5.015
    expect(await usdc(next.wallet_id)).toBe("43.982")
  }, 60_000)
})

describe("an unlink or a change of the default sent while an append holds the ledger", () => {
  it("unlinks once that append committed", async () => {
    const wallet = await createWallet(api, "ethereum", "race-unlink-waits")
    const linked = expectOk(
      await api.post<{ identity_id: string }>("/api/v1/identities", {
        wallet_id: wallet.wallet_id,
        kind: "email",
        value: "race-unlink-waits@example.com",
      }),
      201,
    )
    let answered = false
    const unlinked = await whileLedgerLocked(
      "exclusive",
      () =>
        api.delete<{ status: string }>(`/api/v1/identities/${linked.identity_id}`).then((answer) => {
          answered = true
          return answer
        }),
      async () => expect(answered).toBe(false),
    )
    expect(expectOk(unlinked).status).toBe("unlinked")
  }, 60_000)

  it("changes the default once that append committed", async () => {
    const wallet = await createWallet(api, "ethereum", "race-default-waits")
    let answered = false
    const changed = await whileLedgerLocked(
      "exclusive",
      () =>
        api.post<{ is_default: boolean }>(`/api/v1/wallets/${wallet.wallet_id}/default`).then((answer) => {
          answered = true
          return answer
        }),
      async () => expect(answered).toBe(false),
    )
    expect(expectOk(changed).is_default).toBe(true)
  }, 60_000)
})
