// Proves every ledger rule: for each command and each refusal, given these events, when this command is decided, then exactly these events (or this error) come out, and evolve keeps balances and the clock consistent.
import { Result } from "effect"
import { describe, expect, it } from "vitest"
import type {
  AccountKind,
  AccountOpened,
  AssetRecord,
  LedgerCommand,
  LedgerError,
  LedgerEvent,
  LedgerState,
  PendingTransferCreated,
  TransferCreated,
  TransferSpec,
} from "../../domain/ledger/index.ts"
import {
  AccountAlreadyExists,
  AccountFlagsConflict,
  AccountNotFound,
  AccountsMustBeDifferent,
  AmountAboveMaximum,
  AmountMustBePositive,
  AssetMismatch,
  available,
  BalanceOverflow,
  checkDoubleEntry,
  compactTransfers,
  decide,
  decideAndEvolve,
  ExceedsDebits,
  evolve,
  evolveAll,
  findTransfer,
  hasTransfer,
  InsufficientFunds,
  InvalidCode,
  InvalidId,
  InvalidTimeout,
  initialState,
  isoFromMs,
  LinkedTransferFailed,
  ledgerDecider,
  ledgerErrorTags,
  nextExpiryMs,
  PendingTransferAlreadyExpired,
  PendingTransferAlreadyPosted,
  PendingTransferAlreadyVoided,
  PendingTransferNotFound,
  PostAmountExceedsPending,
  pendingTimeoutMsMax,
  TransferCountOutOfRange,
  TransferIdAlreadyUsed,
  transferBatchCountMax,
  UserDataTooLong,
} from "../../domain/ledger/index.ts"
import { InvalidAsset, U128_MAX } from "../../domain/money/index.ts"

const t0 = Date.UTC(2025, 0, 1)
const usdc: AssetRecord = { code: "USDC@ethereum", symbol: "USDC", chain: "ethereum", decimals: 6 }
const usdcSolana: AssetRecord = { code: "USDC@solana", symbol: "USDC", chain: "solana", decimals: 6 }

type Limit = "no_overdraft" | "no_overcredit" | "none"

const flagsFor = (limit: Limit) => ({
  debits_must_not_exceed_credits: limit === "no_overdraft",
  credits_must_not_exceed_debits: limit === "no_overcredit",
})

// Events, as the ledger would have recorded them.

function opened(account_id: string, limit: Limit = "no_overdraft", asset = usdc, at_ms = t0): AccountOpened {
  const kind: AccountKind = limit === "no_overdraft" ? "wallet" : "world"
  return {
    type: "AccountOpened",
    data: {
      account_id,
      asset,
      kind,
      flags: flagsFor(limit),
      code: 1,
      user_data: null,
      opened_at: isoFromMs(at_ms),
    },
  }
}

function created(
  transfer_id: string,
  debit_account_id: string,
  credit_account_id: string,
  amount: bigint,
  at_ms = t0,
  linked_group_id: string | null = null,
): TransferCreated {
  return {
    type: "TransferCreated",
    data: {
      transfer_id,
      debit_account_id,
      credit_account_id,
      asset_code: usdc.code,
      amount: amount.toString(),
      code: 1,
      user_data: null,
      linked_group_id,
      created_at: isoFromMs(at_ms),
    },
  }
}

function reserved(
  transfer_id: string,
  debit_account_id: string,
  credit_account_id: string,
  amount: bigint,
  at_ms: number,
  expires_at_ms: number | null,
  linked_group_id: string | null = null,
): PendingTransferCreated {
  const { data } = created(transfer_id, debit_account_id, credit_account_id, amount, at_ms, linked_group_id)
  return {
    type: "PendingTransferCreated",
    data: { ...data, expires_at: expires_at_ms === null ? null : isoFromMs(expires_at_ms) },
  }
}

const posted = (transfer_id: string, pending_id: string, amount: bigint, at_ms: number): LedgerEvent => ({
  type: "PendingTransferPosted",
  data: {
    transfer_id,
    pending_id,
    amount: amount.toString(),
    linked_group_id: null,
    posted_at: isoFromMs(at_ms),
  },
})

const voided = (transfer_id: string, pending_id: string, at_ms: number): LedgerEvent => ({
  type: "PendingTransferVoided",
  data: { transfer_id, pending_id, linked_group_id: null, voided_at: isoFromMs(at_ms) },
})

const expired = (pending_id: string, at_ms: number): LedgerEvent => ({
  type: "PendingTransferExpired",
  data: { pending_id, expired_at: isoFromMs(at_ms) },
})

// Commands.

function open(account_id: string, limit: Limit = "no_overdraft", now_ms = t0, asset = usdc): LedgerCommand {
  const kind: AccountKind = limit === "no_overdraft" ? "wallet" : "world"
  return {
    type: "OpenAccount",
    account_id,
    asset,
    kind,
    flags: flagsFor(limit),
    code: 1,
    user_data: null,
    now_ms,
  }
}

function spec(
  transfer_id: string,
  debit_account_id: string,
  credit_account_id: string,
  amount: bigint,
  extra: Partial<TransferSpec> = {},
): TransferSpec {
  return { transfer_id, debit_account_id, credit_account_id, amount, code: 1, user_data: null, ...extra }
}

const transfers = (
  specs: ReadonlyArray<TransferSpec>,
  now_ms = t0,
  group_id: string | null = null,
): LedgerCommand => ({
  type: "CreateTransfers",
  group_id,
  transfers: specs,
  now_ms,
})

const post = (transfer_id: string, pending_id: string, now_ms: number, amount?: bigint): LedgerCommand =>
  amount === undefined
    ? { type: "PostPendingTransfer", transfer_id, pending_id, now_ms }
    : { type: "PostPendingTransfer", transfer_id, pending_id, amount, now_ms }

const cancel = (transfer_id: string, pending_id: string, now_ms: number): LedgerCommand => ({
  type: "VoidPendingTransfer",
  transfer_id,
  pending_id,
  now_ms,
})

const expire = (now_ms: number): LedgerCommand => ({ type: "ExpirePendingTransfers", now_ms })

/**
 * given(events).when(command).then(events) / .thenFails(error). `then` also folds the new events,
 * so every accepted decision is proven acceptable to evolve, and returns the state after them.
 */
function given(...history: ReadonlyArray<LedgerEvent>) {
  const state = evolveAll(history)
  return {
    state,
    when(command: LedgerCommand) {
      const result = decide(command, state)
      return {
        // biome-ignore lint/suspicious/noThenProperty: the given/when/then reading is the point; never awaited.
        then(expected: ReadonlyArray<LedgerEvent>): LedgerState {
          expect(result).toEqual(Result.succeed(expected))
          const after = evolveAll(expected, state)
          const both = decideAndEvolve(command, state)
          expect(Result.isSuccess(both) && both.success.state).toEqual(after)
          return after
        },
        thenFails(expected: LedgerError): void {
          expect(result).toEqual(Result.fail(expected))
        },
      }
    },
  }
}

/** What a decision is expected to be: the events, or the refusal. */
type LedgerDecisionExpected = ReadonlyArray<LedgerEvent> | LedgerError

/** A funded wallet w1 (1000), an empty wallet w2, and the world account that funded w1. */
const funded: ReadonlyArray<LedgerEvent> = [
  opened("world", "none"),
  opened("w1"),
  opened("w2"),
  created("fund", "world", "w1", 1_000n),
]

function balances(state: LedgerState, account_id: string) {
  const account = state.accounts.get(account_id)
  if (account === undefined) throw new Error(`no account ${account_id}`)
  const { debits_pending, debits_posted, credits_pending, credits_posted } = account
  return { debits_pending, debits_posted, credits_pending, credits_posted }
}

describe("OpenAccount", () => {
  it("opens an account at the ledger clock", () => {
    given()
      .when(open("w1", "no_overdraft", t0))
      .then([opened("w1", "no_overdraft", usdc, t0)])
  })

  it("re-opening with the identical spec records nothing (a retry)", () => {
    given(opened("w1")).when(open("w1")).then([])
  })

  it("re-opening with a different spec is refused", () => {
    given(opened("w1"))
      .when(open("w1", "none"))
      .thenFails(new AccountAlreadyExists({ account_id: "w1" }))
    given(opened("w1"))
      .when(open("w1", "no_overdraft", t0, usdcSolana))
      .thenFails(new AccountAlreadyExists({ account_id: "w1" }))
  })

  it("refuses both balance flags at once", () => {
    const command: LedgerCommand = {
      type: "OpenAccount",
      account_id: "x",
      asset: usdc,
      kind: "clearing",
      flags: { debits_must_not_exceed_credits: true, credits_must_not_exceed_debits: true },
      code: 1,
      user_data: null,
      now_ms: t0,
    }
    given()
      .when(command)
      .thenFails(new AccountFlagsConflict({ account_id: "x" }))
  })

  it("refuses an invalid asset", () => {
    const asset = { ...usdc, code: "USDT@ethereum" }
    given()
      .when(open("w1", "no_overdraft", t0, asset))
      .thenFails(new InvalidAsset({ code: "USDT@ethereum", reason: "code must be <symbol>@<chain>" }))
  })

  it("refuses an empty id, a code outside u16 and oversized user data", () => {
    given()
      .when(open(""))
      .thenFails(new InvalidId({ field: "account_id", value: "", max_length: 256 }))
    const base = open("w1")
    if (base.type !== "OpenAccount") throw new Error("unreachable")
    given()
      .when({ ...base, code: 70_000 })
      .thenFails(new InvalidCode({ code: 70_000, max: 65_535 }))
    given()
      .when({ ...base, code: 1.5 })
      .thenFails(new InvalidCode({ code: 1.5, max: 65_535 }))
    given()
      .when({ ...base, user_data: "x".repeat(1_025) })
      .thenFails(new UserDataTooLong({ length: 1_025, max_length: 1_024 }))
  })
})

describe("CreateTransfers", () => {
  it("records a single-phase transfer and moves posted balances", () => {
    const after = given(...funded)
      .when(transfers([spec("t1", "w1", "w2", 300n)], t0 + 5))
      .then([created("t1", "w1", "w2", 300n, t0 + 5)])
    expect(balances(after, "w1")).toEqual({
      debits_pending: 0n,
      debits_posted: 300n,
      credits_pending: 0n,
      credits_posted: 1_000n,
    })
    expect(available(balances(after, "w1"))).toBe(700n)
  })

  it("reserves a pending transfer that lapses at ledger clock + timeout", () => {
    const after = given(...funded)
      .when(transfers([spec("p1", "w1", "w2", 300n, { pending: { timeout_ms: 60_000 } })], t0 + 5))
      .then([reserved("p1", "w1", "w2", 300n, t0 + 5, t0 + 60_005)])
    expect(balances(after, "w1").debits_pending).toBe(300n)
    expect(balances(after, "w2").credits_pending).toBe(300n)
    expect(nextExpiryMs(after)).toBe(t0 + 60_005)
  })

  it("a pending transfer with timeout 0 never lapses", () => {
    const after = given(...funded)
      .when(transfers([spec("p1", "w1", "w2", 300n, { pending: { timeout_ms: 0 } })]))
      .then([reserved("p1", "w1", "w2", 300n, t0, null)])
    expect(nextExpiryMs(after)).toBe(null)
  })

  it("records a linked group in order, each checked after the ones before it", () => {
    given(...funded)
      .when(transfers([spec("pay", "w1", "w2", 997n), spec("fee", "w1", "world", 3n)], t0, "g1"))
      .then([created("pay", "w1", "w2", 997n, t0, "g1"), created("fee", "w1", "world", 3n, t0, "g1")])
  })

  it("refuses the whole group when a later transfer no longer fits (all or nothing)", () => {
    // Each fits alone; together they need 1001.
    given(...funded)
      .when(transfers([spec("pay", "w1", "w2", 998n), spec("fee", "w1", "world", 3n)], t0, "g1"))
      .thenFails(
        new LinkedTransferFailed({
          index: 1,
          transfer_id: "fee",
          reason: new InsufficientFunds({ account_id: "w1", available: 2n, requested: 3n }),
        }),
      )
    given(...funded)
      .when(transfers([spec("pay", "w1", "nobody", 1n), spec("fee", "w1", "world", 3n)], t0, "g1"))
      .thenFails(
        new LinkedTransferFailed({
          index: 0,
          transfer_id: "pay",
          reason: new AccountNotFound({ account_id: "nobody" }),
        }),
      )
  })

  it("an identical retry records nothing; a retried group records only what is missing", () => {
    given(...funded, created("t1", "w1", "w2", 300n))
      .when(transfers([spec("t1", "w1", "w2", 300n)], t0 + 9))
      .then([])
    const history = [...funded, created("pay", "w1", "w2", 10n, t0, "g1")]
    given(...history)
      .when(transfers([spec("pay", "w1", "w2", 10n), spec("fee", "w1", "world", 1n)], t0, "g1"))
      .then([created("fee", "w1", "world", 1n, t0, "g1")])
  })

  it("a reused transfer id with different fields is refused", () => {
    const history = [...funded, created("t1", "w1", "w2", 300n)]
    given(...history)
      .when(transfers([spec("t1", "w1", "w2", 301n)]))
      .thenFails(new TransferIdAlreadyUsed({ transfer_id: "t1" }))
    given(...history)
      .when(transfers([spec("t1", "w1", "w2", 300n, { pending: { timeout_ms: 0 } })]))
      .thenFails(new TransferIdAlreadyUsed({ transfer_id: "t1" }))
    given(...history)
      .when(transfers([spec("t1", "w1", "w2", 300n)], t0, "other-group"))
      .thenFails(new TransferIdAlreadyUsed({ transfer_id: "t1" }))
    given(...history)
      .when(transfers([spec("fund", "w1", "w2", 1n), spec("t2", "w1", "w2", 1n)], t0, "g"))
      .thenFails(
        new LinkedTransferFailed({
          index: 0,
          transfer_id: "fund",
          reason: new TransferIdAlreadyUsed({ transfer_id: "fund" }),
        }),
      )
  })

  it("refuses no transfers and more than the batch bound", () => {
    given(...funded)
      .when(transfers([]))
      .thenFails(new TransferCountOutOfRange({ count: 0, min: 1, max: transferBatchCountMax }))
    const many = Array.from({ length: transferBatchCountMax + 1 }, (_, i) => spec(`t${i}`, "world", "w2", 1n))
    given(...funded)
      .when(transfers(many))
      .thenFails(new TransferCountOutOfRange({ count: 8_191, min: 1, max: 8_190 }))
  })

  it("accepts a full batch", () => {
    const full = Array.from({ length: transferBatchCountMax }, (_, i) => spec(`t${i}`, "world", "w2", 1n))
    const result = decide(transfers(full, t0, "big"), evolveAll(funded))
    expect(Result.isSuccess(result) && result.success.length).toBe(transferBatchCountMax)
  })

  it("refuses missing accounts", () => {
    given(...funded)
      .when(transfers([spec("t1", "ghost", "w2", 1n)]))
      .thenFails(new AccountNotFound({ account_id: "ghost" }))
    given(...funded)
      .when(transfers([spec("t1", "w1", "ghost", 1n)]))
      .thenFails(new AccountNotFound({ account_id: "ghost" }))
  })

  it("refuses a transfer from an account to itself", () => {
    given(...funded)
      .when(transfers([spec("t1", "w1", "w1", 1n)]))
      .thenFails(new AccountsMustBeDifferent({ transfer_id: "t1", account_id: "w1" }))
  })

  it("refuses accounts of different assets", () => {
    given(...funded, opened("sol", "no_overdraft", usdcSolana))
      .when(transfers([spec("t1", "w1", "sol", 1n)]))
      .thenFails(
        new AssetMismatch({
          transfer_id: "t1",
          debit_account_id: "w1",
          debit_asset_code: "USDC@ethereum",
          credit_account_id: "sol",
          credit_asset_code: "USDC@solana",
        }),
      )
  })

  it("refuses zero, negative and above-u128 amounts", () => {
    given(...funded)
      .when(transfers([spec("t1", "w1", "w2", 0n)]))
      .thenFails(new AmountMustBePositive({ transfer_id: "t1", amount: 0n }))
    given(...funded)
      .when(transfers([spec("t1", "w1", "w2", -5n)]))
      .thenFails(new AmountMustBePositive({ transfer_id: "t1", amount: -5n }))
    given(...funded)
      .when(transfers([spec("t1", "world", "w2", U128_MAX + 1n)]))
      .thenFails(new AmountAboveMaximum({ transfer_id: "t1", amount: U128_MAX + 1n, max: U128_MAX }))
  })

  it("refuses a balance that would pass u128, on either side", () => {
    const history = [
      opened("world", "none"),
      opened("other", "none"),
      opened("w2"),
      created("big", "world", "w2", U128_MAX),
    ]
    given(...history)
      .when(transfers([spec("t1", "world", "other", 1n)]))
      .thenFails(new BalanceOverflow({ account_id: "world", side: "debits" }))
    given(...history)
      .when(transfers([spec("t1", "other", "w2", 1n)]))
      .thenFails(new BalanceOverflow({ account_id: "w2", side: "credits" }))
  })

  it("refuses an overdraft, counting pending debits against the balance", () => {
    given(...funded)
      .when(transfers([spec("t1", "w1", "w2", 1_001n)]))
      .thenFails(new InsufficientFunds({ account_id: "w1", available: 1_000n, requested: 1_001n }))
    given(...funded, reserved("p1", "w1", "w2", 600n, t0, null))
      .when(transfers([spec("t1", "w1", "w2", 401n)]))
      .thenFails(new InsufficientFunds({ account_id: "w1", available: 400n, requested: 401n }))
    // Incoming pending credits are not spendable yet.
    given(...funded, reserved("p1", "w1", "w2", 600n, t0, null))
      .when(transfers([spec("t1", "w2", "w1", 1n)]))
      .thenFails(new InsufficientFunds({ account_id: "w2", available: 0n, requested: 1n }))
  })

  it("refuses crediting a credits_must_not_exceed_debits account beyond its debits", () => {
    const history = [
      opened("settle", "no_overcredit"),
      opened("world", "none"),
      created("t0", "settle", "world", 50n),
    ]
    given(...history)
      .when(transfers([spec("t1", "world", "settle", 50n)], t0))
      .then([created("t1", "world", "settle", 50n)])
    given(...history)
      .when(transfers([spec("t1", "world", "settle", 51n)]))
      .thenFails(new ExceedsDebits({ account_id: "settle", available: 50n, requested: 51n }))
  })

  it("refuses timeouts that are negative, fractional or beyond the bound", () => {
    for (const timeout_ms of [-1, 1.5, Number.NaN, pendingTimeoutMsMax + 1]) {
      given(...funded)
        .when(transfers([spec("p1", "w1", "w2", 1n, { pending: { timeout_ms } })]))
        .thenFails(new InvalidTimeout({ transfer_id: "p1", timeout_ms, max: pendingTimeoutMsMax }))
    }
  })

  it("refuses malformed ids, codes and user data", () => {
    const long = "x".repeat(257)
    given(...funded)
      .when(transfers([spec(long, "w1", "w2", 1n)]))
      .thenFails(new InvalidId({ field: "transfer_id", value: long.slice(0, 256), max_length: 256 }))
    given(...funded)
      .when(transfers([spec("t1", "w1", "w2", 1n)], t0, ""))
      .thenFails(new InvalidId({ field: "group_id", value: "", max_length: 256 }))
    given(...funded)
      .when(transfers([spec("t1", "w1", "w2", 1n, { code: -1 })]))
      .thenFails(new InvalidCode({ code: -1, max: 65_535 }))
    given(...funded)
      .when(transfers([spec("t1", "w1", "w2", 1n, { user_data: "x".repeat(2_000) })]))
      .thenFails(new UserDataTooLong({ length: 2_000, max_length: 1_024 }))
  })
})

describe("PostPendingTransfer", () => {
  const reservedHistory = [...funded, reserved("p1", "w1", "w2", 300n, t0, t0 + 10_000)]

  it("posts in full when the amount is omitted", () => {
    const after = given(...reservedHistory)
      .when(post("q1", "p1", t0 + 1))
      .then([posted("q1", "p1", 300n, t0 + 1)])
    expect(balances(after, "w1")).toMatchObject({ debits_pending: 0n, debits_posted: 300n })
    expect(balances(after, "w2")).toMatchObject({ credits_pending: 0n, credits_posted: 300n })
    expect(nextExpiryMs(after)).toBe(null)
  })

  it("posts part and releases the rest", () => {
    const after = given(...reservedHistory)
      .when(post("q1", "p1", t0 + 1, 120n))
      .then([posted("q1", "p1", 120n, t0 + 1)])
    expect(balances(after, "w1")).toMatchObject({ debits_pending: 0n, debits_posted: 120n })
    expect(balances(after, "w2")).toMatchObject({ credits_pending: 0n, credits_posted: 120n })
    expect(after.transfers.get("p1")).toMatchObject({ status: "posted", posted_amount: 120n })
  })

  it("an identical retry records nothing; the same post id for something else is refused", () => {
    const history = [...reservedHistory, posted("q1", "p1", 300n, t0 + 1)]
    given(...history)
      .when(post("q1", "p1", t0 + 2))
      .then([])
    given(...history)
      .when(post("q1", "p1", t0 + 2, 300n))
      .then([])
    given(...history)
      .when(post("q1", "p1", t0 + 2, 299n))
      .thenFails(new TransferIdAlreadyUsed({ transfer_id: "q1" }))
    given(...history)
      .when(cancel("q1", "p1", t0 + 2))
      .thenFails(new TransferIdAlreadyUsed({ transfer_id: "q1" }))
  })

  it("refuses an unknown or single-phase pending id", () => {
    given(...reservedHistory)
      .when(post("q1", "nope", t0 + 1))
      .thenFails(new PendingTransferNotFound({ pending_id: "nope" }))
    given(...reservedHistory)
      .when(post("q1", "fund", t0 + 1))
      .thenFails(new PendingTransferNotFound({ pending_id: "fund" }))
  })

  it("refuses a reservation already posted, voided or expired", () => {
    given(...reservedHistory, posted("q1", "p1", 300n, t0 + 1))
      .when(post("q2", "p1", t0 + 2))
      .thenFails(new PendingTransferAlreadyPosted({ pending_id: "p1" }))
    given(...reservedHistory, voided("v1", "p1", t0 + 1))
      .when(post("q2", "p1", t0 + 2))
      .thenFails(new PendingTransferAlreadyVoided({ pending_id: "p1" }))
    given(...reservedHistory, expired("p1", t0 + 10_000))
      .when(post("q2", "p1", t0 + 10_001))
      .thenFails(new PendingTransferAlreadyExpired({ pending_id: "p1" }))
  })

  it("refuses a reservation that lapses within this very command", () => {
    given(...reservedHistory)
      .when(post("q1", "p1", t0 + 10_000))
      .thenFails(new PendingTransferAlreadyExpired({ pending_id: "p1" }))
  })

  it("refuses posting more than reserved, or nothing", () => {
    given(...reservedHistory)
      .when(post("q1", "p1", t0 + 1, 301n))
      .thenFails(new PostAmountExceedsPending({ pending_id: "p1", amount: 301n, pending_amount: 300n }))
    given(...reservedHistory)
      .when(post("q1", "p1", t0 + 1, 0n))
      .thenFails(new AmountMustBePositive({ transfer_id: "q1", amount: 0n }))
  })
})

describe("VoidPendingTransfer", () => {
  const reservedHistory = [...funded, reserved("p1", "w1", "w2", 300n, t0, t0 + 10_000)]

  it("voids and releases the whole reservation", () => {
    const after = given(...reservedHistory)
      .when(cancel("v1", "p1", t0 + 1))
      .then([voided("v1", "p1", t0 + 1)])
    expect(balances(after, "w1")).toMatchObject({ debits_pending: 0n, debits_posted: 0n })
    expect(balances(after, "w2")).toMatchObject({ credits_pending: 0n, credits_posted: 0n })
    expect(after.transfers.get("p1")).toMatchObject({ status: "voided" })
    expect(nextExpiryMs(after)).toBe(null)
  })

  it("an identical retry records nothing", () => {
    given(...reservedHistory, voided("v1", "p1", t0 + 1))
      .when(cancel("v1", "p1", t0 + 2))
      .then([])
  })

  it("refuses what cannot be voided", () => {
    given(...reservedHistory)
      .when(cancel("v1", "nope", t0 + 1))
      .thenFails(new PendingTransferNotFound({ pending_id: "nope" }))
    given(...reservedHistory, posted("q1", "p1", 300n, t0 + 1))
      .when(cancel("v1", "p1", t0 + 2))
      .thenFails(new PendingTransferAlreadyPosted({ pending_id: "p1" }))
    given(...reservedHistory, expired("p1", t0 + 10_000))
      .when(cancel("v1", "p1", t0 + 10_001))
      .thenFails(new PendingTransferAlreadyExpired({ pending_id: "p1" }))
    given(...reservedHistory)
      .when(cancel("p1", "p1", t0 + 1))
      .thenFails(new TransferIdAlreadyUsed({ transfer_id: "p1" }))
  })
})

describe("ExpirePendingTransfers and the ledger clock", () => {
  const history = [
    ...funded,
    reserved("b", "w1", "w2", 100n, t0, t0 + 2_000),
    reserved("a", "w1", "w2", 100n, t0, t0 + 2_000),
    reserved("c", "w1", "w2", 100n, t0, t0 + 1_000),
    reserved("later", "w1", "w2", 100n, t0, t0 + 5_000),
    reserved("never", "w1", "w2", 100n, t0, null),
  ]

  it("records nothing when nothing is due", () => {
    given(...history)
      .when(expire(t0 + 999))
      .then([])
  })

  it("expires what is due, soonest first then by id, and keeps the rest", () => {
    const after = given(...history)
      .when(expire(t0 + 2_000))
      .then([expired("c", t0 + 2_000), expired("a", t0 + 2_000), expired("b", t0 + 2_000)])
    expect(balances(after, "w1").debits_pending).toBe(200n)
    expect(nextExpiryMs(after)).toBe(t0 + 5_000)
  })

  it("expires what is due before deciding any command, and the released funds are spendable", () => {
    // 500 reserved, 500 left; once three lapse at t0 + 2000, 800 is available.
    given(...history)
      .when(transfers([spec("t1", "w1", "w2", 800n)], t0 + 2_000))
      .then([
        expired("c", t0 + 2_000),
        expired("a", t0 + 2_000),
        expired("b", t0 + 2_000),
        created("t1", "w1", "w2", 800n, t0 + 2_000),
      ])
    given(...history)
      .when(open("w3", "no_overdraft", t0 + 1_500))
      .then([expired("c", t0 + 1_500), opened("w3", "no_overdraft", usdc, t0 + 1_500)])
  })

  it("records expiries only with a command that succeeds", () => {
    given(...history)
      .when(transfers([spec("t1", "w1", "w2", 10_000n)], t0 + 2_000))
      .thenFails(new InsufficientFunds({ account_id: "w1", available: 800n, requested: 10_000n }))
  })

  it("never goes backwards: an earlier caller clock is read as the ledger clock", () => {
    const later = [...funded, opened("w3", "no_overdraft", usdc, t0 + 60_000)]
    given(...later)
      .when(transfers([spec("t1", "w1", "w2", 1n)], t0))
      .then([created("t1", "w1", "w2", 1n, t0 + 60_000)])
  })

  it("an earlier caller clock cannot keep a lapsed reservation alive", () => {
    const lapsedByClock = [...history, opened("w3", "no_overdraft", usdc, t0 + 3_000)]
    given(...lapsedByClock)
      .when(post("q", "a", t0))
      .thenFails(new PendingTransferAlreadyExpired({ pending_id: "a" }))
  })

  it("a timeout may not lapse past the last time the ledger can write", () => {
    const near = Date.UTC(9999, 11, 31, 23, 0, 0)
    const max = Date.UTC(9999, 11, 31, 23, 59, 59, 999) - near
    given(...funded)
      .when(transfers([spec("p1", "w1", "w2", 1n, { pending: { timeout_ms: max + 1 } })], near))
      .thenFails(new InvalidTimeout({ transfer_id: "p1", timeout_ms: max + 1, max }))
  })
})

describe("evolve", () => {
  it("leaves the previous state untouched", () => {
    const before = evolveAll(funded)
    const snapshot = balances(before, "w1")
    const after = evolve(before, created("t1", "w1", "w2", 5n))
    expect(balances(before, "w1")).toEqual(snapshot)
    expect(before.transfers.has("t1")).toBe(false)
    expect(after.transfers.has("t1")).toBe(true)
  })

  it.each([
    ["a transfer to a missing account", [...funded, created("t1", "w1", "ghost", 1n)]],
    ["an account opened twice", [opened("w1"), opened("w1")]],
    ["a transfer id used twice", [...funded, created("fund", "world", "w1", 1n)]],
    ["an overdraft", [...funded, created("t1", "w1", "w2", 1_001n)]],
    ["time going backwards", [...funded, created("t1", "w1", "w2", 1n, t0 - 1)]],
    [
      "a non-canonical amount",
      [
        ...funded,
        { ...created("t1", "w1", "w2", 1n), data: { ...created("t1", "w1", "w2", 1n).data, amount: "01" } },
      ],
    ],
    ["a post of a missing reservation", [...funded, posted("q1", "p1", 1n, t0)]],
    [
      "an expiry before it is due",
      [...funded, reserved("p1", "w1", "w2", 1n, t0, t0 + 10), expired("p1", t0 + 9)],
    ],
    [
      "a post above the reservation",
      [...funded, reserved("p1", "w1", "w2", 1n, t0, null), posted("q1", "p1", 2n, t0)],
    ],
    // decide lapses a due reservation before any command, so neither can be in its log.
    [
      "a post of a reservation at its expiry, never lapsed",
      [...funded, reserved("p1", "w1", "w2", 1n, t0, t0 + 10), posted("q1", "p1", 1n, t0 + 10)],
    ],
    [
      "a void of a reservation past its expiry, never lapsed",
      [...funded, reserved("p1", "w1", "w2", 1n, t0, t0 + 10), voided("q1", "p1", t0 + 5_000)],
    ],
  ] as const)("crashes on %s", (_name, events) => {
    expect(() => evolveAll(events)).toThrow()
  })
})

describe("compacted final records", () => {
  // Every case is decided twice, on the ledger as replayed and on the same ledger with its final
  // records compacted: the answers must be the same, and the record must really be compacted.
  const reservation = reserved("p1", "w1", "w2", 300n, t0, t0 + 10_000)
  const cases: ReadonlyArray<
    readonly [string, ReadonlyArray<LedgerEvent>, string, LedgerCommand, LedgerDecisionExpected]
  > = [
    ["an exact retry of a transfer", funded, "fund", transfers([spec("fund", "world", "w1", 1_000n)]), []],
    [
      "a transfer id used again with another amount",
      funded,
      "fund",
      transfers([spec("fund", "world", "w1", 999n)]),
      new TransferIdAlreadyUsed({ transfer_id: "fund" }),
    ],
    [
      "a transfer id used again in a group",
      funded,
      "fund",
      transfers([spec("fund", "world", "w1", 1_000n)], t0, "g"),
      new TransferIdAlreadyUsed({ transfer_id: "fund" }),
    ],
    [
      "a transfer id used again for a reservation",
      funded,
      "fund",
      transfers([spec("fund", "world", "w1", 1_000n, { pending: { timeout_ms: 0 } })]),
      new TransferIdAlreadyUsed({ transfer_id: "fund" }),
    ],
    [
      "a post of a single-phase transfer",
      funded,
      "fund",
      post("q1", "fund", t0 + 1),
      new PendingTransferNotFound({ pending_id: "fund" }),
    ],
    [
      "a post of a reservation posted before",
      [...funded, reservation, posted("q1", "p1", 300n, t0 + 1)],
      "p1",
      post("q2", "p1", t0 + 2),
      new PendingTransferAlreadyPosted({ pending_id: "p1" }),
    ],
    [
      "a void of a reservation voided before",
      [...funded, reservation, voided("v1", "p1", t0 + 1)],
      "p1",
      cancel("v2", "p1", t0 + 2),
      new PendingTransferAlreadyVoided({ pending_id: "p1" }),
    ],
    [
      "a post of a reservation that expired",
      [...funded, reservation, expired("p1", t0 + 10_000)],
      "p1",
      post("q2", "p1", t0 + 10_001),
      new PendingTransferAlreadyExpired({ pending_id: "p1" }),
    ],
    [
      "an exact retry of a reservation that was posted",
      [...funded, reservation, posted("q1", "p1", 300n, t0 + 1)],
      "p1",
      transfers([spec("p1", "w1", "w2", 300n, { pending: { timeout_ms: 10_000 } })], t0 + 2),
      [],
    ],
    [
      "a reservation id used again with another timeout",
      [...funded, reservation, posted("q1", "p1", 300n, t0 + 1)],
      "p1",
      transfers([spec("p1", "w1", "w2", 300n, { pending: { timeout_ms: 9_999 } })], t0 + 2),
      new TransferIdAlreadyUsed({ transfer_id: "p1" }),
    ],
    [
      "a retried post in full, the amount omitted",
      [...funded, reservation, posted("q1", "p1", 300n, t0 + 1)],
      "q1",
      post("q1", "p1", t0 + 2),
      [],
    ],
    [
      "a retried post in full, the amount given",
      [...funded, reservation, posted("q1", "p1", 300n, t0 + 1)],
      "q1",
      post("q1", "p1", t0 + 2, 300n),
      [],
    ],
    [
      "a retried partial post, the amount given",
      [...funded, reservation, posted("q1", "p1", 120n, t0 + 1)],
      "q1",
      post("q1", "p1", t0 + 2, 120n),
      [],
    ],
    [
      "a retried partial post with the amount omitted (that would be in full)",
      [...funded, reservation, posted("q1", "p1", 120n, t0 + 1)],
      "q1",
      post("q1", "p1", t0 + 2),
      new TransferIdAlreadyUsed({ transfer_id: "q1" }),
    ],
    [
      "a post id used again for another reservation",
      [...funded, reservation, posted("q1", "p1", 300n, t0 + 1)],
      "q1",
      post("q1", "fund", t0 + 2, 300n),
      new TransferIdAlreadyUsed({ transfer_id: "q1" }),
    ],
    [
      "a post id used again for a void",
      [...funded, reservation, posted("q1", "p1", 300n, t0 + 1)],
      "q1",
      cancel("q1", "p1", t0 + 2),
      new TransferIdAlreadyUsed({ transfer_id: "q1" }),
    ],
    [
      "a retried void",
      [...funded, reservation, voided("v1", "p1", t0 + 1)],
      "v1",
      cancel("v1", "p1", t0 + 2),
      [],
    ],
    [
      "a void id used again for a post",
      [...funded, reservation, voided("v1", "p1", t0 + 1)],
      "v1",
      post("v1", "p1", t0 + 2),
      new TransferIdAlreadyUsed({ transfer_id: "v1" }),
    ],
    [
      "a void id used again for a transfer",
      [...funded, reservation, voided("v1", "p1", t0 + 1)],
      "v1",
      transfers([spec("v1", "w1", "w2", 1n)], t0 + 2),
      new TransferIdAlreadyUsed({ transfer_id: "v1" }),
    ],
  ]

  const surrogates: typeof cases = [
    // SHA-256 hashes UTF-8, where a lone surrogate is U+FFFD: ids must not be digested that way.
    [
      "an id that differs only in a lone surrogate",
      [...funded, created("t\uD800", "world", "w1", 5n)],
      "t\uD800",
      transfers([spec("t\uFFFD", "world", "w1", 5n)]),
      [created("t\uFFFD", "world", "w1", 5n)],
    ],
    [
      "an id with the other lone surrogate",
      [...funded, created("t\uD800", "world", "w1", 5n)],
      "t\uD800",
      transfers([spec("t\uDFFF", "world", "w1", 7n)]),
      [created("t\uDFFF", "world", "w1", 7n)],
    ],
  ]

  it.each([...cases, ...surrogates])(
    "%s: answered alike, compacted or not",
    (_name, history, compacted_id, command, expected) => {
      const full = evolveAll(history)
      const compacted = compactTransfers(full)
      expect(full.transfers.has(compacted_id)).toBe(true)
      expect(compacted.transfers.has(compacted_id)).toBe(false)
      expect(findTransfer(compacted, compacted_id)).toMatchObject({ kind: "compacted" })
      const answer = Array.isArray(expected) ? Result.succeed(expected) : Result.fail(expected)
      expect(decide(command, full)).toEqual(answer)
      expect(decide(command, compacted)).toEqual(answer)
    },
  )

  it("keeps a reservation still pending in full, to be posted later", () => {
    const compacted = compactTransfers(evolveAll([...funded, reserved("p1", "w1", "w2", 300n, t0, null)]))
    expect(compacted.transfers.has("p1")).toBe(true)
    expect(compacted.transfers.has("fund")).toBe(false)
    expect(compacted.final_count).toBe(0)
    const after = evolveAll(Result.getOrThrow(decide(post("q1", "p1", t0 + 1), compacted)), compacted)
    expect(balances(after, "w2")).toMatchObject({ credits_posted: 300n, credits_pending: 0n })
  })

  it("an id taken by a compacted record cannot be recorded again, even by a corrupt stream", () => {
    const compacted = compactTransfers(evolveAll(funded))
    expect(hasTransfer(compacted, "fund")).toBe(true)
    expect(hasTransfer(compacted, "nope")).toBe(false)
    expect(() => evolve(compacted, created("fund", "world", "w1", 1n))).toThrow("a transfer id is used once")
    const settled = compactTransfers(
      evolveAll([...funded, reserved("p1", "w1", "w2", 3n, t0, null), posted("q1", "p1", 3n, t0)]),
    )
    expect(() => evolve(settled, voided("v1", "p1", t0))).toThrow("a reservation is settled once")
    expect(() => evolve(settled, posted("q2", "fund", 1n, t0))).toThrow(
      "a settled transfer is a pending transfer",
    )
  })

  it("a state compacted earlier does not see what a later one compacted into the same store", () => {
    const early = compactTransfers(evolveAll(funded))
    const later = compactTransfers(evolve(early, created("t1", "w1", "w2", 5n, t0 + 1)))
    expect(later.compacted).toBe(early.compacted)
    expect(hasTransfer(later, "t1")).toBe(true)
    expect(hasTransfer(early, "t1")).toBe(false)
    // A sibling of `later` compacting its own t1 gets its own store, and its own answer.
    const sibling = compactTransfers(evolve(early, created("t1", "w1", "w2", 7n, t0 + 1)))
    expect(sibling.compacted).not.toBe(early.compacted)
    expect(decide(transfers([spec("t1", "w1", "w2", 7n)], t0 + 2), sibling)).toEqual(Result.succeed([]))
    expect(decide(transfers([spec("t1", "w1", "w2", 7n)], t0 + 2), later)).toEqual(
      Result.fail(new TransferIdAlreadyUsed({ transfer_id: "t1" })),
    )
  })
})

describe("invariants", () => {
  it("a consistent ledger balances per asset, pending and posted apart", () => {
    const state = evolveAll([
      ...funded,
      reserved("p1", "w1", "w2", 100n, t0, null),
      opened("sol-world", "none", usdcSolana),
      opened("sol-w", "no_overdraft", usdcSolana),
    ])
    const check = checkDoubleEntry(state.accounts.values())
    expect(check.balanced).toBe(true)
    expect(check.assets.map((a) => [a.asset_code, a.debits_posted, a.debits_pending])).toEqual([
      ["USDC@ethereum", 1_000n, 100n],
      ["USDC@solana", 0n, 0n],
    ])
  })

  it("detects an unbalanced set of accounts", () => {
    const state = evolveAll(funded)
    const doctored = [...state.accounts.values()].map((account) =>
      account.account_id === "w1" ? { ...account, credits_posted: 999n } : account,
    )
    expect(checkDoubleEntry(doctored).balanced).toBe(false)
  })

  it("lists every error tag once", () => {
    expect(new Set(ledgerErrorTags).size).toBe(ledgerErrorTags.length)
    expect(ledgerErrorTags.length).toBe(23)
  })

  it("is an Emmett decider", () => {
    expect(ledgerDecider.initialState()).toBe(initialState)
    const result = ledgerDecider.decide(open("w1"), ledgerDecider.initialState())
    expect(Result.isSuccess(result)).toBe(true)
  })
})
