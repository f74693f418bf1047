/**
 * A synthetic but valid ledger for projection and CLI tests: wallets funded from the world,
 * payments with a 0.3 % fee in a linked group, two-phase transfers that are posted (in part),
 * voided or left to expire. Deterministic for a seed. It keeps its own expected balances and
 * transfer statuses, an oracle independent of the projection.
 */
import type { AccountKind } from "../../domain/ledger/events.ts"
import { uuidv7 } from "../../src/ids.ts"
import type { NewEvent } from "../../src/ports/event-store.ts"

export interface ExpectedAccount {
  readonly asset_code: string
  readonly kind: AccountKind
  debits_pending: bigint
  debits_posted: bigint
  credits_pending: bigint
  credits_posted: bigint
}

interface OpenPending {
  readonly transfer_id: string
  readonly debit: string
  readonly credit: string
  readonly amount: bigint
  readonly expires_at_ms: number | null
}

export interface SyntheticLedger {
  readonly stream_id: string
  readonly events: ReadonlyArray<NewEvent>
  readonly accounts: ReadonlyMap<string, ExpectedAccount>
  /** Final status of every transfer row the projection should hold. */
  readonly statuses: ReadonlyMap<string, "posted" | "pending" | "voided" | "expired">
}

/** A small deterministic PRNG (mulberry32). */
const random = (seed: number) => {
  let a = seed >>> 0
  return (): number => {
    a = (a + 0x6d2b79f5) >>> 0
    let t = a
    t = Math.imul(t ^ (t >>> 15), t | 1)
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61)
    return ((t ^ (t >>> 14)) >>> 0) / 4_294_967_296
  }
}

const assets = [
  { code: "USDC@ethereum", symbol: "USDC", chain: "ethereum", decimals: 6 },
  { code: "USDT@tron", symbol: "USDT", chain: "tron", decimals: 6 },
]

/**
 * Builds `operation_count` operations on one ledger (tenant, environment) after opening its accounts.
 * `start_ms` is the ledger clock of the first event; each event advances it by 1 ms.
 */
export const syntheticLedger = (options: {
  readonly tenant: string
  readonly environment: string
  readonly seed: number
  readonly operation_count: number
  readonly wallet_count?: number
  readonly start_ms?: number
}): SyntheticLedger => {
  const next = random(options.seed)
  const pick = <T>(items: ReadonlyArray<T>): T => items[Math.floor(next() * items.length)] as T
  const stream_id = `ledger-${options.tenant}-${options.environment}`
  let clock_ms = options.start_ms ?? Date.parse("2025-01-01T00:00:00.000Z")
  const events: NewEvent[] = []
  const accounts = new Map<string, ExpectedAccount>()
  const statuses = new Map<string, "posted" | "pending" | "voided" | "expired">()
  const metadata = {
    tenant: options.tenant,
    environment: options.environment,
    actor: "test",
    correlation_id: uuidv7(),
    causation_id: null,
    idempotency_key: null,
  }
  const emit = (event_type: string, data: Record<string, unknown>) => {
    events.push({ event_id: uuidv7(), event_type, schema_version: 1, data, metadata })
    clock_ms += 1
  }
  const now = () => new Date(clock_ms).toISOString()
  const open = (asset: (typeof assets)[number], kind: AccountKind, constrained: boolean): string => {
    const account_id = uuidv7()
    accounts.set(account_id, {
      asset_code: asset.code,
      kind,
      debits_pending: 0n,
      debits_posted: 0n,
      credits_pending: 0n,
      credits_posted: 0n,
    })
    emit("AccountOpened", {
      account_id,
      asset,
      kind,
      flags: { debits_must_not_exceed_credits: constrained, credits_must_not_exceed_debits: false },
      code: 1,
      user_data: kind === "wallet" ? `user-${accounts.size}` : null,
      opened_at: now(),
    })
    return account_id
  }
  const book = (asset: (typeof assets)[number]) => ({
    world: open(asset, "world", false),
    fees: open(asset, "fee_revenue", false),
    custody: open(asset, "chain_custody", false),
    wallets: Array.from({ length: options.wallet_count ?? 5 }, () => open(asset, "wallet", true)),
  })
  const books = assets.map(book)
  const account = (id: string): ExpectedAccount => accounts.get(id) as ExpectedAccount
  const available = (id: string) => {
    const a = account(id)
    return a.credits_posted - a.debits_posted - a.debits_pending
  }
  const single = (debit: string, credit: string, amount: bigint, group: string | null) => {
    const transfer_id = uuidv7()
    account(debit).debits_posted += amount
    account(credit).credits_posted += amount
    statuses.set(transfer_id, "posted")
    emit("TransferCreated", {
      transfer_id,
      debit_account_id: debit,
      credit_account_id: credit,
      asset_code: account(debit).asset_code,
      amount: amount.toString(),
      code: 1,
      user_data: null,
      linked_group_id: group,
      created_at: now(),
    })
  }
  const pendings: OpenPending[] = []
  const release = (p: OpenPending, posted: bigint) => {
    account(p.debit).debits_pending -= p.amount
    account(p.credit).credits_pending -= p.amount
    account(p.debit).debits_posted += posted
    account(p.credit).credits_posted += posted
  }
  for (let operation = 0; operation < options.operation_count; operation += 1) {
    const b = pick(books)
    const wallet = pick(b.wallets)
    const roll = next()
    if (roll < 0.3 || available(wallet) < 1_000n) {
      single(b.world, wallet, BigInt(1_000 + Math.floor(next() * 1_000_000)), null)
    } else if (roll < 0.6) {
      const amount = BigInt(1 + Math.floor(next() * Number(available(wallet) / 2n)))
      const fee = (amount * 3n) / 1000n
      const to = pick(b.wallets.filter((w) => w !== wallet))
      const group = fee > 0n ? uuidv7() : null
      single(wallet, to, amount - fee, group)
      if (fee > 0n) single(wallet, b.fees, fee, group)
    } else if (roll < 0.8) {
      const amount = BigInt(1 + Math.floor(next() * Number(available(wallet) / 2n)))
      const transfer_id = uuidv7()
      const expires_at_ms = next() < 0.5 ? clock_ms + 50 : null
      const p = { transfer_id, debit: wallet, credit: b.custody, amount, expires_at_ms }
      account(wallet).debits_pending += amount
      account(b.custody).credits_pending += amount
      pendings.push(p)
      statuses.set(transfer_id, "pending")
      emit("PendingTransferCreated", {
        transfer_id,
        debit_account_id: wallet,
        credit_account_id: b.custody,
        asset_code: account(wallet).asset_code,
        amount: amount.toString(),
        code: 2,
        user_data: null,
        linked_group_id: null,
        created_at: now(),
        expires_at: expires_at_ms === null ? null : new Date(expires_at_ms).toISOString(),
      })
    } else {
      const index = pendings.findIndex((p) => p.expires_at_ms === null || p.expires_at_ms > clock_ms)
      const due = pendings.findIndex((p) => p.expires_at_ms !== null && p.expires_at_ms <= clock_ms)
      if (due >= 0) {
        const [p] = pendings.splice(due, 1) as [OpenPending]
        release(p, 0n)
        statuses.set(p.transfer_id, "expired")
        emit("PendingTransferExpired", { pending_id: p.transfer_id, expired_at: now() })
      } else if (index >= 0) {
        const [p] = pendings.splice(index, 1) as [OpenPending]
        const transfer_id = uuidv7()
        if (next() < 0.6) {
          const posted = p.amount - BigInt(Math.floor(next() * Number(p.amount / 3n)))
          release(p, posted)
          statuses.set(p.transfer_id, "posted")
          statuses.set(transfer_id, "posted")
          emit("PendingTransferPosted", {
            transfer_id,
            pending_id: p.transfer_id,
            amount: posted.toString(),
            linked_group_id: null,
            posted_at: now(),
          })
        } else {
          release(p, 0n)
          statuses.set(p.transfer_id, "voided")
          statuses.set(transfer_id, "voided")
          emit("PendingTransferVoided", {
            transfer_id,
            pending_id: p.transfer_id,
            linked_group_id: null,
            voided_at: now(),
          })
        }
      }
    }
  }
  return { stream_id, events, accounts, statuses }
}
