// A retried transfer must repeat code and user_data too (README: "a retry repeats every field"),
// whether its record is held in full or compacted. The platform's payments carry user_data (the
// transaction id), so an exact retry with non-null user_data after compaction must stay a no-op.
import { Result } from "effect"
import { describe, expect, it } from "vitest"
import {
  type AssetRecord,
  compactTransfers,
  decide,
  decideAndEvolve,
  initialState,
  type LedgerCommand,
  type LedgerState,
} from "../../domain/ledger/index.ts"

const t0 = Date.UTC(2025, 0, 1)
const usdc: AssetRecord = { code: "USDC@ethereum", symbol: "USDC", chain: "ethereum", decimals: 6 }
const open = (account_id: string, limit: boolean): LedgerCommand => ({
  type: "OpenAccount",
  account_id,
  asset: usdc,
  kind: limit ? "wallet" : "world",
  flags: { debits_must_not_exceed_credits: limit, credits_must_not_exceed_debits: false },
  code: 1,
  user_data: null,
  now_ms: t0,
})
const pay = (code: number, user_data: string | null, pending?: number): LedgerCommand => ({
  type: "CreateTransfers",
  group_id: "g",
  transfers: [
    {
      transfer_id: "t1",
      debit_account_id: "world",
      credit_account_id: "w1",
      amount: 5n,
      code,
      user_data,
      ...(pending === undefined ? {} : { pending: { timeout_ms: pending } }),
    },
  ],
  now_ms: t0 + 1,
})
const apply = (state: LedgerState, command: LedgerCommand): LedgerState => {
  const decided = decideAndEvolve(command, state)
  if (Result.isFailure(decided)) throw new Error(decided.failure._tag)
  return decided.success.state
}

describe.each([
  ["single-phase", undefined],
  ["pending", 0],
])("a %s transfer's retry, in full and compacted", (_name, pending) => {
  const made = [open("world", false), open("w1", true), pay(7, "txn_1", pending)].reduce(apply, initialState)
  // A reservation is compacted once final: void it first.
  const voided: LedgerCommand = {
    type: "VoidPendingTransfer",
    transfer_id: "v1",
    pending_id: "t1",
    now_ms: t0 + 2,
  }
  const full = pending === undefined ? made : apply(made, voided)
  const compacted = compactTransfers(full)
  it.each([
    ["in full", full],
    ["compacted", compacted],
  ])("%s: exact retry is a no-op; another code or user_data is refused", (_where, state) => {
    expect(state.transfers.has("t1")).toBe(state !== compacted)
    expect(decide(pay(7, "txn_1", pending), state)).toEqual(Result.succeed([]))
    for (const other of [pay(8, "txn_1", pending), pay(7, "txn_2", pending), pay(7, null, pending)]) {
      const answer = decide(other, state)
      expect(Result.isFailure(answer) && answer.failure._tag).toBe("TransferIdAlreadyUsed")
    }
  })
})
