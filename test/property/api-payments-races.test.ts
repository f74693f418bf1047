// Proves, over random programs through the API, that social payments with short expiries, links,
// unlinks and relinks racing payments, and duplicates sent at once under one Idempotency-Key keep
// the money and its records together: once everything has settled, every wallet's available and
// reserved balance is what the transaction records say happened (the record and the money commit
// in one transaction), no payment is left pending past its expiry, and each key made at most one
// payment, answered as the same transaction to every copy that got it.
import fc from "fast-check"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { parseAmount } from "../../domain/money/amount.ts"
import { type RunningPlatform, registerTenant, startPlatform } from "../support/platform-process.ts"

let platform: RunningPlatform
beforeAll(async () => {
  platform = await startPlatform({
    PAYMENT_PENDING_EXPIRY_SECONDS: "1",
    SETTLEMENT_SWEEP_INTERVAL_SECONDS: "1",
  })
})
afterAll(async () => {
  await platform?.stop()
})

const walletCount = 3
const emails = ["ana@example.com", "bo@example.com"]
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms))
const minor = (decimal: string) => {
  const parsed = parseAmount(decimal, 6, { allowZero: true })
  if (parsed._tag !== "Success") throw new Error(`bad amount ${decimal}`)
  return parsed.success
}
/** Micro-units as a decimal string, in integers (never a float in between). */
const text = (value: number) =>
  `${Math.floor(value / 1_000_000)}.${String(value % 1_000_000).padStart(6, "0")}`

type Step =
  | { kind: "faucet"; wallet: number; micros: number }
  | { kind: "pay"; from: number; to: number; micros: number; dup: number }
  | { kind: "link"; email: number; wallet: number }
  | { kind: "unlink"; email: number }
  | { kind: "sleep"; ms: number }
  | { kind: "race"; a: Step; b: Step }

const micros = fc.oneof(fc.integer({ min: 1, max: 2_000 }), fc.integer({ min: 1, max: 30_000_000 }))
const simple: fc.Arbitrary<Step> = fc.oneof(
  fc.record({ kind: fc.constant("faucet" as const), wallet: fc.nat(walletCount - 1), micros }),
  fc.record({
    kind: fc.constant("pay" as const),
    from: fc.nat(walletCount - 1),
    to: fc.nat(emails.length - 1),
    micros,
    dup: fc.integer({ min: 1, max: 3 }),
  }),
  fc.record({
    kind: fc.constant("link" as const),
    email: fc.nat(emails.length - 1),
    wallet: fc.nat(walletCount - 1),
  }),
  fc.record({ kind: fc.constant("unlink" as const), email: fc.nat(emails.length - 1) }),
  fc.record({ kind: fc.constant("sleep" as const), ms: fc.integer({ min: 0, max: 1_400 }) }),
)
const step: fc.Arbitrary<Step> = fc.oneof(
  { weight: 3, arbitrary: simple },
  { weight: 2, arbitrary: fc.record({ kind: fc.constant("race" as const), a: simple, b: simple }) },
)

interface Txn {
  transaction_id: string
  status: string
  amount: string
  fee: string
  from_wallet: string
  to_wallet: string | null
  failure: { code: string } | null
  expires_at: string | null
}

let runCounter = 0
const run = async (steps: ReadonlyArray<Step>) => {
  runCounter += 1
  const { client } = await registerTenant(platform.url, "enterprise")
  const wallets: Array<string> = []
  for (let i = 0; i < walletCount; i++) {
    const created = await client.post<{ wallet_id: string }>("/api/v1/wallets", {
      external_id: `w${i}`,
      label: "",
      chain: "ethereum",
    })
    wallets.push(created.body.wallet_id)
  }
  const faucet = Array.from({ length: walletCount }, () => 0n)
  const identities = new Map<number, string>()
  const keys: Array<string> = []
  /** The transaction ids each key's 200 answers named. */
  const answered = new Map<string, Set<string>>()
  let counter = 0
  const exec = async (s: Step): Promise<void> => {
    switch (s.kind) {
      case "faucet": {
        const r = await client.post("/api/v1/sandbox/faucet", {
          wallet_id: wallets[s.wallet],
          token: "USDC",
          amount: text(s.micros),
        })
        expect(r.status).toBe(200)
        faucet[s.wallet] = (faucet[s.wallet] ?? 0n) + BigInt(s.micros)
        return
      }
      case "pay": {
        const key = `r${runCounter}-p${counter++}`
        keys.push(key)
        const body = {
          recipient: emails[s.to],
          amount: text(s.micros),
          token: "USDC",
          from_wallet: wallets[s.from],
        }
        const answers = await Promise.all(
          Array.from({ length: s.dup }, () =>
            client.post<{ transaction_id?: string }>("/api/social-payments/pay", body, {
              "idempotency-key": key,
            }),
          ),
        )
        for (const a of answers) {
          expect([200, 409, 422]).toContain(a.status)
          if (a.status !== 200 || a.body.transaction_id === undefined) continue
          const ids = answered.get(key) ?? new Set<string>()
          ids.add(a.body.transaction_id)
          answered.set(key, ids)
        }
        return
      }
      case "link": {
        if (identities.has(s.email)) return
        identities.set(s.email, "linking")
        const r = await client.post<{ identity_id: string }>("/api/v1/identities", {
          wallet_id: wallets[s.wallet],
          kind: "email",
          value: emails[s.email],
        })
        if (r.status === 201) identities.set(s.email, r.body.identity_id)
        else identities.delete(s.email)
        return
      }
      case "unlink": {
        const identity = identities.get(s.email)
        if (identity === undefined || identity === "linking") return
        identities.delete(s.email)
        expect((await client.delete(`/api/v1/identities/${identity}`)).status).toBe(200)
        return
      }
      case "sleep":
        await sleep(s.ms)
        return
      case "race":
        await Promise.all([exec(s.a), exec(s.b)])
        return
    }
  }
  for (const s of steps) await exec(s)
  // Settled: every reservation lapses after 1 s and the sweeper runs every 1 s; a busy machine
  // may take longer.
  const transactions = async () => {
    const found: Array<Txn> = []
    let after: string | null = null
    for (;;) {
      const page: { body: { data: Array<Txn>; has_more: boolean } } = await client.get(
        `/api/v1/transactions?limit=100${after === null ? "" : `&starting_after=${after}`}`,
      )
      found.push(...page.body.data)
      if (!page.body.has_more) return found
      after = page.body.data.at(-1)?.transaction_id ?? null
    }
  }
  await sleep(2_000)
  let txns = await transactions()
  for (let tries = 0; txns.some((t) => t.status === "pending") && tries < 40; tries++) {
    await sleep(500)
    txns = await transactions()
  }
  // Oracle from the records alone.
  const expected = new Map(wallets.map((id, i) => [id, { available: faucet[i] ?? 0n, reserved: 0n }]))
  const wallet = (id: string | null) => {
    const found = expected.get(id ?? "")
    if (found === undefined) throw new Error(`a transaction names a wallet not of this run: ${id}`)
    return found
  }
  for (const t of txns) {
    const amount = minor(t.amount)
    const fee = minor(t.fee)
    if (t.status === "completed") {
      expect(t.to_wallet).not.toBe(t.from_wallet)
      wallet(t.from_wallet).available -= amount + fee
      wallet(t.to_wallet).available += amount
    } else if (t.status === "pending") {
      wallet(t.from_wallet).available -= amount + fee
      wallet(t.from_wallet).reserved += amount + fee
    }
  }
  const stillPending = txns.filter((t) => t.status === "pending")
  expect(stillPending).toEqual([])
  // One transaction per idempotency key at most (duplicates sent at once must make one), and every
  // copy answered 200 names that one.
  expect(txns.length).toBeLessThanOrEqual(keys.length)
  for (const [key, ids] of answered) expect({ key, count: ids.size }).toEqual({ key, count: 1 })
  for (const [i, wallet_id] of wallets.entries()) {
    const response = await client.get<{
      tokens: Array<{ token: string; chain: string; amount: string; reserved: string }>
    }>(`/api/v1/wallets/${wallet_id}/balance`)
    const usdc = response.body.tokens.find((t) => t.token === "USDC" && t.chain === "ethereum")
    const got = { available: minor(usdc?.amount ?? "0"), reserved: minor(usdc?.reserved ?? "0") }
    expect({ wallet: i, ...got }).toEqual({ wallet: i, ...wallet(wallet_id) })
  }
}

describe("social payments with expiry and races", () => {
  it("balances equal what the transaction records say, nothing pending after expiry, one transaction per key", async () => {
    await fc.assert(fc.asyncProperty(fc.array(step, { minLength: 4, maxLength: 16 }), run), { numRuns: 10 })
  }, 900_000)
})
