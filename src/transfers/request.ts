/**
 * Requesting an on-chain transfer: validate, then ONE ledger command that reserves amount + fee
 * (a linked group of pending transfers: wallet -> custody `amount`, wallet -> fee revenue `fee`).
 * The transfer row and the job that signs and broadcasts it commit in the same transaction (the
 * writer's hook, see hook.ts), so the answer `pending` means: the funds are held and the send will
 * happen, whatever crashes next.
 */
import { Effect } from "effect"
import type pg from "pg"
import { assert } from "../../domain/assert.ts"
import {
  type CustodyChain,
  canonicalAddress,
  chainFamily,
  isNullAddress,
  sameAddress,
  tonWorkchain,
} from "../../domain/custody/derive.ts"
import { paymentFee, paymentTransfers } from "../../domain/ledger/fee.ts"
import type { Asset } from "../../domain/money/asset.ts"
import type { Environment } from "../../domain/platform/scopes.ts"
import type { LedgerWriterService, WriterError } from "../ledger/writer.ts"
import {
  ensureAccounts,
  feeAccount,
  feeAccountId,
  ledgerOf,
  transferCodes,
  walletAccount,
  walletAccountId,
} from "../platform/accounts.ts"
import type { StoredResponse } from "../platform/idempotency.ts"
import { newId } from "../platform/ids.ts"
import type { TransferAttachment } from "./hook.ts"
import {
  chain_transfer_code,
  custodyAccount,
  custodyAccountId,
  fromDb,
  InvalidDestinationAddress,
  ledgerIds,
  TransferAmountNotPositive,
  type TransferRow,
  UnsupportedChain,
  UnusableDestination,
} from "./model.ts"
import { adapterFor, type ChainRoutes } from "./routes.ts"

/** The custody wallet that sends: its ledger id, chain address and the key path that signs for it. */
export interface SourceWallet {
  readonly wallet_id: string
  readonly chain: CustodyChain
  readonly address: string
  readonly tenant_index: number
  readonly wallet_index: number
}

/** The token sent: its ledger asset and its contract on the chain. */
export interface TransferToken {
  readonly asset: Asset
  readonly contract: string
}

export interface TransferRequest {
  readonly tenant_id: string
  readonly environment: Environment
  readonly wallet: SourceWallet
  readonly to_address: string
  /** The chain's other token contracts (or mints): no destination either. */
  readonly other_contracts?: ReadonlyArray<string>
  /** In the token's smallest unit; the fee (0.3 %) is charged on top. */
  readonly amount: bigint
  readonly token: TransferToken
  /** Carried with the transfer into its API answers and webhooks; {} when absent. */
  readonly metadata?: Readonly<Record<string, string>> | undefined
  readonly idempotency_key: string | null
  /**
   * The API response to store under the idempotency key (platform.idempotency_keys) in the
   * transaction that records the transfer, so that the key is taken for every other endpoint too.
   */
  readonly storedResponse?: ((row: TransferRow) => StoredResponse) | undefined
  readonly actor: string
  readonly correlation_id: string
  readonly now_ms: number
}

export interface RequestDeps<E = never> {
  readonly writer: LedgerWriterService
  readonly pool: pg.Pool
  /** The adapters a worker sends with, per environment: a chain without one here is refused. */
  readonly routes: ChainRoutes
  /**
   * The caller's own checks of a request whose destination is valid (given in its canonical
   * spelling), before anything is reserved: its failure refuses the transfer.
   */
  readonly preflight?: (to_address: string) => Effect.Effect<void, E>
}

/** The transfer's row, and whether an earlier request with the same idempotency key recorded it. */
export interface RequestedTransfer {
  readonly row: TransferRow
  readonly replayed: boolean
}

export type RequestError =
  | InvalidDestinationAddress
  | UnusableDestination
  | TransferAmountNotPositive
  | UnsupportedChain
  | WriterError

/**
 * Solana's token, token-2022, associated-token-account and memo programs: an account "owned" by one
 * of them is one nobody can sign for. (The system program is the null account.)
 */
const solana_program_addresses = [
  "TokenkegQfeZyiNwAJbNbGKPFXCWuBvf9Ss623VQ5DA",
  "TokenzQdBNbLqP5VEhdkAS6EPFLC1PHnBqCXEpPxuEb",
  "ATokenGPvbdGVxr1b2hvZbsiqW5xWH25efTNsLJA8knL",
  "MemoSq4gqABAXKb96qnH8TysNcWxMyWCqXgDLGmfcHr",
]

/**
 * Solana's native programs and sysvars: accounts of the runtime, which no one signs for either.
 * Tokens sent to one land in a token account it owns and are lost.
 */
const solana_runtime_addresses = [
  "Vote111111111111111111111111111111111111111",
  "Stake11111111111111111111111111111111111111",
  "Config1111111111111111111111111111111111111",
  "NativeLoader1111111111111111111111111111111",
  "BPFLoader1111111111111111111111111111111111",
  "BPFLoader2111111111111111111111111111111111",
  "BPFLoaderUpgradeab1e11111111111111111111111",
  "ComputeBudget111111111111111111111111111111",
  "AddressLookupTab1e1111111111111111111111111",
  "Ed25519SigVerify111111111111111111111111111",
  "KeccakSecp256k11111111111111111111111111111",
  "Sysvar1111111111111111111111111111111111111",
  "SysvarC1ock11111111111111111111111111111111",
  "SysvarEpochRewards1111111111111111111111111",
  "SysvarEpochSchedu1e111111111111111111111111",
  "SysvarFees111111111111111111111111111111111",
  "Sysvar1nstructions1111111111111111111111111",
  "SysvarLastRestartS1ot1111111111111111111111",
  "SysvarRecentB1ockHashes11111111111111111111",
  "SysvarRent111111111111111111111111111111111",
  "SysvarRewards111111111111111111111111111111",
  "SysvarS1otHashes111111111111111111111111111",
  "SysvarS1otHistory11111111111111111111111111",
  "SysvarStakeHistory1111111111111111111111111",
]

/** Checks the request; answers the destination in its canonical spelling (EVM: EIP-55 checksummed). */
const validate = (
  deps: RequestDeps<unknown>,
  request: TransferRequest,
): Effect.Effect<string, RequestError> => {
  const { chain } = request.wallet
  if (adapterFor(deps.routes, request.environment, chain) === undefined)
    return Effect.fail(
      new UnsupportedChain({ chain, reason: `no adapter sends on this chain in ${request.environment}` }),
    )
  if (request.token.asset.chain !== chain)
    return Effect.fail(
      new UnsupportedChain({ chain, reason: `the token ${request.token.asset.code} is not on it` }),
    )
  if (request.amount <= 0n) return Effect.fail(new TransferAmountNotPositive({ amount: request.amount }))
  const to_address = canonicalAddress(chain, request.to_address)
  if (to_address === null)
    return Effect.fail(new InvalidDestinationAddress({ chain, address: request.to_address }))
  const unusable = (reason: UnusableDestination["reason"]) =>
    Effect.fail(new UnusableDestination({ chain, address: to_address, reason }))
  if (sameAddress(chain, to_address, request.wallet.address)) return unusable("own_address")
  const contracts = [request.token.contract, ...(request.other_contracts ?? [])]
  if (chainFamily(chain) === "solana") contracts.push(...solana_program_addresses)
  if (contracts.some((contract) => sameAddress(chain, to_address, contract)))
    return unusable("token_contract")
  if (
    chainFamily(chain) === "solana" &&
    solana_runtime_addresses.some((runtime) => sameAddress(chain, to_address, runtime))
  )
    return unusable("program_address")
  if (isNullAddress(chain, to_address)) return unusable("null_address")
  // Jetton wallets exist in the basechain only: a masterchain recipient's transfer reverts.
  if (chainFamily(chain) === "ton" && tonWorkchain(to_address) !== 0) return unusable("other_workchain")
  return Effect.succeed(to_address)
}

const newRow = (request: TransferRequest, transfer_id: string): TransferRow => ({
  transfer_id,
  tenant_id: request.tenant_id,
  environment: request.environment,
  wallet_id: request.wallet.wallet_id,
  chain: request.wallet.chain,
  token: request.token.asset.code,
  token_decimals: request.token.asset.decimals,
  token_contract: request.token.contract,
  from_address: request.wallet.address,
  key_tenant_index: request.wallet.tenant_index,
  key_wallet_index: request.wallet.wallet_index,
  to_address: request.to_address,
  amount: request.amount,
  fee: paymentFee(request.amount),
  status: "pending",
  raw_transaction: null,
  tx_hash: null,
  nonce: null,
  broadcast_at: null,
  broadcast_attempted_at: null,
  replacement_raw_transaction: null,
  replacement_tx_hash: null,
  poll_count: 0,
  proof: null,
  failure_code: null,
  failure_message: null,
  idempotency_key: request.idempotency_key,
  metadata: request.metadata ?? {},
  created_at: new Date(request.now_ms),
  completed_at: null,
  failed_at: null,
})

/**
 * The transfer an idempotency key recorded, as it is now.
 * @example await transferByIdempotencyKey(pool, { tenant_id, environment }, "order-1") // { transfer_id: "txn_...", ... }
 */
export const transferByIdempotencyKey = async (
  pool: pg.Pool,
  scope: { readonly tenant_id: string; readonly environment: string },
  idempotency_key: string,
): Promise<TransferRow> => {
  const found = await pool.query(
    "select * from platform.chain_transfers where tenant_id = $1 and environment = $2 and idempotency_key = $3",
    [scope.tenant_id, scope.environment, idempotency_key],
  )
  const row = found.rows[0]
  assert(row !== undefined, "a replayed transfer request has its row: both committed together")
  return fromDb(row)
}

/**
 * Reserves the funds and records the transfer with its send job; answers the `pending` row. The same
 * idempotency key answers the first request's row (as it is now, `replayed`) and reserves nothing
 * more. The destination is stored (and later signed) in its canonical spelling.
 * @example
 * const { row } = await Effect.runPromise(requestTransfer(deps, { ..., amount: 1_000_000n, to_address: "0x..." }))
 * // row.status === "pending"; the worker (worker.ts) settles it
 */
export const requestTransfer = <E = never>(
  deps: RequestDeps<E>,
  requested: TransferRequest,
): Effect.Effect<RequestedTransfer, RequestError | E> =>
  Effect.gen(function* () {
    const request: TransferRequest = { ...requested, to_address: yield* validate(deps, requested) }
    if (deps.preflight !== undefined) yield* deps.preflight(request.to_address)
    const asset = request.token.asset
    const ledger = ledgerOf(request.tenant_id, request.environment)
    const context = { actor: request.actor, correlation_id: request.correlation_id }
    yield* ensureAccounts(
      deps.writer,
      ledger,
      [walletAccount(request.wallet.wallet_id, asset), feeAccount(asset), custodyAccount(asset)],
      context,
    )
    const transfer_id = newId("txn", request.now_ms)
    const ids = ledgerIds(transfer_id)
    const row = newRow(request, transfer_id)
    const command = paymentTransfers({
      group_id: transfer_id,
      payment_transfer_id: ids.amount,
      fee_transfer_id: ids.fee,
      payer_account_id: walletAccountId(request.wallet.wallet_id, asset),
      payee_account_id: custodyAccountId(asset),
      fee_account_id: feeAccountId(asset),
      amount: request.amount,
      code: chain_transfer_code,
      fee_code: transferCodes.fee,
      user_data: transfer_id,
      // Never lapses by time: only the worker's verdict releases it. Once signed, the transaction may
      // land however long its node is away, and a lapse would hand the funds back for a second use.
      pending: { timeout_ms: 0 },
      now_ms: request.now_ms,
    })
    const attachment: TransferAttachment = {
      kind: "chain_transfer_requested",
      row,
      stored: request.storedResponse?.(row),
    }
    const key = request.idempotency_key === null ? null : `chain-transfer:${request.idempotency_key}`
    const result = yield* deps.writer.execute(ledger, command, {
      ...context,
      idempotency_key: key,
      // The transfer id is new on every request: the request body, not the command, says "the same".
      fingerprint: JSON.stringify([
        request.wallet.wallet_id,
        asset.code,
        request.to_address,
        String(request.amount),
        // Keys sorted: two spellings of one object are the same request. Without metadata, the
        // fingerprint is what it was before transfers took any (a retry across the upgrade).
        ...(Object.keys(request.metadata ?? {}).length === 0
          ? []
          : [Object.entries(request.metadata ?? {}).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))]),
      ]),
      attachment,
    })
    if (!result.replayed) return { row, replayed: false }
    const first = yield* Effect.promise(() =>
      transferByIdempotencyKey(deps.pool, request, request.idempotency_key ?? ""),
    )
    return { row: first, replayed: true }
  })
