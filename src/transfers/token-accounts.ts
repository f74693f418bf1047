/**
 * Whether a transfer's destination is a token account of one of the platform's own wallets: where
 * the chain keeps a wallet's tokens apart from its address (Solana's associated token account, TON's
 * jetton wallet), created or not. Tokens sent there would credit no wallet and be held by an account
 * that can never send them. The chain's adapter names each wallet's token accounts
 * (`ChainAdapter.tokenAccountOf`); chains that keep tokens at the owner's address have none.
 */
import { Effect } from "effect"
import { type CustodyChain, sameAddress } from "../../domain/custody/derive.ts"
import type { ChainAdapter } from "../ports/chain.ts"

/**
 * Token accounts already derived, by chain, contract and owner: a TON jetton wallet's address takes
 * about 0.1 ms to compute, one of another jetton's minters a call to the node, and each transfer
 * looks at every wallet of its chain. Bounded: past the bound it starts again empty.
 */
const derived = new Map<string, string>()
const derived_max = 200_000

/**
 * How long a transfer request looks for the wallet a token account belongs to. Past it (a node that
 * does not answer a minter's `get_wallet_address`), or when the node fails, the answer is "not
 * found" and the request goes on: the accounts derived so far stay remembered, so the next request
 * gets further, and a destination that is a created token account is still refused when the
 * transfer is signed.
 */
export const token_account_search_deadline_ms = 10_000

export interface TokenAccountSearch {
  readonly chain: CustodyChain
  readonly adapter: ChainAdapter
  /** The addresses of the platform's wallets on `chain` (in the transfer's environment). */
  readonly wallet_addresses: ReadonlyArray<string>
  /** The token contracts (mints, jetton minters) whose accounts count. */
  readonly contracts: ReadonlyArray<string>
  readonly destination: string
  readonly deadline_ms?: number
}

/**
 * True when `destination` is a token account of one of `wallet_addresses` under one of
 * `contracts`, in any spelling of the address; false when it is not, or when that could not be
 * found out within the deadline (see `token_account_search_deadline_ms`). A contract whose accounts
 * the node fails to derive is passed over; the others are still searched. Never fails.
 */
export const isCustodyTokenAccount = (search: TokenAccountSearch): Effect.Effect<boolean> => {
  const tokenAccountOf = search.adapter.tokenAccountOf
  if (tokenAccountOf === undefined) return Effect.succeed(false)
  const { chain, destination } = search
  return Effect.gen(function* () {
    // A contract whose accounts the node failed to derive is skipped for the rest of this search,
    // not the search itself: the other contracts' accounts are still looked at.
    const failing = new Set<string>()
    for (const owner of search.wallet_addresses) {
      for (const contract of search.contracts) {
        if (failing.has(contract)) continue
        const key = `${chain} ${contract} ${owner}`
        let account = derived.get(key)
        if (account === undefined) {
          // Both are addresses the platform made and checked: a refusal here is a defect.
          const found = yield* Effect.result(Effect.sandbox(Effect.orDie(tokenAccountOf(owner, contract))))
          if (found._tag === "Failure") {
            failing.add(contract)
            continue
          }
          account = found.success
          if (derived.size >= derived_max) derived.clear()
          derived.set(key, account)
        }
        if (sameAddress(chain, account, destination)) return true
      }
    }
    return false
  }).pipe(
    Effect.timeoutOrElse({
      duration: search.deadline_ms ?? token_account_search_deadline_ms,
      orElse: () => Effect.succeed(false),
    }),
    Effect.catchCause(() => Effect.succeed(false)),
  )
}
