/**
 * On-chain transfers from a custody wallet to an address (`POST /api/v2/transfers`) and their status
 * (`GET /api/v2/transfers/{id}`). The request reserves amount + fee in the ledger and records the
 * send job in one transaction (src/transfers/request.ts); the transfer worker signs, broadcasts,
 * confirms and settles it, and `payment.completed` / `payment.failed` tell the tenant.
 */
import { isOffCurveAddress, address as solanaAddress } from "@solana/kit"
import { Cause, Effect } from "effect"
import { HttpServerRequest, HttpServerResponse } from "effect/http"
import { HttpApiBuilder } from "effect/http-api"
import type pg from "pg"
import { assert, assertNever } from "../../../domain/assert.ts"
import { chainFamily, tronSpellingOfEvm } from "../../../domain/custody/derive.ts"
import { paymentFee } from "../../../domain/ledger/fee.ts"
import { available } from "../../../domain/ledger/invariants.ts"
import { formatAmount } from "../../../domain/money/amount.ts"
import type { Asset } from "../../../domain/money/asset.ts"
import type { Environment } from "../../../domain/platform/scopes.ts"
import { isWalletChain, type WalletChain, walletChains } from "../../../domain/platform/tokens.ts"
import { toPage } from "../../db/page.ts"
import { ledgerOf, walletAccountId } from "../../platform/accounts.ts"
import type { Caller } from "../../platform/credentials.ts"
import { Platform } from "../../platform/service.ts"
import { getPayment } from "../../platform/transactions.ts"
import type { ChainAdapter } from "../../ports/chain.ts"
import { Chains } from "../../ports/chains.ts"
import {
  fromDb,
  type TransferRow,
  toPublicTransfer,
  type UnusableDestination,
} from "../../transfers/model.ts"
import { type RequestError, requestTransfer, transferByIdempotencyKey } from "../../transfers/request.ts"
import { chainRoutes } from "../../transfers/routes.ts"
import { isCustodyTokenAccount } from "../../transfers/token-accounts.ts"
import { verifyTransfer } from "../../transfers/verify.ts"
import { CurrentCaller, PlatformApi } from "../api.ts"
import { ApiError, badRequest, CurrentRequestId, notFound, unprocessable } from "../errors.ts"
import { idempotent, storedResponse } from "../idempotency.ts"
import { amount_whole_units_max } from "../limits.ts"
import { checkMetadata, db, listCursor, parseLimit, parseMoney, respond, tokenOn } from "./common.ts"
import { ledgerApiError } from "./ledger-errors.ts"
import { callerWallet } from "./wallets.ts"

interface TransferPayload {
  readonly from_wallet: string
  readonly to_address: string
  readonly amount: number | string
  readonly token: string
  readonly chain: string
  readonly metadata?: Readonly<Record<string, string>> | undefined
}

/** A destination where the tokens would be lost, or would not move: 422, with what it is. */
const unusableDestination = (error: UnusableDestination): ApiError => {
  switch (error.reason) {
    case "own_address":
      return unprocessable(
        "same_address",
        "to_address is the sending wallet's own address: a transfer there moves nothing and costs the fee.",
        "to_address",
      )
    case "token_contract":
      return unprocessable(
        "token_contract_address",
        `to_address is a token contract, mint or token program on ${error.chain}, not an owner's address: tokens sent there cannot be recovered.`,
        "to_address",
      )
    case "program_address":
      return unprocessable(
        "program_address",
        `to_address is one of ${error.chain}'s native programs or sysvars, an account of the runtime that no one signs for: tokens sent there cannot be recovered.`,
        "to_address",
      )
    case "null_address":
      return unprocessable(
        "null_address",
        `to_address is the null address of ${error.chain}: tokens sent there are burned.`,
        "to_address",
      )
    case "other_workchain":
      return unprocessable(
        "masterchain_address",
        "to_address is in TON's masterchain (-1:...): wallets and jettons live in the basechain (0:...), and a transfer there reverts after paying its gas.",
        "to_address",
      )
    default:
      return assertNever(error.reason)
  }
}

/** The one table from the transfer flow's errors to API errors. */
const transferApiError = (error: RequestError): Effect.Effect<never, ApiError> => {
  switch (error._tag) {
    case "InvalidDestinationAddress":
      return Effect.fail(
        badRequest("invalid_address", `to_address is not an address on ${error.chain}.`, "to_address"),
      )
    case "UnusableDestination":
      return Effect.fail(unusableDestination(error))
    case "TransferAmountNotPositive":
      return Effect.fail(badRequest("amount_zero", "amount must be greater than zero.", "amount"))
    case "UnsupportedChain":
      return Effect.fail(
        badRequest("chain_unavailable", `Transfers on ${error.chain}: ${error.reason}.`, "chain"),
      )
    default: {
      const mapped = ledgerApiError(error)
      return mapped === undefined ? Effect.die(error) : Effect.fail(mapped)
    }
  }
}

/** The wallet's key path (tenant custody index, wallet derivation index), checked against its address. */
const walletKeyPath = (caller: Caller, wallet: { wallet_id: string; address: string }, chain: WalletChain) =>
  Effect.gen(function* () {
    const platform = yield* Platform
    const found = yield* db(() =>
      platform.pool.query<{ derivation_index: number }>(
        "select derivation_index from platform.wallets where wallet_id = $1",
        [wallet.wallet_id],
      ),
    )
    const wallet_index = found.rows[0]?.derivation_index
    assert(wallet_index !== undefined, "a wallet the caller owns has its row")
    const address = yield* db(() =>
      platform.custody.addressFor(caller.environment, chain, caller.custody_index, wallet_index),
    )
    assert(address === wallet.address, "a wallet's address derives from its key path")
    return { tenant_index: caller.custody_index, wallet_index }
  })

/**
 * A repeated request's answer: the transfer as it is now (its status may have moved on since the
 * first answer, which is what a client polling with retries wants), marked as a replay.
 */
const replayedTransfer = (row: TransferRow) =>
  HttpServerResponse.jsonUnsafe(toPublicTransfer(row), {
    status: 202,
    headers: { "idempotent-replayed": "true" },
  })

/**
 * A custody address of the platform on another chain or in the other environment, spelled for this
 * chain: on an EVM chain, another EVM chain's (the same 0x... spelling is valid on every EVM chain)
 * or a Tron wallet's in its 0x spelling (one key's account); on every chain, a wallet of this chain
 * in the other environment (sandbox and production chains are separate). The tokens would land
 * where no wallet of this chain and environment is watched, credited to no one and reported by no
 * reconciliation. Outside EVM the destination is in its canonical spelling (as wallets store
 * theirs), compared exactly: base58 and TON's forms are case-sensitive.
 */
const refuseOtherChainCustody = (
  pool: pg.Pool,
  environment: Environment,
  chain: WalletChain,
  to_address: string,
) =>
  Effect.gen(function* () {
    const found = yield* db(() =>
      chainFamily(chain) === "evm"
        ? pool.query<{ chain: string; environment: string }>(
            `select chain, environment from platform.wallets
              where (lower(address) = lower($1) and (chain <> $2 or environment <> $3))
                 or (lower(address) = lower($4) and address = $4)
              limit 1`,
            [to_address, chain, environment, tronSpellingOfEvm(to_address)],
          )
        : pool.query<{ chain: string; environment: string }>(
            `select chain, environment from platform.wallets
              where lower(address) = lower($1) and address = $1 and chain = $2 and environment <> $3
              limit 1`,
            [to_address, chain, environment],
          ),
    )
    const other = found.rows[0]
    if (other === undefined) return
    const where = other.chain === chain ? `in ${other.environment}` : `on ${other.chain}`
    const here = other.chain === chain ? `in ${environment}` : `on ${chain}`
    return yield* unprocessable(
      "custody_address_other_chain",
      `${to_address} is a wallet of the platform ${where}, not ${here}: tokens sent to it on ${chain} in ${environment} would be credited to no wallet. Send from a wallet ${where}, or to the address of a wallet ${here}.`,
      "to_address",
    )
  })

/**
 * A destination that is where one of the platform's wallets keeps its tokens rather than the wallet
 * itself: Solana's associated token account (an off-curve address, so no key signs for it) or TON's
 * jetton wallet (a contract that only its owner's messages move), created or not. A transfer to it
 * would credit no wallet, and the tokens would be held by an account that can never send them:
 * lost. Each wallet's token accounts come from the chain's adapter (`tokenAccountOf`); chains that
 * keep tokens at the owner's address have none. On Solana only an off-curve destination is looked
 * into: a wallet's own address is on the curve.
 */
const refuseCustodyTokenAccount = (
  pool: pg.Pool,
  environment: Environment,
  chain: WalletChain,
  to_address: string,
  adapter: ChainAdapter,
  contracts: ReadonlyArray<string>,
) =>
  Effect.gen(function* () {
    if (adapter.tokenAccountOf === undefined) return
    const family = chainFamily(chain)
    if (family === "solana" && !isOffCurveAddress(solanaAddress(to_address))) return
    const wallets = yield* db(() =>
      pool.query<{ address: string }>(
        "select address from platform.wallets where chain = $1 and environment = $2",
        [chain, environment],
      ),
    )
    const found = yield* isCustodyTokenAccount({
      chain,
      adapter,
      wallet_addresses: wallets.rows.map((wallet) => wallet.address),
      contracts,
      destination: to_address,
    })
    if (!found) return
    return yield* unprocessable(
      "token_account_address",
      family === "ton"
        ? `${to_address} is the jetton wallet of a wallet of the platform (the contract that keeps that wallet's jettons, moved only by its owner): jettons sent to it would belong to no one. Send to the wallet's own address.`
        : `${to_address} is the token account of a wallet of the platform (it keeps that wallet's tokens, and no key signs for it): tokens sent to it would belong to no one. Send to the wallet's own address.`,
      "to_address",
    )
  })

/** Whether `tx_hash` is in a block (confirmed, final or reverted); no answer in time counts as no. */
const landed = (adapter: ChainAdapter, tx_hash: string) =>
  adapter.transactionStatus(tx_hash).pipe(
    Effect.map((status) => status.status !== "seen" && status.status !== "dropped"),
    Effect.timeoutOrElse({ duration: 5_000, orElse: () => Effect.succeed(false) }),
    Effect.catchCause(() => Effect.succeed(false)),
  )

/** How long the on-chain balance read before a transfer may take; past it, the worker decides. */
const balance_read_deadline_ms = 10_000

/**
 * What the sending address holds on chain, less what its pending transfers not yet in a block are
 * sending, must cover
 * the amount. The ledger balance can be larger: a social payment moves money in the ledger only, so
 * what other wallets paid this one stays at their addresses on chain. Without this check such a
 * transfer was accepted (202) and then failed on chain (would_revert). A balance that cannot be read
 * in time lets the transfer through, as before.
 */
const refuseOnChainShortfall = (
  pool: pg.Pool,
  /** The wallet's available ledger balance: when it is short too, that is the refusal to give. */
  ledgerAvailable: Effect.Effect<bigint>,
  adapter: ChainAdapter,
  wallet: { readonly wallet_id: string; readonly address: string },
  token: { readonly asset: Asset; readonly contract: string },
  amount: bigint,
) =>
  Effect.gen(function* () {
    const pending = yield* db(() =>
      pool.query<{ amount: string; tx_hash: string | null; replacement_tx_hash: string | null }>(
        `select amount::text as amount, tx_hash, replacement_tx_hash from platform.chain_transfers
         where wallet_id = $1 and token = $2 and status = 'pending'`,
        [wallet.wallet_id, token.asset.code],
      ),
    )
    // A pending transfer already in a block (waiting for its confirmations) has left the balance
    // read below: only those still to land are taken off it. Read before the balance, so that one
    // landing in between is counted twice (a refusal) rather than not at all.
    const stillToLand = yield* Effect.forEach(
      pending.rows,
      (row) =>
        Effect.map(
          Effect.forEach(
            [row.tx_hash, row.replacement_tx_hash].filter((hash): hash is string => hash !== null),
            (hash) => landed(adapter, hash),
          ),
          (answers) => (answers.some(Boolean) ? 0n : BigInt(row.amount)),
        ),
      { concurrency: 4 },
    )
    const sending = stillToLand.reduce((sum, amount) => sum + amount, 0n)
    const held = yield* adapter.balance(wallet.address, { kind: "token", contract: token.contract }).pipe(
      Effect.map((balance): bigint | undefined => balance),
      Effect.timeoutOrElse({ duration: balance_read_deadline_ms, orElse: () => Effect.succeed(undefined) }),
      // A node that fails (refuses connections, errs) lets the request through like one that is
      // slow: the adapters' node errors are defects, not typed failures.
      Effect.catchCause((cause) =>
        Cause.hasInterruptsOnly(cause) ? Effect.interrupt : Effect.succeed(undefined),
      ),
    )
    if (held === undefined) return
    if (held - sending >= amount) return
    const units = (minor: bigint) => formatAmount(minor, token.asset.decimals)
    // The ledger would refuse it anyway, and for the plainer reason: say that one.
    if ((yield* ledgerAvailable) < amount + paymentFee(amount)) {
      return yield* unprocessable(
        "insufficient_funds",
        "The paying wallet's available balance does not cover the amount and its fee.",
        "amount",
      )
    }
    return yield* unprocessable(
      "onchain_balance_short",
      `Wallet ${wallet.wallet_id} holds ${units(held)} ${token.asset.symbol} at its address on chain${
        sending > 0n ? `, ${units(sending)} of it already being sent` : ""
      }; this transfer needs ${units(amount)}. Its ledger balance may be larger: money it received by social payment stays at the payer's address on chain, so only what reached its own address (faucet, deposits) can be sent from it.`,
      "amount",
    )
  })

const createTransfer = (payload: TransferPayload) =>
  Effect.gen(function* () {
    const caller = yield* CurrentCaller
    const platform = yield* Platform
    const chains = yield* Chains
    const request_id = yield* CurrentRequestId
    const chain = payload.chain.trim().toLowerCase()
    if (!isWalletChain(chain)) {
      return yield* badRequest(
        "unsupported_chain",
        `chain must be one of ${walletChains.join(", ")}.`,
        "chain",
      )
    }
    const wallet = yield* callerWallet(caller, payload.from_wallet, "from_wallet")
    if (wallet.chain !== chain) {
      return yield* badRequest(
        "chain_mismatch",
        `Wallet ${wallet.wallet_id} is on ${wallet.chain}, not ${JSON.stringify(payload.chain)}.`,
        "chain",
      )
    }
    const asset = yield* tokenOn(chain, payload.token)
    const amount = yield* parseMoney(payload.amount, asset, amount_whole_units_max.transfer)
    const metadata = payload.metadata ?? {}
    yield* checkMetadata(metadata)
    const key_path = yield* walletKeyPath(caller, wallet, chain)
    const to_address = payload.to_address.trim()
    const ledger = ledgerOf(caller.tenant_id, caller.environment)
    // The chain is asked for once a retry has had its stored response: a retry that reaches a
    // process not running the chain (the sandbox's run in one process) still answers its transfer.
    const runningChain = Effect.suspend(() => {
      const running = chains.get(caller.environment, chain)
      const contract = running?.contracts.get(asset.symbol as "USDC" | "USDT")
      return running === undefined || contract === undefined
        ? badRequest(
            "chain_unavailable",
            `On-chain transfers of ${asset.symbol} on ${chain} are not available in ${caller.environment} on this platform process.`,
            "chain",
          )
        : Effect.succeed({ running, contract })
    })
    const answer = yield* idempotent(caller, "transfers.create", payload, (ticket) =>
      Effect.flatMap(runningChain, ({ running, contract }) =>
        requestTransfer(
          {
            writer: platform.writer,
            pool: platform.pool,
            routes: chainRoutes({ [caller.environment]: new Map([[chain, running.adapter]]) }),
            // Once the destination is known valid, before anything is reserved.
            preflight: (destination) =>
              Effect.andThen(
                Effect.andThen(
                  refuseOtherChainCustody(platform.pool, caller.environment, chain, destination),
                  () =>
                    refuseCustodyTokenAccount(
                      platform.pool,
                      caller.environment,
                      chain,
                      destination,
                      running.adapter,
                      [...running.contracts.values()],
                    ),
                ),
                () =>
                  refuseOnChainShortfall(
                    platform.pool,
                    // Caught up first (another process may have paid the wallet since this one
                    // last read the ledger); should that fail, it names what this process knows.
                    Effect.map(
                      Effect.andThen(
                        Effect.ignore(platform.writer.sync(ledger)),
                        platform.writer.snapshot(ledger),
                      ),
                      ({ state }) => {
                        const account = state.accounts.get(walletAccountId(wallet.wallet_id, asset))
                        return account === undefined ? 0n : available(account)
                      },
                    ),
                    running.adapter,
                    wallet,
                    { asset, contract },
                    amount,
                  ),
              ),
          },
          {
            tenant_id: caller.tenant_id,
            environment: caller.environment,
            wallet: { wallet_id: wallet.wallet_id, chain, address: wallet.address, ...key_path },
            to_address,
            other_contracts: [...running.contracts.values()],
            amount,
            token: { asset, contract },
            metadata,
            // The ledger keeps the key with the reservation: a retry answers the transfer as it is now.
            idempotency_key: ticket?.idempotency_key ?? null,
            // Stored with the transfer: the key is then taken for every endpoint of the tenant.
            storedResponse:
              ticket === undefined ? undefined : (row) => storedResponse(ticket, 202, toPublicTransfer(row)),
            actor: caller.key_id,
            correlation_id: request_id,
            now_ms: Date.now(),
          },
        ).pipe(
          Effect.catch((error) => (error instanceof ApiError ? Effect.fail(error) : transferApiError(error))),
        ),
      ),
    )
    if (!HttpServerResponse.isHttpServerResponse(answer)) {
      return answer.replayed ? replayedTransfer(answer.row) : toPublicTransfer(answer.row)
    }
    // `idempotent` replayed the stored first response: answer the transfer as it is now instead.
    const key = (yield* HttpServerRequest.HttpServerRequest).headers["idempotency-key"]
    assert(key !== undefined, "only a request with an Idempotency-Key is replayed")
    return replayedTransfer(yield* db(() => transferByIdempotencyKey(platform.pool, caller, key)))
  })

const getTransfer = (transfer_id: string) =>
  Effect.gen(function* () {
    const caller = yield* CurrentCaller
    const { pool } = yield* Platform
    const found = yield* db(() =>
      pool.query(
        "select * from platform.chain_transfers where transfer_id = $1 and tenant_id = $2 and environment = $3",
        [transfer_id, caller.tenant_id, caller.environment],
      ),
    )
    const row = found.rows[0]
    if (row !== undefined) return toPublicTransfer(fromDb(row))
    // A social payment's id is a transaction id too: say where it is, as its endpoint does back.
    const payment = yield* db(() =>
      pool.query(
        "select 1 from platform.payments where transaction_id = $1 and tenant_id = $2 and environment = $3",
        [transfer_id, caller.tenant_id, caller.environment],
      ),
    )
    const missing = notFound("transfer", transfer_id, "transfer_id")
    if (payment.rows.length === 0) return yield* missing
    return yield* new ApiError({
      ...missing,
      message: `${transfer_id} is a social payment, not an on-chain transfer: GET /api/v1/transactions/${transfer_id} shows it.`,
    })
  })

const transferStatuses = ["pending", "completed", "failed"] as const

const listTransfers = (query: {
  readonly limit?: string | undefined
  readonly starting_after?: string | undefined
  readonly wallet_id?: string | undefined
  readonly status?: string | undefined
}) =>
  Effect.gen(function* () {
    const caller = yield* CurrentCaller
    const { pool } = yield* Platform
    const limit = yield* parseLimit(query.limit)
    if (query.status !== undefined && !(transferStatuses as ReadonlyArray<string>).includes(query.status)) {
      return yield* badRequest(
        "invalid_status",
        `status must be one of ${transferStatuses.join(", ")}.`,
        "status",
      )
    }
    if (query.wallet_id !== undefined) yield* callerWallet(caller, query.wallet_id)
    const starting_after = yield* listCursor(pool, "transfers", caller, query.starting_after)
    const found = yield* db(() =>
      pool.query(
        `select * from platform.chain_transfers
          where tenant_id = $1 and environment = $2
            and ($3::text is null or wallet_id = $3)
            and ($4::text is null or status = $4)
            and ($5::text is null or transfer_id < $5)
          order by transfer_id desc limit $6`,
        [
          caller.tenant_id,
          caller.environment,
          query.wallet_id ?? null,
          query.status ?? null,
          starting_after ?? null,
          limit + 1,
        ],
      ),
    )
    return toPage(
      found.rows,
      limit,
      (row) => toPublicTransfer(fromDb(row)),
      (transfer) => transfer.transaction_id,
    )
  })

/**
 * Re-reads a sent transfer from its chain (src/transfers/verify.ts). A social payment never touches
 * a chain, so it has nothing to verify (422); an id the caller does not own is unknown (404).
 */
const verifyTransaction = (transaction_id: string) =>
  Effect.gen(function* () {
    const caller = yield* CurrentCaller
    const { pool } = yield* Platform
    const chains = yield* Chains
    const found = yield* db(() =>
      pool.query(
        "select * from platform.chain_transfers where transfer_id = $1 and tenant_id = $2 and environment = $3",
        [transaction_id, caller.tenant_id, caller.environment],
      ),
    )
    const stored = found.rows[0]
    if (stored === undefined) {
      const payment = yield* db(() => getPayment(pool, caller.tenant_id, caller.environment, transaction_id))
      if (payment === undefined) return yield* notFound("transaction", transaction_id, "transaction_id")
      return yield* unprocessable(
        "not_on_chain",
        `Transaction ${transaction_id} is a social payment settled in the ledger alone; no chain holds it to verify.`,
        "transaction_id",
      )
    }
    const row = fromDb(stored)
    // Signed but never handed to a node (dropped before its broadcast: a blockhash that expired,
    // the sandbox's chains started anew) is never broadcast too.
    const never_sent =
      row.tx_hash === null || (row.broadcast_attempted_at === null && row.broadcast_at === null)
    if (row.status === "failed" && never_sent) {
      return yield* unprocessable(
        "never_broadcast",
        `Transaction ${transaction_id} failed (${row.failure_code}) before it was broadcast; nothing was sent to ${row.chain}, so there is nothing on chain to verify.`,
        "transaction_id",
      )
    }
    if (row.tx_hash === null) {
      return yield* unprocessable(
        "not_broadcast",
        `Transaction ${transaction_id} has not been signed for its chain yet; verify it once it has a tx_hash.`,
        "transaction_id",
      )
    }
    const running = chains.get(row.environment, row.chain)
    if (running === undefined) {
      return yield* unprocessable(
        "chain_unavailable",
        `No adapter reaches ${row.chain} in ${row.environment} to verify transaction ${transaction_id}.`,
        "transaction_id",
      )
    }
    return yield* verifyTransfer(running, row).pipe(
      Effect.timeoutOrElse({
        duration: verify_read_deadline_ms,
        orElse: () => Effect.die(new Error(`no answer within ${verify_read_deadline_ms} ms`)),
      }),
      Effect.catchCause((cause) =>
        Cause.hasInterruptsOnly(cause)
          ? Effect.interrupt
          : Effect.logWarning("verify: the chain could not be read", Cause.pretty(cause)).pipe(
              Effect.annotateLogs({ chain: row.chain, environment: row.environment, transaction_id }),
              Effect.andThen(
                Effect.fail(
                  new ApiError({
                    status: 503,
                    code: "chain_unavailable",
                    message: `The ${row.chain} chain cannot be read just now to verify transaction ${transaction_id}; retry later.`,
                    headers: { "retry-after": "5" },
                  }),
                ),
              ),
            ),
      ),
    )
  })

/** How long a verification may wait for its chain's node; past it, 503 `chain_unavailable`. */
const verify_read_deadline_ms = 10_000

export const TransfersHandlers = HttpApiBuilder.group(PlatformApi, "transfers", (handlers) =>
  Effect.succeed(
    handlers
      .handle("create", ({ payload }) => respond(createTransfer(payload)))
      .handle("list", ({ query }) => respond(listTransfers(query)))
      .handle("get", ({ params }) => respond(getTransfer(params.transfer_id)))
      .handle("verify", ({ params }) => respond(verifyTransaction(params.transaction_id))),
  ),
)
