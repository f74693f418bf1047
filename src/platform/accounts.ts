/**
 * How the platform maps its resources onto ledger accounts. One ledger per tenant and environment;
 * in it, one account per wallet and token, and per token a fee revenue account, a sandbox faucet
 * (the "world" the test money comes from) and an escrow holding payments that wait for their
 * recipient. Accounts are opened on first use; opening one twice is a no-op in the ledger.
 */
import { Effect } from "effect"
import type { AccountFlags, AccountKind, LedgerId } from "../../domain/ledger/events.ts"
import type { Asset } from "../../domain/money/asset.ts"
import type { Environment } from "../../domain/platform/scopes.ts"
import type { LedgerWriterService, WriterError } from "../ledger/writer.ts"

export const accountCodes = { wallet: 1, fee_revenue: 2, faucet: 3, escrow: 4 } as const
export const transferCodes = { payment: 100, fee: 101, release: 102, faucet: 200 } as const

export const ledgerOf = (tenant_id: string, environment: Environment): LedgerId => ({
  tenant: tenant_id,
  environment,
})

export const walletAccountId = (wallet_id: string, asset: Asset) => `${wallet_id}:${asset.code}`
export const feeAccountId = (asset: Asset) => `fees:${asset.code}`
export const faucetAccountId = (asset: Asset) => `faucet:${asset.code}`
export const escrowAccountId = (asset: Asset) => `escrow:${asset.code}`

export interface AccountSpec {
  readonly account_id: string
  readonly asset: Asset
  readonly kind: AccountKind
  readonly flags: AccountFlags
  readonly code: number
  readonly user_data: string | null
}

const noFlags: AccountFlags = { debits_must_not_exceed_credits: false, credits_must_not_exceed_debits: false }

export const walletAccount = (wallet_id: string, asset: Asset): AccountSpec => ({
  account_id: walletAccountId(wallet_id, asset),
  asset,
  kind: "wallet",
  // A wallet can never be overdrawn: the ledger refuses the transfer, not the API.
  flags: { debits_must_not_exceed_credits: true, credits_must_not_exceed_debits: false },
  code: accountCodes.wallet,
  user_data: wallet_id,
})

export const feeAccount = (asset: Asset): AccountSpec => ({
  account_id: feeAccountId(asset),
  asset,
  kind: "fee_revenue",
  flags: noFlags,
  code: accountCodes.fee_revenue,
  user_data: null,
})

export const faucetAccount = (asset: Asset): AccountSpec => ({
  account_id: faucetAccountId(asset),
  asset,
  kind: "world",
  flags: noFlags,
  code: accountCodes.faucet,
  user_data: null,
})

export const escrowAccount = (asset: Asset): AccountSpec => ({
  account_id: escrowAccountId(asset),
  asset,
  kind: "clearing",
  flags: { debits_must_not_exceed_credits: true, credits_must_not_exceed_debits: false },
  code: accountCodes.escrow,
  user_data: null,
})

/**
 * Opens the accounts of `specs` that the ledger does not have yet (checked against the writer's
 * state, so an account already open costs no command).
 */
export const ensureAccounts = (
  writer: LedgerWriterService,
  ledger: LedgerId,
  specs: ReadonlyArray<AccountSpec>,
  context: { readonly actor: string; readonly correlation_id: string },
): Effect.Effect<void, WriterError> =>
  Effect.flatMap(writer.snapshot(ledger), ({ state }) => {
    const missing = specs.filter((spec) => !state.accounts.has(spec.account_id))
    // Every payment asks; almost always every account is open already.
    if (missing.length === 0) return Effect.void
    return Effect.forEach(
      missing,
      (spec) => writer.execute(ledger, { type: "OpenAccount", ...spec, now_ms: Date.now() }, context),
      { concurrency: "unbounded", discard: true },
    )
  })
