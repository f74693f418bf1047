/**
 * Small builders for ledger commands used across tests and benchmarks.
 */
import type { CreateTransfers, OpenAccount, TransferSpec } from "../../domain/ledger/commands.ts"
import type { AccountKind, AssetRecord } from "../../domain/ledger/events.ts"

export const usdcEthereum: AssetRecord = {
  code: "USDC@ethereum",
  symbol: "USDC",
  chain: "ethereum",
  decimals: 6,
}

/** A wallet cannot be overdrawn; the world account (money from outside) can go below zero. */
export const openAccount = (
  account_id: string,
  kind: AccountKind,
  now_ms: number,
  asset: AssetRecord = usdcEthereum,
): OpenAccount => ({
  type: "OpenAccount",
  account_id,
  asset,
  kind,
  flags: {
    debits_must_not_exceed_credits: kind === "wallet" || kind === "fee_revenue",
    credits_must_not_exceed_debits: false,
  },
  code: 1,
  user_data: null,
  now_ms,
})

export const transfer = (
  transfer_id: string,
  debit_account_id: string,
  credit_account_id: string,
  amount: bigint,
  extra: Partial<TransferSpec> = {},
): TransferSpec => ({
  transfer_id,
  debit_account_id,
  credit_account_id,
  amount,
  code: 1,
  user_data: null,
  ...extra,
})

export const createTransfers = (
  transfers: ReadonlyArray<TransferSpec>,
  now_ms: number,
  group_id: string | null = null,
): CreateTransfers => ({ type: "CreateTransfers", group_id, transfers, now_ms })
