// Proves the Platform API's money paths over HTTP against the real platform process: the whole
// integration flow (register, wallets with real addresses, faucet, identities, payments with exact
// 0.3 % half-even fees) and its signed webhooks (verified by a receiver with the platform's own
// `verifySignature`, a tampered body refused and retried), payments waiting for an identifier
// (settled on link, released on expiry), refused payments, idempotent retries under concurrency,
// and no double spend under 50 concurrent payments.
import { keccak_256 } from "@noble/hashes/sha3.js"
import { base58 } from "@scure/base"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { ledgerStreamId } from "../../domain/ledger/events.ts"
import { verifySignature } from "../../domain/webhooks/signature.ts"
import type { Balance, Identity, Transaction, Wallet, Webhook, WebhookDelivery } from "../../src/http/api.ts"
import { type ErrorBody, expectError, expectOk } from "../support/api-expect.ts"
import { createWallet, withKeyHeldElsewhere } from "../support/api-fixtures.ts"
import {
  type ApiClient,
  type RunningPlatform,
  registerTenant,
  startPlatform,
} from "../support/platform-process.ts"
import {
  type ReceivedWebhook,
  startWebhookReceiver,
  type WebhookReceiver,
} from "../support/webhook-receiver.ts"

type WalletView = typeof Wallet.Type
type BalanceView = typeof Balance.Type
type IdentityView = typeof Identity.Type
type TransactionView = typeof Transaction.Type
type WebhookView = typeof Webhook.Type
type DeliveryView = typeof WebhookDelivery.Type
interface Page<T> {
  readonly data: ReadonlyArray<T>
  readonly has_more: boolean
  readonly next_cursor: string | null
}

const secret = "whsec_e2e_0123456789abcdef"
const allEvents = [
  "payment.completed",
  "payment.failed",
  "payment.pending",
  "wallet.created",
  "identity.linked",
  "deposit.confirmed",
]
/** The receiver alters the body of the first attempt of this order's payment events. */
const tamperedOrder = "tamper-me"

let platform: RunningPlatform
let receiver: WebhookReceiver
let client: ApiClient
let webhook: WebhookView

beforeAll(async () => {
  receiver = await startWebhookReceiver(
    secret,
    (body, headers) =>
      (body.data.metadata as Record<string, string> | undefined)?.order_id === tamperedOrder &&
      headers["x-service-delivery-attempt"] === "1",
  )
  // Retries 100-200 ms after a failed attempt, so a refused delivery comes back within the test.
  platform = await startPlatform({ WEBHOOK_RETRY_BASE_MS: "200" })
  ;({ client } = await registerTenant(platform.url))
  webhook = expectOk(
    await client.post<WebhookView>("/api/v1/webhooks", {
      url: receiver.url,
      events: allEvents,
      secret,
      description: "e2e receiver",
    }),
    201,
  )
})

afterAll(async () => {
  await platform?.stop()
  await receiver?.close()
})

// --- helpers ----------------------------------------------------------------------------------

const fund = async (api: ApiClient, wallet_id: string, amount: string, token = "USDC") =>
  expectOk(await api.post<BalanceView>("/api/v1/sandbox/faucet", { wallet_id, token, amount }))

const tokensOf = async (api: ApiClient, wallet_id: string) =>
  expectOk(await api.get<BalanceView>(`/api/v1/wallets/${wallet_id}/balance`)).tokens

/** A wallet's USDC of `chain`: available amount and reserved. */
const usdcOf = async (api: ApiClient, wallet_id: string, chain = "ethereum") => {
  const found = (await tokensOf(api, wallet_id)).find((t) => t.token === "USDC" && t.chain === chain)
  return found === undefined ? undefined : { amount: found.amount, reserved: found.reserved }
}

const pay = (api: ApiClient, body: Record<string, unknown>, headers?: Record<string, string>) =>
  api.post<TransactionView>("/api/social-payments/pay", body, headers)

const link = async (api: ApiClient, wallet_id: string, kind: string, value: string) =>
  expectOk(await api.post<IdentityView>("/api/v1/identities", { wallet_id, kind, value }), 201)

/** The delivered event of `event_type` about the resource `id` names (e.g. a transaction id). */
const eventAbout = (event_type: string, key: string, id: string, attempt = "1") =>
  receiver.waitFor(
    (r) =>
      r.body.event_type === event_type &&
      r.body.data[key] === id &&
      r.headers["x-service-delivery-attempt"] === attempt,
  )

/** A delivery as the platform sends it: signed, with its event id and attempt number. */
const expectSignedDelivery = (delivery: ReceivedWebhook, attempt = "1") => {
  expect(delivery.status).toBe(200)
  expect(delivery.headers["x-service-event-id"]).toBe(delivery.body.id)
  expect(delivery.body.id).toMatch(/^evt_/)
  expect(delivery.headers["x-service-delivery-attempt"]).toBe(attempt)
  const header = String(delivery.headers["x-service-signature"])
  expect(header).toMatch(/^t=\d+,v1=[0-9a-f]{64}$/)
  const now_s = Math.floor(Date.now() / 1000)
  expect(verifySignature({ header, body: delivery.raw, secret, now_s })).toEqual({ ok: true })
  expect(verifySignature({ header, body: delivery.raw, secret: `${secret}x`, now_s }).ok).toBe(false)
}

/** EIP-55: a hex letter is upper case exactly where keccak-256 of the lower-case hex has a nibble >= 8. */
const isEip55 = (address: string): boolean => {
  if (!/^0x[0-9a-fA-F]{40}$/.test(address)) return false
  const hex = address.slice(2)
  const hash = Buffer.from(keccak_256(new TextEncoder().encode(hex.toLowerCase()))).toString("hex")
  return [...hex].every((char, i) =>
    /[0-9]/.test(char) ? true : Number.parseInt(hash[i] ?? "0", 16) >= 8 === (char === char.toUpperCase()),
  )
}

const poll = async <T>(
  what: string,
  read: () => Promise<T>,
  done: (value: T) => boolean,
  timeout_ms = 30_000,
) => {
  const deadline = Date.now() + timeout_ms
  for (;;) {
    const value = await read()
    if (done(value)) return value
    if (Date.now() > deadline)
      throw new Error(`${what}: not reached in ${timeout_ms} ms; last ${JSON.stringify(value)}`)
    await new Promise((resolve) => setTimeout(resolve, 100))
  }
}

// --- 1. the integration flow ------------------------------------------------------------------

describe("the integration flow", () => {
  let ethereum: WalletView
  let solana: WalletView
  let phone: IdentityView
  let firstPayment: TransactionView

  it("creates wallets with real addresses (EIP-55 hex on ethereum, 32-byte base58 on solana) and announces each by a signed wallet.created webhook", async () => {
    ethereum = await createWallet(client, "ethereum", "alice")
    solana = await createWallet(client, "solana", "bob")
    expect(ethereum).toMatchObject({
      chain: "ethereum",
      external_id: "alice",
      label: "alice",
      is_default: true,
    })
    expect(solana).toMatchObject({ chain: "solana", external_id: "bob", is_default: false })
    expect(ethereum.wallet_id).toMatch(/^wal_[0-9a-f]{32}$/)
    expect(ethereum.address).toMatch(/^0x[0-9a-fA-F]{40}$/)
    expect(ethereum.address).not.toBe(ethereum.address.toLowerCase())
    expect(isEip55(ethereum.address)).toBe(true)
    // Changing the case of one hex letter breaks the checksum.
    const at = ethereum.address.slice(2).search(/[a-fA-F]/) + 2
    const letter = ethereum.address.charAt(at)
    const swapped = letter === letter.toUpperCase() ? letter.toLowerCase() : letter.toUpperCase()
    expect(isEip55(`${ethereum.address.slice(0, at)}${swapped}${ethereum.address.slice(at + 1)}`)).toBe(false)
    expect(solana.address).toMatch(/^[1-9A-HJ-NP-Za-km-z]{32,44}$/)
    expect(base58.decode(solana.address)).toHaveLength(32)

    for (const wallet of [ethereum, solana]) {
      const delivery = await eventAbout("wallet.created", "wallet_id", wallet.wallet_id)
      expectSignedDelivery(delivery)
      expect(delivery.body.data).toEqual(wallet)
    }
    expect(expectOk(await client.get<WalletView>(`/api/v1/wallets/${ethereum.wallet_id}`))).toEqual(ethereum)
  })

  it("credits test money from the faucet and lists every token of the wallet's chain", async () => {
    expect(await fund(client, ethereum.wallet_id, "100")).toEqual({
      wallet_id: ethereum.wallet_id,
      tokens: [
        { token: "USDC", amount: "100.00", chain: "ethereum", reserved: "0.00" },
        { token: "USDT", amount: "0.00", chain: "ethereum", reserved: "0.00" },
      ],
    })
  })

  it("links a phone number normalised to E.164 and announces it by identity.linked", async () => {
    phone = await link(client, solana.wallet_id, "phone", "+1 (415) 555-0100")
    expect(phone).toMatchObject({
      wallet_id: solana.wallet_id,
      kind: "phone",
      value: "+14155550100",
      status: "linked",
      unlinked_at: null,
    })
    const delivery = await eventAbout("identity.linked", "identity_id", phone.identity_id)
    expectSignedDelivery(delivery)
    expect(delivery.body.data).toEqual(phone)
  })

  it("pays the phone 10 USDC with a 0.03 fee, leaves the payer 89.97 and the payee 10.00, and sends payment.completed carrying the whole transaction", async () => {
    const paid = expectOk(
      await pay(
        client,
        {
          recipient: "+1 415 555 0100",
          amount: 10,
          token: "USDC",
          note: "lunch",
          metadata: { order_id: "o-1" },
        },
        { "idempotency-key": "order-o-1" },
      ),
    )
    expect(paid).toMatchObject({
      type: "social_payment",
      status: "completed",
      amount: "10.00",
      fee: "0.03",
      token: "USDC",
      chain: "ethereum",
      recipient: "+14155550100",
      from_wallet: ethereum.wallet_id,
      to_wallet: solana.wallet_id,
      note: "lunch",
      metadata: { order_id: "o-1" },
      failure: null,
      expires_at: null,
      failed_at: null,
    })
    expect(paid.completed_at).toBe(paid.created_at)
    firstPayment = paid
    expect(await tokensOf(client, ethereum.wallet_id)).toEqual([
      { token: "USDC", amount: "89.97", chain: "ethereum", reserved: "0.00" },
      { token: "USDT", amount: "0.00", chain: "ethereum", reserved: "0.00" },
    ])
    // The payee holds the payer's token on the payer's chain, beside its own chain's tokens.
    expect(await tokensOf(client, solana.wallet_id)).toEqual([
      { token: "USDC", amount: "10.00", chain: "ethereum", reserved: "0.00" },
      { token: "USDC", amount: "0.00", chain: "solana", reserved: "0.00" },
      { token: "USDT", amount: "0.00", chain: "solana", reserved: "0.00" },
    ])
    expect(
      expectOk(await client.get<TransactionView>(`/api/v1/transactions/${paid.transaction_id}`)),
    ).toEqual(paid)

    const delivery = await eventAbout("payment.completed", "transaction_id", paid.transaction_id)
    expectSignedDelivery(delivery)
    expect(delivery.body.data).toEqual(paid)
    expect(Date.parse(delivery.body.created_at)).toBe(Date.parse(paid.created_at))
  })

  it("charges 0.3 % rounded half to even in the token's own precision: 0.0165 on 5.5 USDC, and to the wei on 18-decimal bsc USDC", async () => {
    const small = expectOk(await pay(client, { recipient: "+14155550100", amount: "5.5", token: "USDC" }))
    expect({ amount: small.amount, fee: small.fee }).toEqual({ amount: "5.50", fee: "0.0165" })
    expect(await usdcOf(client, ethereum.wallet_id)).toEqual({ amount: "84.4535", reserved: "0.00" })

    const bsc = await createWallet(client, "bsc", "carol")
    await fund(client, bsc.wallet_id, "10")
    // 1.0000000000000015 × 0.003 = 0.0030000000000000045: the half goes to the even 4.
    const wei = expectOk(
      await pay(client, {
        recipient: "+14155550100",
        amount: "1.0000000000000015",
        token: "USDC",
        from_wallet: bsc.wallet_id,
      }),
    )
    expect({ amount: wei.amount, fee: wei.fee, chain: wei.chain }).toEqual({
      amount: "1.0000000000000015",
      fee: "0.003000000000000004",
      chain: "bsc",
    })
    // 500 wei × 0.003 = 1.5 wei: the half goes to the even 2.
    const half = expectOk(
      await pay(client, {
        recipient: "+14155550100",
        amount: "0.0000000000000005",
        token: "USDC",
        from_wallet: bsc.wallet_id,
      }),
    )
    expect(half.fee).toBe("0.000000000000000002")
    expect(await usdcOf(client, bsc.wallet_id, "bsc")).toEqual({
      amount: "8.996999999999997994",
      reserved: "0.00",
    })
    expect(await usdcOf(client, solana.wallet_id, "bsc")).toEqual({
      amount: "1.000000000000002",
      reserved: "0.00",
    })
    expectError(
      await pay(client, { recipient: "+14155550100", amount: "5.1234567", token: "USDC" }),
      400,
      "too_many_decimals",
    )
  })

  it("pays onward a token of another chain the wallet received, named by chain; a wallet without it is refused 422 and opens no account for it", async () => {
    // The solana wallet holds USDC of bsc, paid to it above.
    await link(client, ethereum.wallet_id, "email", "onward@example.com")
    const payOnward = (chain?: string) =>
      pay(client, {
        recipient: "onward@example.com",
        amount: "0.5",
        token: "USDC",
        from_wallet: solana.wallet_id,
        ...(chain === undefined ? {} : { chain }),
      })
    const onward = expectOk(await payOnward("BSC"))
    expect(onward).toMatchObject({ status: "completed", chain: "bsc", amount: "0.50", fee: "0.0015" })
    expect(await usdcOf(client, solana.wallet_id, "bsc")).toEqual({
      amount: "0.498500000000002",
      reserved: "0.00",
    })
    expect(await usdcOf(client, ethereum.wallet_id, "bsc")).toEqual({ amount: "0.50", reserved: "0.00" })
    // Without chain, the wallet's own chain: solana USDC, of which the solana wallet holds none.
    expectError(await payOnward(), 422, "insufficient_funds")
    // A chain whose token the wallet never received: refused, recorded as failed, no account opened.
    const tokensBefore = await tokensOf(client, solana.wallet_id)
    const none = expectError(await payOnward("polygon"), 422, "insufficient_funds")
    expect(none.param).toBe("chain")
    expect(none.message).toMatch(/holds no USDC of polygon/)
    const failed = /recorded as (txn_\w+)/.exec(none.message)?.[1]
    expect(expectOk(await client.get<TransactionView>(`/api/v1/transactions/${failed}`))).toMatchObject({
      status: "failed",
      chain: "polygon",
      failure: { code: "insufficient_funds" },
    })
    expect(await tokensOf(client, solana.wallet_id)).toEqual(tokensBefore)
    expectError(
      await pay(client, { recipient: "onward@example.com", amount: "0.5", token: "USDC", chain: "dogecoin" }),
      400,
      "unsupported_chain",
    )
  })

  it("refuses a delivery whose body was altered (401 from the receiver) and retries it until it verifies, as the deliveries log shows", async () => {
    const paid = expectOk(
      await pay(client, {
        recipient: "+14155550100",
        amount: 1,
        token: "USDC",
        metadata: { order_id: tamperedOrder },
      }),
    )
    const first = await receiver.waitFor(
      (r) =>
        r.body.data.transaction_id === paid.transaction_id && r.headers["x-service-delivery-attempt"] === "1",
    )
    expect(first.status).toBe(401)
    const second = await eventAbout("payment.completed", "transaction_id", paid.transaction_id, "2")
    expectSignedDelivery(second, "2")
    expect(second.headers["x-service-event-id"]).toBe(first.headers["x-service-event-id"])
    expect(second.raw.equals(first.raw)).toBe(true)
    expect(second.body.data).toEqual(paid)

    const delivery = await poll(
      "the delivery succeeds",
      async () =>
        expectOk(
          await client.get<Page<DeliveryView>>(`/api/v1/webhooks/${webhook.webhook_id}/deliveries?limit=100`),
        ).data.find((d) => d.event_id === first.body.id),
      (found) => found?.status === "succeeded",
    )
    expect(delivery).toMatchObject({
      event_type: "payment.completed",
      webhook_id: webhook.webhook_id,
      status: "succeeded",
      attempt_count: 2,
    })
    expect(
      delivery?.attempts.map((a) => [a.attempt, a.response_status, a.response_excerpt, a.error]),
    ).toEqual([
      [1, 401, "rejected: no_matching_signature", null],
      [2, 200, "ok", null],
    ])

    // A delivery is a cursor of its own endpoint's list only.
    const other = expectOk(
      await client.post<WebhookView>("/api/v1/webhooks", {
        url: `${receiver.url}/other`,
        events: ["wallet.created"],
        secret: "other-endpoint-secret-0001",
      }),
      201,
    )
    const cursor = `starting_after=${delivery?.delivery_id}`
    expectOk(await client.get(`/api/v1/webhooks/${webhook.webhook_id}/deliveries?${cursor}`))
    expectError(
      await client.get(`/api/v1/webhooks/${other.webhook_id}/deliveries?${cursor}`),
      400,
      "invalid_cursor",
    )
    expectOk(await client.delete(`/api/v1/webhooks/${other.webhook_id}`))
  })

  it("sends signed sample events from the sandbox simulator, shaped like the real events' data", async () => {
    const real: ReadonlyArray<readonly [string, object]> = [
      ["payment.completed", firstPayment],
      ["wallet.created", ethereum],
      ["identity.linked", phone],
    ]
    for (const [event_type, data] of real) {
      const sent = expectOk(
        await client.post<{ event_id: string; event_type: string }>("/api/v1/sandbox/webhooks/simulate", {
          event_type,
          webhook_id: webhook.webhook_id,
        }),
        202,
      )
      expect(sent.event_type).toBe(event_type)
      const delivery = await receiver.waitFor((r) => r.body.id === sent.event_id)
      expectSignedDelivery(delivery)
      expect(delivery.body.event_type).toBe(event_type)
      expect(delivery.body.data.simulated).toBe(true)
      expect(Object.keys(delivery.body.data).sort()).toEqual([...Object.keys(data), "simulated"].sort())
    }
  })

  it("sends a disabled endpoint nothing, on request neither: simulate and redeliver are 409 webhook_disabled", async () => {
    const quiet = expectOk(
      await client.post<{ webhook_id: string }>("/api/v1/webhooks", {
        url: receiver.url,
        events: ["wallet.created"],
        secret,
      }),
      201,
    )
    expectOk(await client.patch(`/api/v1/webhooks/${quiet.webhook_id}`, { enabled: false }))
    const simulated = await client.post("/api/v1/sandbox/webhooks/simulate", {
      event_type: "wallet.created",
      webhook_id: quiet.webhook_id,
    })
    expect(expectError(simulated, 409, "webhook_disabled").param).toBe("webhook_id")
    const redelivered = await client.post(
      `/api/v1/webhooks/${quiet.webhook_id}/deliveries/dlv_00000000000000000000000000000000/redeliver`,
    )
    expectError(redelivered, 409, "webhook_disabled")
  })
})

// --- 2. payments waiting for their recipient --------------------------------------------------

describe("payments to an identifier nobody has linked yet", () => {
  it("reserves amount + fee while pending, completes on link with the payee credited exactly the amount, and sends payment.pending then payment.completed", async () => {
    const payer = await createWallet(client, "ethereum", "pending-payer")
    const payee = await createWallet(client, "solana", "pending-payee")
    await fund(client, payer.wallet_id, "50")

    const pending = expectOk(
      await pay(client, {
        recipient: "Later.Payee@Example.COM",
        amount: "20",
        token: "USDC",
        from_wallet: payer.wallet_id,
        metadata: { order_id: "o-pending" },
      }),
    )
    expect(pending).toMatchObject({
      status: "pending",
      amount: "20.00",
      fee: "0.06",
      recipient: "later.payee@example.com",
      to_wallet: null,
      completed_at: null,
    })
    // 7 days from the ledger's clock when it recorded the reservation, at or just after created_at.
    const lapses_after_ms = Date.parse(pending.expires_at ?? "") - Date.parse(pending.created_at)
    expect(lapses_after_ms).toBeGreaterThanOrEqual(7 * 24 * 3600 * 1000)
    expect(lapses_after_ms).toBeLessThan(7 * 24 * 3600 * 1000 + 1_000)
    expect(await usdcOf(client, payer.wallet_id)).toEqual({ amount: "29.94", reserved: "20.06" })
    const announced = await eventAbout("payment.pending", "transaction_id", pending.transaction_id)
    expectSignedDelivery(announced)
    expect(announced.body.data).toEqual(pending)

    await link(client, payee.wallet_id, "email", "LATER.payee@example.com")
    const completed = expectOk(
      await client.get<TransactionView>(`/api/v1/transactions/${pending.transaction_id}`),
    )
    expect(completed).toMatchObject({
      status: "completed",
      amount: "20.00",
      fee: "0.06",
      to_wallet: payee.wallet_id,
      failure: null,
    })
    expect(completed.completed_at).not.toBeNull()
    expect(await usdcOf(client, payer.wallet_id)).toEqual({ amount: "29.94", reserved: "0.00" })
    expect(await usdcOf(client, payee.wallet_id)).toEqual({ amount: "20.00", reserved: "0.00" })
    const done = await eventAbout("payment.completed", "transaction_id", pending.transaction_id)
    expectSignedDelivery(done)
    expect(done.body.data).toEqual(completed)
    // The event is dated when the payment completed, not when it went pending: receivers order by it.
    expect(Date.parse(done.body.created_at)).toBe(Date.parse(completed.completed_at ?? ""))
  })

  it("says when each reservation really lapses: concurrent pending payments carry their ledger reservation's expiry", async () => {
    const { client: own } = await registerTenant(platform.url)
    const payer = await createWallet(own, "ethereum", "expiry-payer")
    await fund(own, payer.wallet_id, "100")
    const payments = await Promise.all(
      Array.from({ length: 40 }, (_, i) =>
        pay(own, {
          recipient: `expiry-${i}@example.com`,
          amount: "1",
          token: "USDC",
          from_wallet: payer.wallet_id,
        }),
      ),
    )
    const answered = payments.map((answer) => expectOk(answer))
    const reserved = await platform.database.pool.query<{ transfer_id: string; expires_at: string }>(
      `select data->>'transfer_id' as transfer_id, data->>'expires_at' as expires_at from events
        where event_type = 'PendingTransferCreated' and data->>'transfer_id' = any($1)`,
      [answered.map((payment) => payment.transaction_id)],
    )
    const ledger = new Map(reserved.rows.map((row) => [row.transfer_id, row.expires_at]))
    for (const payment of answered) {
      expect(payment.status).toBe("pending")
      expect(payment.expires_at).toBe(ledger.get(payment.transaction_id))
      const read = expectOk(await own.get<TransactionView>(`/api/v1/transactions/${payment.transaction_id}`))
      expect(read.expires_at).toBe(payment.expires_at)
      expect(Date.parse(payment.expires_at ?? "") - Date.parse(payment.created_at)).toBeGreaterThanOrEqual(
        7 * 24 * 3600 * 1000,
      )
    }
  })

  it("answers a second link of a linked identifier 409 naming the identity that holds it", async () => {
    const holder = await createWallet(client, "ethereum", "relink-holder")
    const other = await createWallet(client, "ethereum", "relink-other")
    const linked = await link(client, holder.wallet_id, "email", "relink@example.com")
    const again = (wallet_id: string) =>
      client.post("/api/v1/identities", { wallet_id, kind: "email", value: "Relink@Example.com" })
    const same = expectError(await again(holder.wallet_id), 409, "identity_already_linked")
    expect(same.message).toContain(`linked to this wallet already (identity ${linked.identity_id})`)
    const elsewhere = expectError(await again(other.wallet_id), 409, "identity_already_linked")
    expect(elsewhere.message).toContain(
      `linked to wallet ${holder.wallet_id} (identity ${linked.identity_id})`,
    )
  })

  it("completes at once the payments that raced the link (no link when they looked, committed after it settled), not by the sweeper", async () => {
    // A platform whose settlement sweeper would only run in an hour: what completes, the payments
    // completed themselves.
    const unswept = await startPlatform({ SETTLEMENT_SWEEP_INTERVAL_SECONDS: "3600" })
    try {
      const { client: api } = await registerTenant(unswept.url)
      const payer = await createWallet(api, "ethereum", "racing-payer")
      const payee = await createWallet(api, "ethereum", "racing-payee")
      await fund(api, payer.wallet_id, "10")
      for (let round = 0; round < 3; round++) {
        const value = `racing-${round}@example.com`
        const racing = (r: number) =>
          pay(api, { recipient: value, amount: "0.01", token: "USDC", from_wallet: payer.wallet_id }).then(
            (answer) => ({ answer, r }),
          )
        const [before, linked, after] = await Promise.all([
          Promise.all(Array.from({ length: 15 }, (_, r) => racing(r))),
          api.post<IdentityView>("/api/v1/identities", { wallet_id: payee.wallet_id, kind: "email", value }),
          Promise.all(Array.from({ length: 15 }, (_, r) => racing(15 + r))),
        ])
        expectOk(linked, 201)
        const ids = [...before, ...after].map(({ answer }) => expectOk(answer).transaction_id)
        const states = await poll(
          `the payments to ${value}`,
          () =>
            Promise.all(
              ids.map(
                async (id) => expectOk(await api.get<TransactionView>(`/api/v1/transactions/${id}`)).status,
              ),
            ),
          (statuses) => statuses.every((status) => status === "completed"),
          20_000,
        )
        expect(states).toEqual(Array(30).fill("completed"))
      }
    } finally {
      await unswept.stop()
    }
  }, 180_000)

  it("completes on link every payment waiting for the identifier, more than one page of them", async () => {
    const payer = await createWallet(client, "ethereum", "many-payer")
    const payee = await createWallet(client, "ethereum", "many-payee")
    await fund(client, payer.wallet_id, "10")
    const count = 230
    for (let start = 0; start < count; start += 23) {
      await Promise.all(
        Array.from({ length: 23 }, () =>
          pay(client, {
            recipient: "many@example.com",
            amount: "0.01",
            token: "USDC",
            from_wallet: payer.wallet_id,
          }),
        ).map(async (answer) => expect(expectOk(await answer).status).toBe("pending")),
      )
    }
    await link(client, payee.wallet_id, "email", "many@example.com")
    // Every one settled by the link itself: the payee has them all, the payer paid 0.01003 each.
    const pending = expectOk(
      await client.get<{ data: ReadonlyArray<TransactionView> }>(
        `/api/v1/transactions?wallet_id=${payer.wallet_id}&status=pending&limit=100`,
      ),
    )
    expect(pending.data).toEqual([])
    expect(await usdcOf(client, payee.wallet_id)).toEqual({ amount: "2.30", reserved: "0.00" })
    expect(await usdcOf(client, payer.wallet_id)).toEqual({ amount: "7.6931", reserved: "0.00" })
  })

  it("fails with same_wallet, releasing the whole reservation and taking no fee, when the identifier is linked to the paying wallet itself", async () => {
    const payer = await createWallet(client, "ethereum", "self-linker")
    await fund(client, payer.wallet_id, "50")
    const pending = expectOk(
      await pay(client, {
        recipient: "+14155550222",
        amount: "10",
        token: "USDC",
        from_wallet: payer.wallet_id,
      }),
    )
    expect(pending).toMatchObject({ status: "pending", fee: "0.03" })
    expect(await usdcOf(client, payer.wallet_id)).toEqual({ amount: "39.97", reserved: "10.03" })

    await link(client, payer.wallet_id, "phone", "+1 415 555 0222")
    const failed = expectOk(
      await client.get<TransactionView>(`/api/v1/transactions/${pending.transaction_id}`),
    )
    expect(failed).toMatchObject({ status: "failed", to_wallet: null, completed_at: null })
    expect(failed.failure?.code).toBe("same_wallet")
    expect(await usdcOf(client, payer.wallet_id)).toEqual({ amount: "50.00", reserved: "0.00" })
    const announced = await eventAbout("payment.failed", "transaction_id", pending.transaction_id)
    expectSignedDelivery(announced)
    expect(announced.body.data).toEqual(failed)
    // As a direct payment to the now-linked identifier is refused.
    const direct = await pay(client, {
      recipient: "+14155550222",
      amount: "1",
      token: "USDC",
      from_wallet: payer.wallet_id,
    })
    expect(direct.status).toBe(422)
  })

  /**
   * Runs `work` on a platform of its own whose pending payments lapse after one second (its expiry
   * sweeper runs every second), as a tenant whose payment.failed events go to `receiver`.
   */
  const withLapsingPayments = async (
    env: Readonly<Record<string, string>>,
    work: (api: ApiClient, receiver: WebhookReceiver, platform: RunningPlatform) => Promise<void>,
  ) => {
    const quick = await startPlatform({ PAYMENT_PENDING_EXPIRY_SECONDS: "1", ...env })
    const receiver = await startWebhookReceiver(secret)
    try {
      const { client: api } = await registerTenant(quick.url)
      expectOk(
        await api.post("/api/v1/webhooks", { url: receiver.url, events: ["payment.failed"], secret }),
        201,
      )
      await work(api, receiver, quick)
    } finally {
      await quick.stop()
      await receiver.close()
    }
  }

  it("releases the reservation exactly when the payment expires unlinked: failed with code expired, and payment.failed", async () => {
    await withLapsingPayments({}, async (api, quickReceiver) => {
      const payer = await createWallet(api, "ethereum", "expiring-payer")
      await fund(api, payer.wallet_id, "50")
      const pending = expectOk(
        await pay(api, { recipient: "nobody@example.com", amount: "10", token: "USDC" }),
      )
      expect(pending.status).toBe("pending")
      const lapses_after_ms = Date.parse(pending.expires_at ?? "") - Date.parse(pending.created_at)
      expect(lapses_after_ms).toBeGreaterThanOrEqual(1_000)
      expect(lapses_after_ms).toBeLessThan(2_000)

      const failed = await poll(
        "the payment expires",
        async () =>
          expectOk(await api.get<TransactionView>(`/api/v1/transactions/${pending.transaction_id}`)),
        (t) => t.status !== "pending",
      )
      expect(failed).toMatchObject({ status: "failed", completed_at: null, to_wallet: null })
      expect(failed.failure?.code).toBe("expired")
      expect(Date.parse(failed.failed_at ?? "")).toBeGreaterThanOrEqual(Date.parse(pending.expires_at ?? ""))
      expect(await usdcOf(api, payer.wallet_id)).toEqual({ amount: "50.00", reserved: "0.00" })

      const delivery = await quickReceiver.waitFor(
        (r) => r.body.data.transaction_id === pending.transaction_id,
      )
      expect(delivery.status).toBe(200)
      expect(delivery.body.event_type).toBe("payment.failed")
      expect(delivery.body.data).toEqual(failed)
      expect(Date.parse(delivery.body.created_at)).toBe(Date.parse(failed.failed_at ?? ""))

      // Linking the identifier afterwards completes nothing: the money was released.
      const late = await createWallet(api, "solana", "late-payee")
      await link(api, late.wallet_id, "email", "nobody@example.com")
      expect(
        expectOk(await api.get<TransactionView>(`/api/v1/transactions/${pending.transaction_id}`)).status,
      ).toBe("failed")
      expect(await usdcOf(api, late.wallet_id, "ethereum")).toBeUndefined()
      expect(await usdcOf(api, payer.wallet_id)).toEqual({ amount: "50.00", reserved: "0.00" })

      // A reservation that lapsed by the time of another command of its ledger is released by that
      // command, before the sweeper comes (it runs every second): here the void of a payment whose
      // identifier was linked to its own payer, 20 ms after the first payment's expiry.
      const lapsing = expectOk(await pay(api, { recipient: "lapse@example.com", amount: "3", token: "USDC" }))
      await new Promise((resolve) => setTimeout(resolve, 600))
      const refused = expectOk(await pay(api, { recipient: "self@example.com", amount: "4", token: "USDC" }))
      const expires_ms = Date.parse(lapsing.expires_at ?? "")
      await new Promise((resolve) => setTimeout(resolve, Math.max(0, expires_ms + 20 - Date.now())))
      await link(api, payer.wallet_id, "email", "self@example.com")
      const settledTo = async (transaction_id: string) =>
        await poll(
          `${transaction_id} settles`,
          async () => expectOk(await api.get<TransactionView>(`/api/v1/transactions/${transaction_id}`)),
          (t) => t.status !== "pending",
          10_000,
        )
      expect((await settledTo(lapsing.transaction_id)).failure?.code).toBe("expired")
      expect((await settledTo(refused.transaction_id)).failure?.code).toBe("same_wallet")
      expect(await usdcOf(api, payer.wallet_id)).toEqual({ amount: "50.00", reserved: "0.00" })
      await quickReceiver.waitFor((r) => r.body.data.transaction_id === lapsing.transaction_id)
    })
  }, 180_000)

  it("fails as expired, with one more payment.failed, a payment left pending after the ledger released its reservation (as an earlier version could), and moves no money", async () => {
    // The settlement sweep runs every second too.
    await withLapsingPayments(
      { SETTLEMENT_SWEEP_INTERVAL_SECONDS: "1" },
      async (api, quickReceiver, quick) => {
        const payer = await createWallet(api, "ethereum", "stranded-payer")
        await fund(api, payer.wallet_id, "20")
        const pending = expectOk(
          await pay(api, { recipient: "stranded@example.com", amount: "5", token: "USDC" }),
        )
        const transactionOf = async () =>
          expectOk(await api.get<TransactionView>(`/api/v1/transactions/${pending.transaction_id}`))
        await poll("the payment expires", transactionOf, (t) => t.status === "failed")
        const about = (r: ReceivedWebhook) => r.body.data.transaction_id === pending.transaction_id
        await quickReceiver.waitFor(about)

        // The state a payment was left in before ed20f29: its reservation released by the ledger, the
        // payment itself still pending, no payment.failed sent for it.
        const reverted = await quick.database.pool.query(
          `update platform.payments set status = 'pending', failure_code = null, failure_message = null, failed_at = null
          where transaction_id = $1 and status = 'failed'`,
          [pending.transaction_id],
        )
        expect(reverted.rowCount).toBe(1)

        const repaired = await poll("the sweep fails it", transactionOf, (t) => t.status === "failed", 15_000)
        expect(repaired.failure?.code).toBe("expired")
        const announced = await poll(
          "a second payment.failed",
          async () => quickReceiver.received.filter(about),
          (deliveries) => deliveries.length === 2,
          15_000,
        )
        expect(announced[1]?.status).toBe(200)
        expect(announced[1]?.body.event_type).toBe("payment.failed")
        expect(announced[1]?.body.data).toEqual(repaired)
        expect(announced[1]?.body.id).not.toBe(announced[0]?.body.id)
        // The money had been released once; the repair moved none.
        expect(await usdcOf(api, payer.wallet_id)).toEqual({ amount: "20.00", reserved: "0.00" })
        // Later sweeps find nothing more to do: still two events, the payment unchanged.
        await new Promise((resolve) => setTimeout(resolve, 2_500))
        expect(quickReceiver.received.filter(about)).toHaveLength(2)
        expect(await transactionOf()).toEqual(repaired)
      },
    )
  }, 120_000)
})

describe("input at the edge of every limit", () => {
  it("is accepted whole: 50 metadata keys of 40 characters, 500-character values and a 500-character note counted in characters (an emoji is one), and JSON numbers that mean exactly what they say", async () => {
    const payer = await createWallet(client, "ethereum", "edge-payer")
    const payee = await createWallet(client, "ethereum", "edge-payee")
    await link(client, payee.wallet_id, "email", "edge@example.com")
    await fund(client, payer.wallet_id, "1000000")
    const metadata = Object.fromEntries(
      Array.from({ length: 50 }, (_, i) => [
        `${String(i).padStart(2, "0")}${"😀".repeat(38)}`,
        "é😀".repeat(250),
      ]),
    )
    const note = `${"😀".repeat(499)}\u{1F680}`
    const paid = expectOk(
      await pay(client, {
        recipient: "edge@example.com",
        amount: "1",
        token: "USDC",
        from_wallet: payer.wallet_id,
        note,
        metadata,
      }),
    )
    expect(paid).toMatchObject({ status: "completed", note, metadata })
    // 15 significant digits, an exponent, an integer written long: each is exactly its value.
    for (const [amount, expected] of [
      [1.23456, "1.23456"],
      [123456.789012, "123456.789012"],
      [5e-1, "0.50"],
      [2e1, "20.00"],
    ] as const) {
      const answer = expectOk(
        await pay(client, {
          recipient: "edge@example.com",
          amount,
          token: "USDC",
          from_wallet: payer.wallet_id,
        }),
      )
      expect(answer.amount).toBe(expected)
    }
  })
})

describe("Idempotency-Key on the faucet", () => {
  it("takes the key for every endpoint, and a retry credits once and answers the balance as it is now", async () => {
    const { client: api } = await registerTenant(platform.url)
    const wallet = await createWallet(api, "ethereum", "faucet-key")
    const key = { "idempotency-key": "faucet-once" }
    const body = { wallet_id: wallet.wallet_id, token: "USDC", amount: "7" }
    // Ten at once: one credit.
    const first = await Promise.all(
      Array.from({ length: 10 }, () => api.post("/api/v1/sandbox/faucet", body, key)),
    )
    expect(first.map((answer) => answer.status)).toEqual(Array(10).fill(200))
    expect(await usdcOf(api, wallet.wallet_id)).toEqual({ amount: "7.00", reserved: "0.00" })
    // Other endpoints refuse the key (a wallet, an identity and a webhook were created with it).
    const reused = [
      await api.post("/api/v1/wallets", { external_id: "x", label: "x", chain: "ethereum" }, key),
      await api.post(
        "/api/v1/identities",
        { wallet_id: wallet.wallet_id, kind: "email", value: "fk@example.com" },
        key,
      ),
      await api.post("/api/v1/webhooks", { url: receiver.url, events: ["wallet.created"], secret }, key),
      await api.post("/api/v1/sandbox/faucet", { ...body, amount: "8" }, key),
    ]
    for (const answer of reused) expectError(answer, 409, "idempotency_key_reused")
    expect(expectOk(await api.get<Page<WalletView>>("/api/v1/wallets")).data).toHaveLength(1)
    // The retry replays (it answered 409 after another endpoint had used the key), crediting nothing.
    await fund(api, wallet.wallet_id, "1")
    const retry = await api.post<BalanceView>("/api/v1/sandbox/faucet", body, key)
    expect(retry.headers.get("idempotent-replayed")).toBe("true")
    expect(expectOk(retry).tokens.find((token) => token.token === "USDC")?.amount).toBe("8.00")
  })
})

// --- 3. insufficient funds --------------------------------------------------------------------

describe("a payment the payer cannot afford", () => {
  it("is refused 422 insufficient_funds, recorded as failed with a payment.failed webhook, and moves no money", async () => {
    const poor = await createWallet(client, "ethereum", "poor")
    const payee = await createWallet(client, "ethereum", "rich")
    await link(client, payee.wallet_id, "handle", "@Twitter:Rich_One")
    await fund(client, poor.wallet_id, "5")

    // 5 USDC would need 5.015 with its fee.
    const refused = await pay(client, {
      recipient: "@x:rich_one",
      amount: "5",
      token: "USDC",
      from_wallet: poor.wallet_id,
      metadata: { order_id: "o-poor" },
    })
    const error = expectError(refused, 422, "insufficient_funds")
    expect(error.type).toBe("business_rule_error")
    expect(await usdcOf(client, poor.wallet_id)).toEqual({ amount: "5.00", reserved: "0.00" })
    expect(await usdcOf(client, payee.wallet_id)).toEqual({ amount: "0.00", reserved: "0.00" })

    const delivery = await receiver.waitFor(
      (r) =>
        r.body.event_type === "payment.failed" &&
        (r.body.data.metadata as Record<string, string>).order_id === "o-poor",
    )
    expectSignedDelivery(delivery)
    const failed = delivery.body.data as TransactionView
    expect(failed).toMatchObject({
      status: "failed",
      amount: "5.00",
      fee: "0.015",
      from_wallet: poor.wallet_id,
      to_wallet: payee.wallet_id,
      recipient: "@x:rich_one",
      completed_at: null,
      failure: { code: "insufficient_funds" },
    })
    expect(
      expectOk(await client.get<TransactionView>(`/api/v1/transactions/${failed.transaction_id}`)),
    ).toEqual(failed)
    // The refusal names the failed payment it recorded.
    expect(error.message).toContain(failed.transaction_id)
    const listed = expectOk(
      await client.get<Page<TransactionView>>(`/api/v1/transactions?wallet_id=${poor.wallet_id}`),
    )
    expect(listed.data.map((t) => [t.transaction_id, t.status])).toEqual([[failed.transaction_id, "failed"]])
  })
})

// --- 5. idempotency ---------------------------------------------------------------------------

describe("Idempotency-Key on payments", () => {
  const payee = "idempotent-payee@example.com"
  beforeAll(async () => {
    await link(client, (await createWallet(client, "ethereum", "idempotent-payee")).wallet_id, "email", payee)
  })

  it("turns 20 concurrent identical payments into one, replays it later with Idempotent-Replayed, and refuses the key for a different body with 409", async () => {
    const payer = await createWallet(client, "ethereum", "idempotent-payer")
    await fund(client, payer.wallet_id, "100")
    const key = `pay-${Date.now()}`
    const body = { recipient: payee, amount: "10", token: "USDC", from_wallet: payer.wallet_id }
    const responses = await Promise.all(
      Array.from({ length: 20 }, () => pay(client, body, { "idempotency-key": key })),
    )
    const ids = new Set(responses.map((r) => expectOk(r).transaction_id))
    expect(ids.size).toBe(1)
    expect(responses.map((r) => r.body.status)).toEqual(Array(20).fill("completed"))
    // One request took effect; the other 19 waited for it and are answered as its replays.
    expect(responses.filter((r) => r.headers.get("idempotent-replayed") === "true")).toHaveLength(19)

    const listed = expectOk(
      await client.get<Page<TransactionView>>(`/api/v1/transactions?wallet_id=${payer.wallet_id}`),
    )
    expect(listed.data.map((t) => t.transaction_id)).toEqual([...ids])
    expect(await usdcOf(client, payer.wallet_id)).toEqual({ amount: "89.97", reserved: "0.00" })
    // Time bounds are exact below the millisecond, in any offset.
    const created_at = listed.data[0]?.created_at ?? ""
    const idsWithin = async (bounds: string) =>
      expectOk(
        await client.get<Page<TransactionView>>(
          `/api/v1/transactions?wallet_id=${payer.wallet_id}&${bounds}`,
        ),
      ).data.map((t) => t.transaction_id)
    const later = encodeURIComponent(created_at.replace("Z", "1Z"))
    expect(await idsWithin(`created_gte=${encodeURIComponent(created_at)}`)).toEqual([...ids])
    expect(await idsWithin(`created_gte=${later}`)).toEqual([])
    expect(await idsWithin(`created_lt=${later}`)).toEqual([...ids])
    expect(await idsWithin(`created_lt=${encodeURIComponent(created_at)}`)).toEqual([])
    const shifted = new Date(Date.parse(created_at) + 3_600_000).toISOString().replace("Z", "+01:00")
    expect(await idsWithin(`created_gte=${encodeURIComponent(shifted)}`)).toEqual([...ids])
    // Typed as written, the + arrives as a space: read as the + it was.
    expect(await idsWithin(`created_gte=${shifted}`)).toEqual([...ids])
    expect(await idsWithin(`created_lt=${shifted}`)).toEqual([])
    // Offsets up to ±23:59 (RFC 3339), past the ±15:59 PostgreSQL reads itself: the same instant.
    const far_east = new Date(Date.parse(created_at) + 86_340_000).toISOString().replace("Z", "+23:59")
    expect(await idsWithin(`created_gte=${encodeURIComponent(far_east)}`)).toEqual([...ids])
    const far_west = new Date(Date.parse(created_at) - 57_600_000).toISOString().replace("Z", "-16:00")
    expect(await idsWithin(`created_lt=${encodeURIComponent(far_west)}`)).toEqual([])

    const replayed = await pay(client, body, { "idempotency-key": key })
    expect(expectOk(replayed)).toEqual(responses[0]?.body)
    expect(replayed.headers.get("idempotent-replayed")).toBe("true")

    const reused = await pay(client, { ...body, amount: "11" }, { "idempotency-key": key })
    expect(expectError(reused, 409, "idempotency_key_reused").type).toBe("idempotency_error")
    expect(await usdcOf(client, payer.wallet_id)).toEqual({ amount: "89.97", reserved: "0.00" })
  })
  it("answers a retry with the payment it made, though the default wallet or the recipient's link changed since", async () => {
    const { client: own } = await registerTenant(platform.url)
    const payer = await createWallet(own, "ethereum", "retry-payer")
    const payee = await createWallet(own, "ethereum", "retry-payee")
    const ton = await createWallet(own, "ton", "retry-ton")
    await fund(own, payer.wallet_id, "20")
    await link(own, payee.wallet_id, "phone", "+14155550123")
    const completed = { recipient: "+14155550123", amount: "5", token: "USDC" }
    const paid = await pay(own, completed, { "idempotency-key": "order-77" })
    expect(expectOk(paid).status).toBe("completed")
    const retry = async (body: Record<string, unknown>, key: string, original: typeof paid) => {
      const answer = await pay(own, body, { "idempotency-key": key })
      expect(answer.status).toBe(200)
      expect(answer.body).toEqual(original.body)
      expect(answer.headers.get("idempotent-replayed")).toBe("true")
    }
    // Paying the phone from the payee's wallet would be same_wallet; from the TON wallet, there is
    // no USDC on ton. The retry is neither: it is the payment that was made.
    expectOk(await own.post(`/api/v1/wallets/${payee.wallet_id}/default`))
    await retry(completed, "order-77", paid)
    expectOk(await own.post(`/api/v1/wallets/${ton.wallet_id}/default`))
    await retry(completed, "order-77", paid)

    // A pending payment whose identifier is then linked to the paying wallet (which voids it).
    expectOk(await own.post(`/api/v1/wallets/${payer.wallet_id}/default`))
    const waiting = { recipient: "+14155550199", amount: "1", token: "USDC" }
    const pending = await pay(own, waiting, { "idempotency-key": "order-78" })
    expect(expectOk(pending).status).toBe("pending")
    await link(own, payer.wallet_id, "phone", "+14155550199")
    await retry(waiting, "order-78", pending)
    expect(await usdcOf(own, payer.wallet_id)).toEqual({ amount: "14.985", reserved: "0.00" })
  })

  it("records a refused payment once when 10 identical requests with one key arrive together: one failed transaction, the same 422 for all", async () => {
    const payer = await createWallet(client, "ethereum", "idempotent-poor")
    await fund(client, payer.wallet_id, "1")
    const key = `refused-${Date.now()}`
    const body = { recipient: payee, amount: "5", token: "USDC", from_wallet: payer.wallet_id }
    const responses = await Promise.all(
      Array.from({ length: 10 }, () => pay(client, body, { "idempotency-key": key })),
    )
    // A request that arrives after the first has finished gets its stored answer (body as it was).
    expect(responses.map((r) => [r.status, (r.body as unknown as ErrorBody).error.code])).toEqual(
      Array(10).fill([422, "insufficient_funds"]),
    )

    const listed = expectOk(
      await client.get<Page<TransactionView>>(`/api/v1/transactions?wallet_id=${payer.wallet_id}`),
    )
    expect(listed.data.map((t) => [t.status, t.failure?.code])).toEqual([["failed", "insufficient_funds"]])
    // The retry gets the stored answer as it was, with the first request's id in its body.
    const retried = await pay(client, body, { "idempotency-key": key })
    expect(retried.status).toBe(422)
    expect(retried.body).toEqual({ error: expect.objectContaining({ code: "insufficient_funds" }) })
    expect(retried.headers.get("idempotent-replayed")).toBe("true")
    expect(await usdcOf(client, payer.wallet_id)).toEqual({ amount: "1.00", reserved: "0.00" })
  })
})

describe("a retry with its Idempotency-Key", () => {
  it("repeats the first answer byte for byte, whatever the endpoint and status", async () => {
    const { client: api } = await registerTenant(platform.url)
    /** Sends `body` twice with the key `name`: the second answer is the first one's text again. */
    const twice = async <T>(route: string, body: object, name: string, status: number): Promise<T> => {
      const headers = { "idempotency-key": `bytes-${name}` }
      const first = await api.post<T>(route, body, headers)
      expect(first.status, `${route}: ${first.text}`).toBe(status)
      const again = await api.post<T>(route, body, headers)
      expect(again.headers.get("idempotent-replayed"), route).toBe("true")
      expect({ status: again.status, text: again.text }).toEqual({ status, text: first.text })
      return first.body
    }
    const hook = await twice<WebhookView>(
      "/api/v1/webhooks",
      { url: receiver.url, events: ["wallet.created"], secret, description: "bytes" },
      "webhook",
      201,
    )
    const payer = await twice<WalletView>(
      "/api/v1/wallets",
      { external_id: "bytes-payer", label: "Payer", chain: "ethereum" },
      "wallet",
      201,
    )
    const payee = await createWallet(api, "ethereum", "bytes-payee")
    await twice(`/api/v1/wallets/${payee.wallet_id}/default`, {}, "default", 200)
    await twice(
      "/api/v1/identities",
      { wallet_id: payee.wallet_id, kind: "email", value: "bytes@example.com" },
      "identity",
      201,
    )
    await fund(api, payer.wallet_id, "10")
    const payment = { token: "USDC", from_wallet: payer.wallet_id, metadata: { order: "b-1" } }
    // Completed, pending and refused (422) payments.
    for (const [name, recipient, amount, status] of [
      ["paid", "bytes@example.com", "1", 200],
      ["waits", "nobody@example.com", "1", 200],
      ["short", "bytes@example.com", "100", 422],
    ] as const) {
      await twice("/api/social-payments/pay", { ...payment, recipient, amount }, name, status)
    }
    await twice(
      "/api/v1/sandbox/webhooks/simulate",
      { event_type: "wallet.created", webhook_id: hook.webhook_id },
      "simulate",
      202,
    )

    // A redelivery's key is its endpoint's and delivery's: on another endpoint's path it is another request.
    const deliveries = await poll(
      "the wallet.created delivery",
      async () =>
        expectOk(await api.get<Page<DeliveryView>>(`/api/v1/webhooks/${hook.webhook_id}/deliveries`)),
      (page) => page.data.some((d) => d.event_type === "wallet.created" && d.status === "succeeded"),
    )
    const delivery = deliveries.data.find((d) => d.event_type === "wallet.created")
    const redeliver = (webhook_id: string) =>
      `/api/v1/webhooks/${webhook_id}/deliveries/${delivery?.delivery_id}/redeliver`
    await twice(redeliver(hook.webhook_id), {}, "redeliver", 202)
    const other = expectOk(
      await api.post<WebhookView>("/api/v1/webhooks", {
        url: receiver.url,
        events: ["wallet.created"],
        secret,
      }),
      201,
    )
    expectError(
      await api.post(redeliver(other.webhook_id), {}, { "idempotency-key": "bytes-redeliver" }),
      409,
      "idempotency_key_reused",
    )
    expectError(await api.post(redeliver(other.webhook_id), {}), 404, "delivery_not_found")
  })
})

describe("a redelivery with an Idempotency-Key", () => {
  /** A tenant whose endpoint got one wallet.created delivery; answers its deliveries' path and it. */
  const delivered = async (external_id: string) => {
    const { client: api, credentials } = await registerTenant(platform.url)
    const hook = expectOk(
      await api.post<WebhookView>("/api/v1/webhooks", {
        url: receiver.url,
        events: ["wallet.created"],
        secret,
      }),
      201,
    )
    await createWallet(api, "ethereum", external_id)
    const deliveries = `/api/v1/webhooks/${hook.webhook_id}/deliveries`
    const page = await poll(
      "the wallet.created delivery",
      async () => expectOk(await api.get<Page<DeliveryView>>(deliveries)),
      (found) => found.data.some((d) => d.status === "succeeded"),
    )
    return { api, credentials, hook, deliveries, delivery: page.data[0] as DeliveryView }
  }

  it("that another request stores meanwhile is rolled back and answered 409: no fresh attempt is made", async () => {
    const { api, credentials, deliveries, delivery } = await delivered("redeliver-contested")
    const arrivals = () => receiver.received.filter((r) => r.body.id === delivery.event_id).length
    expect(arrivals()).toBe(1)
    // Another request's transaction holds the key: the redelivery is made, then meets the key taken.
    const contested = await withKeyHeldElsewhere(
      platform.database.pool,
      credentials.tenant_id,
      "contested-redelivery",
      (headers) => api.post(`${deliveries}/${delivery.delivery_id}/redeliver`, {}, headers),
    )
    expectError(contested, 409, "idempotency_key_reused")
    // Retries come back within 200 ms here: a redelivery made would have arrived by now.
    await new Promise((resolve) => setTimeout(resolve, 1_500))
    expect(arrivals()).toBe(1)
    const after = expectOk(await api.get<Page<DeliveryView>>(deliveries)).data[0]
    expect(after).toMatchObject({ status: "succeeded", attempt_count: delivery.attempt_count })
  })

  it("made, is answered from its stored response to a retry even after its endpoint was disabled or deleted", async () => {
    const { api, hook, deliveries, delivery } = await delivered("redeliver-replayed")
    const route = `${deliveries}/${delivery.delivery_id}/redeliver`
    const headers = { "idempotency-key": "redeliver-lost-answer" }
    const made = await api.post(route, {}, headers)
    expect(made.status).toBe(202)
    // The answer was lost; meanwhile the endpoint is disabled, then deleted.
    expectOk(await api.patch(`/api/v1/webhooks/${hook.webhook_id}`, { enabled: false }))
    for (const change of ["disabled", "deleted"]) {
      if (change === "deleted") expectOk(await api.delete(`/api/v1/webhooks/${hook.webhook_id}`))
      const retried = await api.post(route, {}, headers)
      expect({ change, status: retried.status, text: retried.text }).toEqual({
        change,
        status: 202,
        text: made.text,
      })
      expect(retried.headers.get("idempotent-replayed")).toBe("true")
    }
    // A new request to it is refused as before.
    expectError(await api.post(route, {}), 404, "webhook_not_found")
  })
})

// --- 6. double spend --------------------------------------------------------------------------

describe("concurrent payments from one wallet", () => {
  it("lets exactly 10 of 50 concurrent payments through when the wallet affords 10: the balance ends at exactly 0 and fees at exactly 10 × 0.003", async () => {
    // A tenant of its own, so its fee account holds only these payments' fees.
    const { client: api, credentials: own } = await registerTenant(platform.url)
    const payer = await createWallet(api, "ethereum", "spender")
    const payee = await createWallet(api, "ethereum", "shop")
    await link(api, payee.wallet_id, "email", "shop@example.com")
    await fund(api, payer.wallet_id, "10.03") // 10 × (1 + 0.003)

    const responses = await Promise.all(
      Array.from({ length: 50 }, () =>
        pay(api, { recipient: "shop@example.com", amount: "1", token: "USDC" }),
      ),
    )
    const ok = responses.filter((r) => r.status === 200)
    const refused = responses.filter((r) => r.status !== 200)
    expect(ok).toHaveLength(10)
    expect(ok.map((r) => [r.body.status, r.body.fee])).toEqual(Array(10).fill(["completed", "0.003"]))
    expect(refused).toHaveLength(40)
    for (const response of refused) expectError(response, 422, "insufficient_funds")

    expect(await usdcOf(api, payer.wallet_id)).toEqual({ amount: "0.00", reserved: "0.00" })
    expect(await usdcOf(api, payee.wallet_id)).toEqual({ amount: "10.00", reserved: "0.00" })
    const completed = expectOk(
      await api.get<Page<TransactionView>>(`/api/v1/transactions?status=completed&limit=100`),
    )
    expect(completed.data.map((t) => t.transaction_id).sort()).toEqual(
      ok.map((r) => r.body.transaction_id).sort(),
    )
    const failed = expectOk(
      await api.get<Page<TransactionView>>(`/api/v1/transactions?status=failed&limit=100`),
    )
    expect(failed.data).toHaveLength(40)

    // The ledger's fee account (read model, caught up by the balance reads above).
    const fees = await platform.database.pool.query<{ credits: string; debits: string }>(
      `select credits_posted::text as credits, debits_posted::text as debits from read_model.ledger_accounts
        where stream_id = $1 and account_id = 'fees:USDC@ethereum'`,
      [ledgerStreamId({ tenant: own.tenant_id, environment: "sandbox" })],
    )
    expect(fees.rows).toEqual([{ credits: "30000", debits: "0" }])
  })
})

describe("a read model held back", () => {
  it("answers a balance read 503 read_model_behind with Retry-After while a long transaction holds the projection back, and the balance once it ends", async () => {
    const { client: own } = await registerTenant(platform.url)
    const wallet = await createWallet(own, "ethereum", "held-back")
    await fund(own, wallet.wallet_id, "5")
    // A transaction with an id, left open: the projection reads nothing committed after it began.
    const held = await platform.database.pool.connect()
    try {
      await held.query("begin")
      await held.query("select pg_current_xact_id()")
      await fund(own, wallet.wallet_id, "7")
      const behind = await own.get(`/api/v1/wallets/${wallet.wallet_id}/balance`)
      const error = expectError(behind, 503, "read_model_behind")
      expect(error.message).toContain("Retry shortly")
      expect(behind.headers.get("retry-after")).toBe("1")
      await held.query("commit")
    } finally {
      held.release()
    }
    expect(await usdcOf(own, wallet.wallet_id)).toEqual({ amount: "12.00", reserved: "0.00" })
  }, 60_000)
})

describe("a one-unit fee, and the faucet's answer", () => {
  let own: ApiClient
  let tenant_id: string
  beforeAll(async () => {
    const registered = await registerTenant(platform.url)
    own = registered.client
    tenant_id = registered.credentials.tenant_id
  })
  /** The tenant's fee and escrow accounts' balances in USDC of ethereum, in minor units. */
  const houseAccounts = async () => {
    const rows = await platform.database.pool.query<{ account_id: string; balance: string }>(
      `select account_id, (credits_posted - debits_posted)::text as balance from read_model.ledger_accounts
        where stream_id = $1 and account_id in ('fees:USDC@ethereum', 'escrow:USDC@ethereum')`,
      [ledgerStreamId({ tenant: tenant_id, environment: "sandbox" })],
    )
    return Object.fromEntries(rows.rows.map((row) => [row.account_id, BigInt(row.balance)]))
  }

  it("charges a fee of one unit on a direct payment of 0.0002 USDC (0.6 units, rounded half-even)", async () => {
    const payer = await createWallet(own, "ethereum", "unit-payer")
    const payee = await createWallet(own, "ethereum", "unit-payee")
    await fund(own, payer.wallet_id, "1")
    await link(own, payee.wallet_id, "email", "unit-direct@example.com")
    const before = await houseAccounts()
    const paid = expectOk(
      await pay(own, {
        recipient: "unit-direct@example.com",
        amount: "0.0002",
        token: "USDC",
        from_wallet: payer.wallet_id,
      }),
    )
    expect(paid).toMatchObject({ status: "completed", amount: "0.0002", fee: "0.000001" })
    expect(await usdcOf(own, payer.wallet_id)).toEqual({ amount: "0.999799", reserved: "0.00" })
    expect(await usdcOf(own, payee.wallet_id)).toEqual({ amount: "0.0002", reserved: "0.00" })
    expect((await houseAccounts())["fees:USDC@ethereum"]).toBe((before["fees:USDC@ethereum"] ?? 0n) + 1n)
  })

  it("moves a pending payment's one-unit fee to the fee account when it settles, leaving escrow empty", async () => {
    const payer = await createWallet(own, "ethereum", "unit-pending-payer")
    const payee = await createWallet(own, "ethereum", "unit-pending-payee")
    await fund(own, payer.wallet_id, "1")
    const before = await houseAccounts()
    const pending = expectOk(
      await pay(own, {
        recipient: "unit-pending@example.com",
        amount: "0.0002",
        token: "USDC",
        from_wallet: payer.wallet_id,
      }),
    )
    expect(pending).toMatchObject({ status: "pending", fee: "0.000001" })
    await link(own, payee.wallet_id, "email", "unit-pending@example.com")
    const done = await poll(
      "the payment settled",
      async () => expectOk(await own.get<TransactionView>(`/api/v1/transactions/${pending.transaction_id}`)),
      (payment) => payment.status !== "pending",
    )
    expect(done.status).toBe("completed")
    expect(await usdcOf(own, payer.wallet_id)).toEqual({ amount: "0.999799", reserved: "0.00" })
    expect(await usdcOf(own, payee.wallet_id)).toEqual({ amount: "0.0002", reserved: "0.00" })
    const after = await houseAccounts()
    expect(after["fees:USDC@ethereum"]).toBe((before["fees:USDC@ethereum"] ?? 0n) + 1n)
    expect(after["escrow:USDC@ethereum"]).toBe(0n)
  })

  it("answers the faucet with the available balance, net of a pending payment's reservation", async () => {
    const wallet = await createWallet(own, "ethereum", "faucet-reserved")
    await fund(own, wallet.wallet_id, "50")
    const pending = expectOk(
      await pay(own, {
        recipient: "faucet-nobody@example.com",
        amount: "10",
        token: "USDC",
        from_wallet: wallet.wallet_id,
      }),
    )
    expect(pending.status).toBe("pending")
    const answered = expectOk(
      await own.post<BalanceView>("/api/v1/sandbox/faucet", {
        wallet_id: wallet.wallet_id,
        token: "USDC",
        amount: "1",
      }),
    )
    const usdc = (balance: BalanceView) =>
      balance.tokens.find((token) => token.token === "USDC" && token.chain === "ethereum")
    expect(usdc(answered)).toMatchObject({ amount: "40.97", reserved: "10.03" })
    expect(usdc(answered)).toEqual(
      usdc(expectOk(await own.get<BalanceView>(`/api/v1/wallets/${wallet.wallet_id}/balance`))),
    )
  })
})
