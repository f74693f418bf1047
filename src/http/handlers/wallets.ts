/**
 * Wallets, balances, the default wallet and the sandbox faucet.
 */
import { hash } from "node:crypto"
import { Effect } from "effect"
import { HttpServerResponse } from "effect/http"
import { HttpApiBuilder } from "effect/http-api"
import type { TokenSymbol } from "../../../domain/chains/registry.ts"
import { hasTransfer } from "../../../domain/ledger/index.ts"
import {
  chainTokens,
  isWalletChain,
  type WalletChain,
  walletChains,
} from "../../../domain/platform/tokens.ts"
import { mintTallyKey } from "../../chains/mint-tally.ts"
import {
  ensureAccounts,
  faucetAccount,
  faucetAccountId,
  ledgerOf,
  transferCodes,
  walletAccount,
  walletAccountId,
} from "../../platform/accounts.ts"
import { walletBalances, walletBalancesIn } from "../../platform/balances.ts"
import type { Caller } from "../../platform/credentials.ts"
import { inTransaction, rerun_status, storeResponse } from "../../platform/idempotency.ts"
import { idPrefixes, newId } from "../../platform/ids.ts"
import { type LedgerAttachment, lockLedgerForPartyChange } from "../../platform/payments.ts"
import { Platform } from "../../platform/service.ts"
import {
  defaultWalletId,
  insertWallet,
  listWallets,
  toWalletView,
  type WalletRow,
} from "../../platform/wallets.ts"
import { Chains } from "../../ports/chains.ts"
import { CurrentCaller, PlatformApi } from "../api.ts"
import { ApiError, badRequest, CurrentRequestId, notFound } from "../errors.ts"
import { idempotent, storedResponse } from "../idempotency.ts"
import { amount_whole_units_max, textLengths } from "../limits.ts"
import { db, listCursor, parseLimit, parseMoney, requireSandbox, respond, text, tokenOn } from "./common.ts"
import { mapLedgerErrors } from "./ledger-errors.ts"

/** The caller's wallet `wallet_id`, or a 404 (also for another tenant's or environment's wallet). */
export const callerWallet = (caller: Caller, wallet_id: string, param = "wallet_id") =>
  Effect.gen(function* () {
    const platform = yield* Platform
    const wallet =
      platform.wallets.peek(caller.tenant_id, caller.environment, wallet_id)?.row ??
      (yield* db(() => platform.wallets.get(caller.tenant_id, caller.environment, wallet_id)))
    if (wallet === undefined) return yield* notFound("wallet", wallet_id, param)
    return wallet
  })

const commandContext = (caller: Caller, request_id: string) => ({
  actor: caller.key_id,
  correlation_id: request_id,
})

/** Opens the ledger accounts of a wallet's chain tokens. */
export const openWalletAccounts = (caller: Caller, wallet: WalletRow) =>
  Effect.gen(function* () {
    const platform = yield* Platform
    const request_id = yield* CurrentRequestId
    const specs = chainTokens(wallet.chain as WalletChain).map((asset) =>
      walletAccount(wallet.wallet_id, asset),
    )
    yield* mapLedgerErrors(
      ensureAccounts(
        platform.writer,
        ledgerOf(caller.tenant_id, caller.environment),
        specs,
        commandContext(caller, request_id),
      ),
    )
  })

const createWallet = (payload: { external_id: string; label: string; chain: string }) =>
  Effect.gen(function* () {
    const caller = yield* CurrentCaller
    const platform = yield* Platform
    const external_id = yield* text(payload.external_id, "external_id", textLengths.external_id)
    const label = yield* text(payload.label, "label", textLengths.label)
    const chain = payload.chain.trim().toLowerCase()
    if (!isWalletChain(chain)) {
      return yield* badRequest(
        "unsupported_chain",
        `chain must be one of ${walletChains.join(", ")}.`,
        "chain",
      )
    }
    const result = yield* idempotent(caller, "wallets.create", payload, (ticket) =>
      db(() =>
        inTransaction(platform.pool, async (client) => {
          const { row, is_default } = await insertWallet(client, {
            wallet_id: newId(idPrefixes.wallet),
            tenant_id: caller.tenant_id,
            environment: caller.environment,
            chain,
            external_id,
            label,
            address: (index) =>
              platform.custody.addressFor(caller.environment, chain, caller.custody_index, index),
          })
          const body = toWalletView(row, is_default ? row.wallet_id : null)
          await platform.enqueue(client, [
            {
              tenant_id: caller.tenant_id,
              environment: caller.environment,
              event_type: "wallet.created",
              data: body,
              created_at: row.created_at,
            },
          ])
          if (ticket !== undefined) await storeResponse(client, storedResponse(ticket, 201, body))
          return { body, row }
        }),
      ),
    )
    if ("row" in result) {
      yield* openWalletAccounts(caller, result.row)
      return result.body
    }
    return result
  })

const getWallet = (wallet_id: string) =>
  Effect.gen(function* () {
    const caller = yield* CurrentCaller
    const { pool } = yield* Platform
    const wallet = yield* callerWallet(caller, wallet_id)
    return toWalletView(wallet, yield* db(() => defaultWalletId(pool, caller.tenant_id, caller.environment)))
  })

const balance = (wallet_id: string) =>
  Effect.gen(function* () {
    const caller = yield* CurrentCaller
    const { pool } = yield* Platform
    yield* callerWallet(caller, wallet_id)
    const tokens = yield* db(() => walletBalances(pool, caller.tenant_id, caller.environment, wallet_id))
    return { wallet_id, tokens }
  })

const makeDefault = (wallet_id: string) =>
  Effect.gen(function* () {
    const caller = yield* CurrentCaller
    const { pool } = yield* Platform
    const wallet = yield* callerWallet(caller, wallet_id)
    // The change and its stored response commit together: a key another request stored meanwhile
    // rolls the change back.
    return yield* idempotent(caller, `wallets.default.${wallet_id}`, {}, (ticket) =>
      db(() =>
        inTransaction(pool, async (client) => {
          // Under the ledger's lock: a payment from the old default not committed yet sees the
          // change and is planned again, or commits first (see lockLedgerForPartyChange).
          await lockLedgerForPartyChange(client, caller.tenant_id, caller.environment)
          await client.query(
            "update platform.tenant_environments set default_wallet_id = $3 where tenant_id = $1 and environment = $2",
            [caller.tenant_id, caller.environment, wallet_id],
          )
          const body = toWalletView(wallet, wallet_id)
          if (ticket !== undefined) await storeResponse(client, storedResponse(ticket, 200, body))
          return body
        }),
      ),
    )
  })

/** The faucet's ledger transfer id for an Idempotency-Key: a retry names the same transfer. */
const faucetTransferId = (caller: Caller, idempotency_key: string) =>
  `fct_${hash("sha256", `${caller.tenant_id}\n${caller.environment}\n${idempotency_key}`).slice(0, 32)}`

/** The longest a sandbox mint may take before the faucet answers 503 (anvil mines at once). */
const faucet_chain_deadline_ms = 20_000

const chainUnavailable = (chain: string, error: unknown) =>
  new ApiError({
    status: 503,
    code: "chain_unavailable",
    message: `The ${chain} chain cannot be reached to mint the tokens (${
      (error instanceof Error ? error.message : String(error)).split("\n")[0] ?? ""
    }); nothing was credited. Retry later.`,
  })

/**
 * Credits test funds and, where the wallet's chain runs locally, mints them on chain first.
 *
 * Mint, then credit: the ledger never owes what the chain does not hold, and a chain that cannot be
 * reached is a 503 `chain_unavailable` that wrote nothing (no credit, no stored response), so a retry
 * later does it all. A retry must not mint twice what was credited once: with an Idempotency-Key the
 * credit's transfer id comes from the key, so a retry first looks for that transfer in the ledger and,
 * when it is there, replays the credit without minting. If the mint succeeds and the credit then fails
 * (the database is down), the retry mints again and credits: the chain holds the first mint more than
 * the ledger owes, which reconciliation reports as drift on the safe side (test money no one owes),
 * never a credit the chain does not back. Without a key every request is a new credit, as before.
 */
const faucet = (payload: { wallet_id: string; token: string; amount: number | string }) =>
  Effect.gen(function* () {
    const caller = yield* CurrentCaller
    const platform = yield* Platform
    const request_id = yield* CurrentRequestId
    yield* requireSandbox(caller)
    const wallet = yield* callerWallet(caller, payload.wallet_id)
    const asset = yield* tokenOn(wallet.chain, payload.token)
    const amount = yield* parseMoney(payload.amount, asset, amount_whole_units_max.faucet)
    const ledger = ledgerOf(caller.tenant_id, caller.environment)
    const context = commandContext(caller, request_id)
    const running = (yield* Chains).get(caller.environment, wallet.chain)
    // A mint on chain counts as in flight for reconciliation until its credit is in the ledger (or
    // failed): the tokens are at the address before any ledger entry backs them.
    let mintFinished: (() => void) | undefined
    // Accounts open inside `idempotent`: a refused Idempotency-Key must not open them.
    const result = yield* idempotent(caller, "sandbox.faucet", payload, (ticket) =>
      Effect.gen(function* () {
        yield* mapLedgerErrors(
          ensureAccounts(
            platform.writer,
            ledger,
            [faucetAccount(asset), walletAccount(wallet.wallet_id, asset)],
            context,
          ),
        )
        const transfer_id =
          ticket === undefined ? newId("fct") : faucetTransferId(caller, ticket.idempotency_key)
        // A retry's credit may have been made by another process: caught up before looking.
        if (ticket !== undefined) yield* mapLedgerErrors(platform.writer.sync(ledger))
        const credited =
          ticket !== undefined && hasTransfer((yield* platform.writer.snapshot(ledger)).state, transfer_id)
        // Where the wallet's chain runs locally, the tokens exist on chain too (with gas to move them).
        if (running?.fund != null && !credited) {
          const fund = running.fund
          mintFinished = running.faucet_mints?.begin(mintTallyKey(caller.tenant_id, asset.symbol), amount)
          yield* Effect.tryPromise({
            // The deadline aborts a mint still waiting its turn: it is never sent, so nothing lands
            // on chain that the 503 says was not credited.
            try: (signal) => fund(wallet.address, asset.symbol as TokenSymbol, amount, signal),
            catch: (error) => chainUnavailable(wallet.chain, error),
          }).pipe(
            // A node that stops answering gets a deadline, not its client's retries (80 s and more).
            Effect.timeoutOrElse({
              duration: faucet_chain_deadline_ms,
              orElse: () =>
                Effect.fail(
                  chainUnavailable(
                    wallet.chain,
                    new Error(`the node did not answer within ${faucet_chain_deadline_ms / 1000} s`),
                  ),
                ),
            }),
          )
        }
        return yield* mapLedgerErrors(
          platform.writer.execute(
            ledger,
            {
              type: "CreateTransfers",
              group_id: null,
              transfers: [
                {
                  transfer_id,
                  debit_account_id: faucetAccountId(asset),
                  credit_account_id: walletAccountId(wallet.wallet_id, asset),
                  amount,
                  code: transferCodes.faucet,
                  user_data: null,
                },
              ],
              now_ms: Date.now(),
            },
            {
              ...context,
              // A retry replays in the ledger (same key, same body) and then reads the balance afresh,
              // so no response is stored: the balance of a replay is today's, not yesterday's. The key
              // is taken all the same, with the credit, so that no other endpoint uses it.
              ...(ticket === undefined
                ? {}
                : {
                    idempotency_key: `api:${ticket.idempotency_key}`,
                    fingerprint: ticket.fingerprint,
                    attachment: {
                      kind: "response",
                      stored: storedResponse(ticket, rerun_status, {}),
                    } satisfies LedgerAttachment,
                  }),
            },
          ),
        )
      }),
    ).pipe(Effect.ensuring(Effect.sync(() => mintFinished?.())))
    if (!("events" in result)) return result
    // From the writer's state, which holds the credit: the read model may lag (a long transaction
    // elsewhere in the database holds it back), and the credit is made either way.
    const { state } = yield* platform.writer.snapshot(ledger)
    const balance = { wallet_id: wallet.wallet_id, tokens: walletBalancesIn(state, wallet.wallet_id) }
    // A retry credited nothing: it answers the balance as it is now, marked as a replay.
    return result.replayed
      ? HttpServerResponse.jsonUnsafe(balance, { headers: { "idempotent-replayed": "true" } })
      : balance
  })

export const WalletsHandlers = HttpApiBuilder.group(PlatformApi, "wallets", (handlers) =>
  Effect.succeed(
    handlers
      .handle("create", ({ payload }) => respond(createWallet(payload)))
      .handle("list", ({ query }) =>
        respond(
          Effect.gen(function* () {
            const caller = yield* CurrentCaller
            const { pool } = yield* Platform
            const limit = yield* parseLimit(query.limit)
            const starting_after = yield* listCursor(pool, "wallets", caller, query.starting_after)
            return yield* db(() =>
              listWallets(pool, caller.tenant_id, caller.environment, {
                external_id: query.external_id,
                starting_after,
                limit,
              }),
            )
          }),
        ),
      )
      .handle("get", ({ params }) => respond(getWallet(params.wallet_id)))
      .handle("balance", ({ params }) => respond(balance(params.wallet_id)))
      .handle("makeDefault", ({ params }) => respond(makeDefault(params.wallet_id))),
  ),
)

export const faucetResponse = faucet
