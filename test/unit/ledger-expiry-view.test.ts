// A pending payment says when its reservation really lapses: the expiry the ledger recorded (its own
// clock, which may run ahead of the request's), not the one the request planned.
import { describe, expect, it } from "vitest"
import { withLedgerExpiry } from "../../src/platform/payments.ts"
import type { PaymentRow } from "../../src/platform/transactions.ts"

const row = (status: PaymentRow["status"]): PaymentRow => ({
  transaction_id: "txn_1",
  tenant_id: "ten_1",
  environment: "sandbox",
  type: "social_payment",
  status,
  from_wallet_id: "wal_1",
  to_wallet_id: null,
  recipient: "a@example.com",
  recipient_kind: "email",
  token: "USDC",
  chain: "ethereum",
  decimals: 6,
  amount: "1000000",
  fee: "3000",
  note: null,
  metadata: {},
  failure_code: null,
  failure_message: null,
  created_at: "2026-01-01T00:00:00.000Z",
  expires_at: "2026-01-08T00:00:00.000Z",
  completed_at: null,
  failed_at: null,
})

const events = [
  { event_type: "PendingTransferExpired", data: { pending_id: "txn_0" } },
  {
    event_type: "PendingTransferCreated",
    data: { transfer_id: "txn_0", expires_at: "2026-01-08T00:00:09.000Z" },
  },
  {
    event_type: "PendingTransferCreated",
    data: { transfer_id: "txn_1", expires_at: "2026-01-08T00:00:00.007Z" },
  },
]

describe("withLedgerExpiry", () => {
  it("takes a pending payment's expiry from its own reservation's event", () => {
    expect(withLedgerExpiry(row("pending"), events).expires_at).toBe("2026-01-08T00:00:00.007Z")
  })
  it("leaves a payment that is not pending, or has no reservation among the events, as it is", () => {
    expect(withLedgerExpiry(row("completed"), events).expires_at).toBe("2026-01-08T00:00:00.000Z")
    expect(withLedgerExpiry(row("pending"), events.slice(0, 2)).expires_at).toBe("2026-01-08T00:00:00.000Z")
  })
})
