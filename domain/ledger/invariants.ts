/**
 * The ledger's invariants as plain functions, so that `evolve` asserts them as it goes and `verify`
 * (and the property tests) check them over a whole ledger after the fact.
 */
import { U128_MAX } from "../money/amount.ts"
import type { AccountFlags } from "./events.ts"

export interface AccountBalances {
  readonly debits_pending: bigint
  readonly debits_posted: bigint
  readonly credits_pending: bigint
  readonly credits_posted: bigint
}

/**
 * What a wallet can still spend: credits_posted - debits_posted - debits_pending. Incoming pending
 * credits do not count (they may be voided); outgoing pending debits do (they may be posted).
 * @example available({ credits_posted: 100n, debits_posted: 30n, debits_pending: 20n, credits_pending: 5n }) // 50n
 */
export function available(account: AccountBalances): bigint {
  return account.credits_posted - account.debits_posted - account.debits_pending
}

/**
 * Whether an account keeps the promises it was opened with: balances in 0..U128_MAX (debits and
 * credits each summed over pending and posted) and its flag, if any, honoured counting pending
 * amounts against it.
 */
export function withinLimits(account: AccountBalances & { readonly flags: AccountFlags }): boolean {
  const { debits_pending, debits_posted, credits_pending, credits_posted, flags } = account
  const debits = debits_pending + debits_posted
  const credits = credits_pending + credits_posted
  if (debits_pending < 0n || debits_posted < 0n || credits_pending < 0n || credits_posted < 0n) return false
  if (debits > U128_MAX || credits > U128_MAX) return false
  if (flags.debits_must_not_exceed_credits && debits > credits_posted) return false
  return !(flags.credits_must_not_exceed_debits && credits > debits_posted)
}

const zeroBalances: AccountBalances = {
  debits_pending: 0n,
  debits_posted: 0n,
  credits_pending: 0n,
  credits_posted: 0n,
}

/** One asset's balances summed over all its accounts. */
export interface AssetTotals extends AccountBalances {
  readonly asset_code: string
  /** Posted debits equal posted credits, and pending debits equal pending credits. */
  readonly balanced: boolean
}

export interface DoubleEntryCheck {
  /** Every asset is balanced. */
  readonly balanced: boolean
  /** Sorted by asset code. */
  readonly assets: ReadonlyArray<AssetTotals>
}

/**
 * Sums balances per asset and checks double entry: every transfer debits one account and credits
 * another by the same amount, so per asset the debits equal the credits, pending and posted apart.
 * @example checkDoubleEntry(listAccounts(state)).balanced // true, or the ledger is corrupt
 */
export function checkDoubleEntry(
  accounts: Iterable<AccountBalances & { readonly asset: { readonly code: string } }>,
): DoubleEntryCheck {
  const sums = new Map<string, AccountBalances>()
  for (const account of accounts) {
    const sum = sums.get(account.asset.code) ?? zeroBalances
    sums.set(account.asset.code, {
      debits_pending: sum.debits_pending + account.debits_pending,
      debits_posted: sum.debits_posted + account.debits_posted,
      credits_pending: sum.credits_pending + account.credits_pending,
      credits_posted: sum.credits_posted + account.credits_posted,
    })
  }
  const assets = [...sums.entries()]
    .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))
    .map(([asset_code, sum]): AssetTotals => {
      const balanced = sum.debits_posted === sum.credits_posted && sum.debits_pending === sum.credits_pending
      return { asset_code, ...sum, balanced }
    })
  return { balanced: assets.every((totals) => totals.balanced), assets }
}
