/**
 * The transfer worker: pg-boss jobs that sign, broadcast, confirm and settle on-chain transfers.
 * One job runs one step of one transfer and is safe to run twice, at once or after a crash:
 *
 * 1. Sign, once: under the sender's advisory lock and the row's lock, sign and PERSIST the raw bytes,
 *    hash and nonce (committed) before anything reaches the network. A row that already has them is
 *    never signed again. What keeps the chain from accepting a second transaction for the transfer
 *    depends on the family (`replayGuards`): EVM and TON order a sender's transactions by a counter
 *    (nonce, seqno), so a new one is signed above both the chain's pending counter and every counter
 *    persisted for a transfer of that sender not yet resolved (TON, whose node takes a wallet's
 *    messages only in seqno order, signs a transfer only once no other of its sender is signed and
 *    unresolved, so its seqno is the chain's own: no message waits behind a gap); Solana and Tron give each transaction
 *    a short lifetime instead (a recent blockhash; TAPOS and an expiration), so the persisted bytes
 *    either land within it or never can.
 * 2. Broadcast the persisted bytes while the chain does not know them (first send, or rebroadcast
 *    after a crash or a node that forgot them); the adapter's broadcast is idempotent.
 * 3. Confirm: poll the status, in process for up to `hold_ms` per job, then through a re-scheduled
 *    poll job (`startAfter`); `poll_count_max` polls in all. At
 *    the chain's finality, post the reservation (fee first, then the amount with the attachment that
 *    completes the row with its proof and emits `payment.completed`); on a revert, a transaction that
 *    can never be included (its nonce taken, its lifetime over), a refusal or a timeout, void it
 *    (`payment.failed`, funds released).
 * 4. Replace, where a transaction can wait in a pool without end (EVM: the adapter offers
 *    `signReplacement`): past `poll_count_max` polls, a transaction not in a block is not given up
 *    (it could still be mined after the funds were released). The worker signs, persists (once,
 *    under the row's lock) and broadcasts a replacement at the same nonce that moves nothing, at a
 *    higher fee; the transfer completes if its own transaction lands after all, and is voided only
 *    once the replacement is final. A Solana or Tron transaction cannot outlive its lifetime, nor a
 *    TON message its `valid_until`: past the budget, one the chain still reads `seen` is waited for
 *    one more budget (it lands or reads dropped by the end of its life), and a `dropped` one times
 *    out.
 *
 * The adapter is the one running for the transfer's chain in the transfer's environment (routes.ts):
 * sandbox transfers go to the local chains, production transfers to the configured networks.
 *
 * Each ledger step carries an idempotency key derived from the transfer, so a settlement repeated by
 * a second job is a replay that writes nothing; the row changes only while `pending`.
 *
 * A worker killed mid-step leaves its job active; pg-boss runs it again once it is older than
 * `job_expire_seconds`, checked by the supervisor of some running pg-boss instance every
 * `max(superviseIntervalSeconds, monitorIntervalSeconds)` (60 s by default): the composition root
 * chooses those, and the restart resumes at the persisted stage.
 *
 * A step that throws (the chain's node unreachable or erring, the database away) is retried by
 * pg-boss with backoff. A transfer never signed fails `node_unavailable` after `sign_attempts_max`
 * attempts in a row, its funds released; a signed one is never given up on an error (its job out of
 * retries is followed by a new one, and `requeueOrphans` gives a job to a pending transfer without
 * one), since its transaction may land whenever the node is back. Its reservation has no lapse.
 *
 * Known limit: if neither transaction is final within another `poll_count_max` polls (or the sender
 * cannot pay for the replacement), the transfer is voided anyway, while its transaction might still
 * be mined (never while either is in a block).
 */
import { Effect, Result } from "effect"
import type pg from "pg"
import type { JobWithMetadata, PgBoss } from "pg-boss"
import { assert } from "../../domain/assert.ts"
import {
  type ChainFamily,
  type CustodyChain,
  chainFamily,
  type SigningKey,
  type WalletKeyRef,
} from "../../domain/custody/derive.ts"
import type { Environment } from "../../domain/platform/scopes.ts"
import { inTransaction } from "../db/transaction.ts"
import type { CommandContext, LedgerWriterService } from "../ledger/writer.ts"
import { ledgerOf } from "../platform/accounts.ts"
import type {
  BroadcastRejected,
  ChainAdapter,
  InsufficientFundsForFee,
  InvalidChainAddress,
  NonceTooLow,
  SignedTransfer,
  SignOptions,
  TransactionExpired,
  TransactionStatus,
  TransferWouldRevert,
} from "../ports/chain.ts"
import { sleep } from "../projections/runner.ts"
import { pgBossDb } from "../webhooks/queue.ts"
import { type SettlementOutcome, type TransferAttachment, type TransferJob, transfer_queue } from "./hook.ts"
import { type FailureCode, fromDb, ledgerIds, storedProof, type TransferRow } from "./model.ts"
import { adapterFor, type ChainRoutes } from "./routes.ts"

/** Hands out a wallet's signing key for one signature; never logged, never stored. */
export type SigningKeySource = (
  ref: WalletKeyRef & { readonly environment: Environment },
) => Promise<SigningKey>

export interface TransferWorkerOptions {
  /** Between two status polls of a transaction; default 1,000. */
  readonly poll_interval_ms?: number
  /** Polls after the broadcast before the transfer times out and is voided; default 600. */
  readonly poll_count_max?: number
  /** Jobs run at once in this process (1..256); default 32. */
  readonly worker_count?: number
  /** How often the worker looks for due jobs while it has free slots and none is due; default 200. */
  readonly worker_poll_interval_ms?: number
  /**
   * How long one job keeps polling its transfer in process before handing it back to the queue;
   * default 20,000, at most a third of `job_expire_seconds`.
   */
  readonly hold_ms?: number
  /** A job still active this long was lost with its process: pg-boss runs it again; default 60. */
  readonly job_expire_seconds?: number
  /**
   * Attempts in a row at signing that failed on an error of the chain's node (unreachable, or an
   * error that is no refusal) after which a transfer that was never signed fails `node_unavailable`
   * and its funds are released; default 10 (about 5 minutes of the queue's backoff, more when each
   * attempt waits out a hanging node's timeouts). Nothing can
   * reach the chain for it: no bytes were persisted, and none will be.
   */
  readonly sign_attempts_max?: number
  /**
   * Retries of one job (the queue's `retryLimit`) before pg-boss gives it up; default 50, at most
   * `step_retry_delay_max_seconds` apart. A signed transfer is never left without a job: when its
   * job has no retry left, a new job takes it over that much later.
   */
  readonly step_retry_limit?: number
  /** The longest wait between two retries of a job, in seconds (the queue's backoff cap); default 60. */
  readonly step_retry_delay_max_seconds?: number
  /**
   * How often the worker looks for pending transfers that have no job waiting or running (lost with
   * the database at the wrong moment) and gives each a new one; default 60,000.
   */
  readonly orphan_sweep_interval_ms?: number
  /**
   * The environment whose chains started anew at `at` (the sandbox's local chains start with the
   * platform): its transfers still pending from before went to chains that are gone, where nothing
   * of theirs can land, and fail `dropped` with their funds released when the worker starts.
   */
  readonly chains_restarted?: { readonly environment: Environment; readonly at: Date }
  /** Errors of steps (they are retried by pg-boss); default: ignored. */
  readonly onError?: (error: unknown) => void
  /**
   * Called after the signed bytes are persisted, before each broadcast of them; a test seam for what
   * happens on chain in between (an account frozen, a blockhash expired).
   */
  readonly beforeBroadcast?: (row: TransferRow) => Promise<void>
  /** Called after a successful broadcast, before the status read; a test seam for crashes. */
  readonly afterBroadcast?: (row: TransferRow) => Promise<void>
}

export interface TransferWorkerDeps {
  readonly pool: pg.Pool
  readonly boss: PgBoss
  readonly writer: LedgerWriterService
  /** The adapters per environment and chain; a transfer goes to its own environment's. */
  readonly routes: ChainRoutes
  readonly signingKey: SigningKeySource
}

export interface TransferWorker {
  /** Runs the steps of one transfer until it is settled or waits on the chain (tests, sweeps). */
  readonly advance: (transfer_id: string) => Promise<"settled" | "waiting">
  readonly stop: () => Promise<void>
}

/** A waiting transfer's status is read again after this many polls' time even if its chain stood still. */
const poll_idle_max = 8

/** pg-boss retries a step that threw (node or database unreachable) `retryLimit` times, with backoff. */
const step_retry = { retryDelay: 1, retryBackoff: true } as const
const step_retry_limit_default = 50
/**
 * How long a job's lease on sending a transfer's bytes lasts: longer than any send takes (the EVM
 * client's retries take about 40 s), so that no other job sends them meanwhile; a job that died
 * sending leaves it to lapse.
 */
const broadcast_lease_s = 120
/** Seconds before a job handed back (its chain runs in another process) may be fetched again. */
const handed_back_delay_s = 5
const step_retry_delay_max_default = 60

/** The failed steps in a row a job's data carries from the jobs before it (0 when it names none). */
const priorAttempts = (data: TransferJob): number =>
  typeof data.prior_attempts === "number" &&
  Number.isSafeInteger(data.prior_attempts) &&
  data.prior_attempts > 0
    ? data.prior_attempts
    : 0

/** Creates (or updates) the transfer queue; a request's hook needs it to exist. */
export async function createTransferQueue(
  boss: PgBoss,
  job_expire_seconds = 60,
  retry: { readonly limit?: number; readonly delay_max_seconds?: number } = {},
): Promise<void> {
  const options = {
    ...step_retry,
    retryLimit: retry.limit ?? step_retry_limit_default,
    retryDelayMax: retry.delay_max_seconds ?? step_retry_delay_max_default,
    expireInSeconds: job_expire_seconds,
  }
  await boss.createQueue(transfer_queue, options)
  await boss.updateQueue(transfer_queue, options)
}

type Failure = { readonly code: FailureCode; readonly message: string }

/** The failure claimed on a pending transfer's row (`failure_code` set) and not settled yet. */
const claimedFailure = (row: TransferRow): Failure => {
  assert(row.failure_code !== null, "a claimed failure has its code")
  return { code: row.failure_code, message: row.failure_message ?? "" }
}

type SignOutcome =
  | { readonly kind: "signed"; readonly row: TransferRow }
  /** Not signed yet: an earlier signed transfer of its sender is unresolved (`broadcastsInOrder`). */
  | { readonly kind: "waiting" }
  | ({ readonly kind: "failed" } & Failure)

const loadRow = async (db: pg.Pool | pg.PoolClient, transfer_id: string, lock = false) => {
  const found = await db.query(
    `select * from platform.chain_transfers where transfer_id = $1${lock ? " for update" : ""}`,
    [transfer_id],
  )
  return found.rows[0] === undefined ? undefined : fromDb(found.rows[0])
}

/** The row with the outcome an earlier attempt of its settlement recorded (`settling`), if any. */
const loadRowAndOutcome = async (db: pg.Pool, transfer_id: string) => {
  const found = await db.query("select * from platform.chain_transfers where transfer_id = $1", [transfer_id])
  const raw = found.rows[0]
  if (raw === undefined) return undefined
  return { row: fromDb(raw), recorded: (raw.settling ?? undefined) as SettlementOutcome | undefined }
}

/**
 * Claims `failure` on a pending row that has none yet (under its signing lock, or under `lease`, the
 * broadcast lease, which it then ends); answers the failure the row holds now: this one, or one
 * claimed before. Undefined when the row is settled already, or the lease is no longer this one.
 */
const claimFailure = async (
  db: pg.Pool | pg.PoolClient,
  transfer_id: string,
  failure: Failure,
  lease?: string,
): Promise<Failure | undefined> => {
  const claimed = await db.query(
    `update platform.chain_transfers
        set failure_code = coalesce(failure_code, $2),
            failure_message = case when failure_code is null then $3 else failure_message end,
            broadcast_lease_until = case when $4::timestamptz is null then broadcast_lease_until end
      where transfer_id = $1 and status = 'pending'
        and ($4::timestamptz is null or broadcast_lease_until = $4::timestamptz)
      returning *`,
    [transfer_id, failure.code, failure.message, lease ?? null],
  )
  return claimed.rows[0] === undefined ? undefined : claimedFailure(fromDb(claimed.rows[0]))
}

/** The outcome an earlier attempt of the transfer's settlement recorded with its first step. */
const recordedOutcome = async (db: pg.Pool, transfer_id: string): Promise<SettlementOutcome | undefined> => {
  const found = await db.query<{ settling: SettlementOutcome | null }>(
    "select settling from platform.chain_transfers where transfer_id = $1",
    [transfer_id],
  )
  return found.rows[0]?.settling ?? undefined
}

/** The nonces persisted for unresolved transfers of this sender, from `from` up. */
const unresolvedNoncesFrom = async (
  client: pg.PoolClient,
  row: TransferRow,
  from: number,
): Promise<Set<number>> => {
  const found = await client.query<{ nonce: string }>(
    `select distinct nonce::text as nonce from platform.chain_transfers
      where environment = $1 and chain = $2 and from_address = $3 and status = 'pending'
        and nonce is not null and nonce >= $4`,
    [row.environment, row.chain, row.from_address, from],
  )
  return new Set(found.rows.map(({ nonce }) => Number(nonce)))
}

type SignResult = Result.Result<
  SignedTransfer,
  InvalidChainAddress | InsufficientFundsForFee | TransferWouldRevert
>

/**
 * Signs a transfer so that the chain can never take a second transaction for it: called once per
 * transfer, under the sender's lock, and its bytes are persisted before any broadcast.
 */
type ReplayGuard = (
  client: pg.PoolClient,
  row: TransferRow,
  sign: (options?: SignOptions) => Promise<SignResult>,
) => Promise<SignResult>

/**
 * Counter families (EVM nonce, TON seqno): sign at the lowest counter from the chain's pending one
 * up that no transfer of this sender still unresolved has persisted (signed, perhaps not broadcast
 * yet). The first signature is discarded unsent when that counter is taken. A counter left unused
 * below others (a transfer refused at its first broadcast, after a later one was signed above it)
 * is so the next one signed: the transfers queued behind it in the node's pool land once it does.
 */
const sequencedGuard: ReplayGuard = async (client, row, sign) => {
  const first = await sign()
  if (Result.isFailure(first)) return first
  const taken = await unresolvedNoncesFrom(client, row, first.success.nonce)
  let nonce = first.success.nonce
  while (taken.has(nonce)) nonce += 1
  return nonce === first.success.nonce ? first : await sign({ nonce })
}

/**
 * Lifetime families (Solana's recent blockhash, Tron's TAPOS and expiration): a transaction carries
 * no counter, so two transfers of one sender never compete; one signature, whose bytes land within
 * their lifetime or never. Two equal transfers still differ: the intent's `reference` (Solana's
 * memo) or the adapter's increasing timestamps (Tron) set them apart.
 */
const lifetimeGuard: ReplayGuard = (_client, _row, sign) => sign()

const replayGuards: { readonly [F in ChainFamily]: ReplayGuard } = {
  evm: sequencedGuard,
  ton: sequencedGuard,
  solana: lifetimeGuard,
  tron: lifetimeGuard,
}

/**
 * Families whose nodes take a sender's transactions only in counter order: a TON node runs a wallet's
 * external message against the wallet's state now, so seqno N + 1 is refused until N has landed
 * (an EVM node queues a future nonce in its pool instead). There, a transfer is broadcast only once
 * no earlier transfer of its sender is unresolved.
 */
const broadcastsInOrder: { readonly [F in ChainFamily]: boolean } = {
  evm: false,
  ton: true,
  solana: false,
  tron: false,
}

const signFailure = (error: InvalidChainAddress | InsufficientFundsForFee | TransferWouldRevert): Failure => {
  switch (error._tag) {
    case "InsufficientFundsForFee":
      return { code: "insufficient_gas", message: "The sending wallet cannot pay the network fee." }
    case "TransferWouldRevert":
      return { code: "would_revert", message: `The transfer would not go through: ${error.reason}` }
    case "InvalidChainAddress":
      return { code: "would_revert", message: `The transfer cannot be built: bad address ${error.address}` }
  }
}

export function startTransferWorker(
  deps: TransferWorkerDeps,
  options: TransferWorkerOptions = {},
): Promise<TransferWorker> {
  const poll_interval_ms = options.poll_interval_ms ?? 1_000
  const poll_count_max = options.poll_count_max ?? 600
  const concurrency_max = options.worker_count ?? 32
  const fetch_interval_ms = options.worker_poll_interval_ms ?? 200
  const job_expire_seconds = options.job_expire_seconds ?? 60
  const hold_ms = Math.min(options.hold_ms ?? 20_000, (job_expire_seconds * 1000) / 3)
  const sign_attempts_max = options.sign_attempts_max ?? 10
  const step_retry_limit = options.step_retry_limit ?? step_retry_limit_default
  const step_retry_delay_max = options.step_retry_delay_max_seconds ?? step_retry_delay_max_default
  const orphan_sweep_interval_ms = options.orphan_sweep_interval_ms ?? 60_000
  const onError = options.onError ?? (() => {})
  assert(poll_interval_ms >= 1 && poll_count_max >= 1, "polling is bounded and positive")
  assert(
    Number.isInteger(concurrency_max) && concurrency_max >= 1 && concurrency_max <= 256,
    "worker_count in 1..256",
  )
  assert(fetch_interval_ms >= 10 && hold_ms >= 0, "the fetch interval and the hold are bounded")
  assert(
    Number.isInteger(sign_attempts_max) &&
      sign_attempts_max >= 1 &&
      Number.isInteger(step_retry_limit) &&
      sign_attempts_max <= step_retry_limit + 1 &&
      step_retry_delay_max >= 1,
    "1 <= sign_attempts_max <= step_retry_limit + 1 (one job's attempts), and a retry delay cap of 1 s or more",
  )
  const { pool, boss, writer, routes } = deps

  const adapterOf = (row: TransferRow): ChainAdapter => {
    const adapter = adapterFor(routes, row.environment, row.chain)
    assert(
      adapter !== undefined,
      `a ${row.environment} transfer on ${row.chain} was requested without its adapter`,
    )
    return adapter
  }

  /** Step 1: sign and persist, once per transfer, one sender at a time. */
  const signOnce = async (row: TransferRow): Promise<SignOutcome> => {
    const client = await pool.connect()
    try {
      await client.query("begin")
      await client.query("select pg_advisory_xact_lock(hashtextextended($1, 0))", [
        `chain-sender:${row.chain}:${row.from_address}`,
      ])
      const locked = await loadRow(client, row.transfer_id, true)
      assert(locked !== undefined, "a transfer row is never deleted")
      if (locked.tx_hash === null && locked.status === "pending" && locked.failure_code !== null) {
        // Given up unsigned (`giveUpUnsigned`): it is never signed; its failure is settled again.
        await client.query("commit")
        return { kind: "failed", ...claimedFailure(locked) }
      }
      if (locked.tx_hash !== null || locked.status !== "pending") {
        await client.query("commit")
        return { kind: "signed", row: locked }
      }
      if (await signsInOrderBehind(client, locked)) {
        await client.query("commit")
        return { kind: "waiting" }
      }
      const signed = await signGuarded(client, locked)
      if (Result.isFailure(signed)) {
        // Claimed on the row before it is settled: the refusal may not last (gas arrives, the
        // recipient is unblocked), and a job that ran again after a crash midway through the
        // settlement must settle this failure, never sign the transfer anew.
        const failure = await claimFailure(client, locked.transfer_id, signFailure(signed.failure))
        await client.query("commit")
        assert(failure !== undefined, "the row was pending under its lock")
        return { kind: "failed", ...failure }
      }
      const persisted = await client.query(
        `update platform.chain_transfers
            set raw_transaction = $2, tx_hash = $3, nonce = $4, signed_at = now()
          where transfer_id = $1 returning *`,
        [locked.transfer_id, signed.success.raw, signed.success.tx_hash, signed.success.nonce],
      )
      await client.query("commit")
      return { kind: "signed", row: fromDb(persisted.rows[0]) }
    } catch (error) {
      await client.query("rollback").catch(() => {})
      throw error
    } finally {
      client.release()
    }
  }

  /** Signs the row's transfer under its family's replay guard. */
  const signGuarded = async (client: pg.PoolClient, row: TransferRow): Promise<SignResult> => {
    const chain = row.chain as CustodyChain
    const key = await deps.signingKey({
      environment: row.environment,
      chain,
      tenant_index: row.key_tenant_index,
      wallet_index: row.key_wallet_index,
    })
    const adapter = adapterOf(row)
    const intent = {
      asset: { kind: "token", contract: row.token_contract } as const,
      to: row.to_address,
      amount: row.amount,
      reference: row.transfer_id,
    }
    return await replayGuards[chainFamily(chain)](client, row, (options) =>
      Effect.runPromise(Effect.result(adapter.signTransfer(key, intent, options))),
    )
  }

  /**
   * True when the family broadcasts in counter order (TON) and another signed transfer of the sender
   * is unresolved: the transfer is signed only after it, at the counter the chain has then. Signed
   * earlier, its message would wait for the other's (its lifetime running), and were the other to
   * fail without using its counter (a message that expired unsent), this one could not land until
   * some later message took that counter; failing it meanwhile would release funds that could still
   * move once it did.
   */
  const signsInOrderBehind = async (client: pg.PoolClient, row: TransferRow): Promise<boolean> => {
    if (!broadcastsInOrder[chainFamily(row.chain as CustodyChain)]) return false
    const ahead = await client.query(
      `select 1 from platform.chain_transfers
        where environment = $1 and chain = $2 and from_address = $3 and status = 'pending'
          and tx_hash is not null and transfer_id <> $4 limit 1`,
      [row.environment, row.chain, row.from_address, row.transfer_id],
    )
    return (ahead.rowCount ?? 0) > 0
  }

  /** True when the family broadcasts in counter order and an earlier transfer of the sender is unresolved. */
  const waitsForEarlierTransfer = async (row: TransferRow): Promise<boolean> => {
    if (!broadcastsInOrder[chainFamily(row.chain as CustodyChain)] || row.nonce === null) return false
    const earlier = await pool.query(
      `select 1 from platform.chain_transfers
        where chain = $1 and from_address = $2 and status = 'pending' and nonce < $3 limit 1`,
      [row.chain, row.from_address, row.nonce],
    )
    return (earlier.rowCount ?? 0) > 0
  }

  /**
   * Step 2: broadcast the persisted bytes. Null when a node took them; the failure to record when
   * the refusal proves the transaction can never land; `no_answer` when it proves nothing. Bytes
   * handed to a node before (the attempt is recorded first, so a crash right after sending counts)
   * may sit in another node's pool or be on their way into a block: a node refusing them now (its
   * fee floor rose, it is busy, it forgot them) does not mean they are nowhere, so only an expiry,
   * which the adapters report after reading the chain, fails such a transfer at once.
   */
  const broadcast = async (
    row: TransferRow & { raw_transaction: string },
  ): Promise<Failure | "no_answer" | "settled" | null> => {
    // One job at a time sends a transfer's bytes: it takes a lease on the row (no connection is
    // held while the node answers), and a refusal that fails the transfer is claimed on the row
    // under that lease, before another job may send them: were gas to arrive between a refusal
    // and a second job's send, the bytes would land while the failure released the funds.
    // The first attempt is recorded with the lease, in one statement (before the bytes leave, so a
    // crash right after sending counts): a later job on the same transfer (an expired job run
    // again) finds it recorded, and takes a refusal as no proof.
    const leased = await pool.query<{
      /** The lease's end, as text: exact to the microsecond (a Date keeps milliseconds). */
      lease: string
      first_attempt: boolean
    }>(
      `update platform.chain_transfers t
          set broadcast_lease_until = clock_timestamp() + make_interval(secs => $2),
              broadcast_attempted_at = coalesce(t.broadcast_attempted_at, case when t.broadcast_at is null then now() end)
         from (select broadcast_attempted_at, broadcast_at from platform.chain_transfers
                where transfer_id = $1 for update) before
        where t.transfer_id = $1 and t.status = 'pending' and t.failure_code is null
          and (t.broadcast_lease_until is null or t.broadcast_lease_until < clock_timestamp())
        returning t.broadcast_lease_until::text as lease,
                  (before.broadcast_attempted_at is null and before.broadcast_at is null) as first_attempt`,
      [row.transfer_id, broadcast_lease_s],
    )
    const held = leased.rows[0]
    if (held === undefined) {
      // Settled, its failure claimed, or another job is sending it now (which proves nothing).
      const current = await loadRow(pool, row.transfer_id)
      assert(current !== undefined, "a transfer row is never deleted")
      if (current.status !== "pending") return "settled"
      return current.failure_code !== null ? claimedFailure(current) : "no_answer"
    }
    let lease_held = true
    try {
      const { first_attempt } = held
      const sent = await Effect.runPromise(Effect.result(adapterOf(row).broadcast(row.raw_transaction)))
      if (Result.isSuccess(sent)) {
        await pool.query(
          `update platform.chain_transfers
              set broadcast_at = coalesce(broadcast_at, now()),
                  broadcast_lease_until = case when broadcast_lease_until = $2::timestamptz then null
                                               else broadcast_lease_until end
            where transfer_id = $1`,
          [row.transfer_id, held.lease],
        )
        lease_held = false
        return null
      }
      if (!first_attempt && sent.failure._tag !== "TransactionExpired") return "no_answer"
      // Claimed only while the lease is still this job's: past it, another job may have sent them.
      const claimed = await claimFailure(pool, row.transfer_id, refusalFailure(sent.failure), held.lease)
      lease_held = false
      return claimed ?? "no_answer"
    } finally {
      if (lease_held) {
        await pool
          .query(
            "update platform.chain_transfers set broadcast_lease_until = null where transfer_id = $1 and broadcast_lease_until = $2::timestamptz",
            [row.transfer_id, held.lease],
          )
          .catch(onError)
      }
    }
  }

  const refusalFailure = (
    error: InsufficientFundsForFee | NonceTooLow | TransactionExpired | BroadcastRejected,
  ): Failure => {
    switch (error._tag) {
      case "InsufficientFundsForFee":
        return { code: "insufficient_gas", message: "The sending wallet cannot pay the network fee." }
      case "NonceTooLow":
        return {
          code: "dropped",
          message: `Another transaction of the sender took nonce ${error.nonce}: this one can never be included.`,
        }
      case "TransactionExpired":
        return {
          code: "dropped",
          message:
            "The transaction's lifetime on the chain ended before it landed: it can never be included.",
        }
      case "BroadcastRejected":
        return { code: "broadcast_rejected", message: `The node refused the transaction: ${error.reason}` }
    }
  }

  /** Posts (completed) or voids (failed) the reservation, recording the outcome with it. */
  const settle = async (
    row: TransferRow,
    outcome: Extract<TransferAttachment, { kind: "chain_transfer_settled" }>["outcome"],
  ) => {
    const ids = ledgerIds(row.transfer_id)
    const ledger = ledgerOf(row.tenant_id, row.environment)
    const context = (idempotency_key: string, attachment?: TransferAttachment): CommandContext => ({
      actor: "chain-transfer-worker",
      correlation_id: row.transfer_id,
      idempotency_key,
      ...(attachment === undefined ? {} : { attachment }),
    })
    // An outcome recorded by an earlier attempt with its first step is the one to finish with.
    const decided = (await recordedOutcome(pool, row.transfer_id)) ?? outcome
    const post = decided.status === "completed"
    const settled: TransferAttachment = {
      kind: "chain_transfer_settled",
      transfer_id: row.transfer_id,
      outcome: decided,
    }
    const settling: TransferAttachment = {
      kind: "chain_transfer_settling",
      transfer_id: row.transfer_id,
      outcome: decided,
    }
    const steps = [
      ...(row.fee > 0n
        ? [{ id: post ? ids.post_fee : ids.void_fee, pending_id: ids.fee, attachment: settling }]
        : []),
      { id: post ? ids.post_amount : ids.void_amount, pending_id: ids.amount, attachment: settled },
    ]
    for (const step of steps) {
      const command = {
        type: post ? ("PostPendingTransfer" as const) : ("VoidPendingTransfer" as const),
        transfer_id: step.id,
        pending_id: step.pending_id,
        now_ms: Date.now(),
      }
      const done = await Effect.runPromise(
        Effect.result(writer.execute(ledger, command, context(step.id, step.attachment))),
      )
      if (Result.isFailure(done)) {
        // Resolved already (by another job's identical step, or lapsed): the row tells the rest.
        const current = await loadRow(pool, row.transfer_id)
        if (current?.status !== "pending") return
        throw new Error(`settling ${row.transfer_id}: the ledger refused ${step.id}: ${done.failure._tag}`)
      }
    }
  }

  const fail = (row: TransferRow, failure: Failure) =>
    settle(row, { status: "failed", code: failure.code, message: failure.message })

  /**
   * Fails a transfer that was never signed, after `attempts` failed steps in a row. The failure is
   * claimed on the row first, under its lock and only while it has no signature, so no job signs it
   * afterwards (`signOnce` settles the claimed failure instead); false when it was signed meanwhile.
   */
  const giveUpUnsigned = async (row: TransferRow, attempts: number): Promise<boolean> => {
    // Tenants read this (API, webhooks): the node's own error stays in the operator's log, since it
    // can carry the RPC URL and with it a provider's key.
    const failure: Failure = {
      code: "node_unavailable",
      message:
        `The ${row.chain} node could not be reached or failed on ${attempts} attempts in a row to ` +
        "prepare the transfer; nothing was sent, and the funds were released.",
    }
    const claimed = await pool.query(
      `update platform.chain_transfers set failure_code = $2, failure_message = $3
        where transfer_id = $1 and status = 'pending' and tx_hash is null and failure_code is null
        returning transfer_id`,
      [row.transfer_id, failure.code, failure.message],
    )
    if (claimed.rowCount === 0) return false
    await fail(row, failure)
    return true
  }

  /**
   * Fails the transfers left pending on chains that ended (see `chains_restarted`), each claimed on
   * its row first like `giveUpUnsigned`, so no job signs it afterwards; answers how many.
   */
  const failTransfersOfEndedChains = async (restarted: {
    readonly environment: Environment
    readonly at: Date
  }): Promise<number> => {
    const failure: Failure = {
      code: "dropped",
      message:
        `The ${restarted.environment}'s chains were started anew (at ${restarted.at.toISOString()}) ` +
        "while this transfer was pending: nothing of it can land on the new ones, and the funds were released.",
    }
    // Those claimed already (given up, or by an earlier start that stopped before settling them)
    // keep their failure.
    const claimed = await pool.query(
      `update platform.chain_transfers
          set failure_message = case when failure_code is null then $4 else failure_message end,
              failure_code = coalesce(failure_code, $3)
        where environment = $1 and status = 'pending' and created_at < $2
        returning *`,
      [restarted.environment, restarted.at, failure.code, failure.message],
    )
    // One that cannot be settled (its job keeps trying) does not keep the worker from starting.
    for (const row of claimed.rows.map(fromDb)) await fail(row, claimedFailure(row)).catch(onError)
    return claimed.rows.length
  }

  /**
   * After a step threw (the chain's node or the database failed): a transfer never signed is given
   * up after `sign_attempts_max` attempts; a signed one gets a new job when this one has no retry
   * left, since its transaction may be on the chain and only a worker settles it. Answers whether
   * the job is done (the transfer settled) or is to be retried by pg-boss.
   */
  const afterStepError = async (
    job: Pick<JobWithMetadata<TransferJob>, "id" | "data" | "retryCount" | "retryLimit" | "retryDelayMax">,
  ): Promise<"settled" | "retry"> => {
    const row = await loadRow(pool, job.data.transfer_id)
    if (row === undefined || row.status !== "pending") return "settled"
    // The job's count as pg-boss has it now: a run that outlived the job's expiry holds the count of
    // its own claim, while pg-boss has since claimed the job again (one more) for a run left to it.
    const claimed = await pool.query<{ retry_count: number }>(
      "select retry_count from pgboss.job where name = $1 and id = $2",
      [transfer_queue, job.id],
    )
    const retry_count = Math.max(job.retryCount, claimed.rows[0]?.retry_count ?? 0)
    const attempts = priorAttempts(job.data) + retry_count + 1
    if (row.tx_hash === null && attempts >= sign_attempts_max && (await giveUpUnsigned(row, attempts)))
      return "settled"
    if (retry_count >= job.retryLimit) {
      const data: TransferJob = { transfer_id: job.data.transfer_id, prior_attempts: attempts }
      await boss.insert(transfer_queue, [{ data, startAfter: job.retryDelayMax ?? step_retry_delay_max }], {
        db: pgBossDb(pool),
      })
    }
    return "retry"
  }

  /** Counts a poll of the transfer; answers how many it has had, this one included. */
  const countedPolls = async (row: TransferRow): Promise<number> => {
    const counted = await pool.query<{ poll_count: number }>(
      "update platform.chain_transfers set poll_count = poll_count + 1 where transfer_id = $1 returning poll_count",
      [row.transfer_id],
    )
    return counted.rows[0]?.poll_count ?? 0
  }

  /**
   * Counts a poll; past the bound the transfer times out, unless its transaction is in a block. A
   * transaction that may still wait in a node's pool (seen, or dropped by this node only) is
   * replaced first where the family allows it.
   */
  const countPoll = async (row: TransferRow, status: TransactionStatus): Promise<"settled" | "waiting"> => {
    const polls = await countedPolls(row)
    if (polls <= poll_count_max) return "waiting"
    // In a block, the transaction has moved the money or will revert: it either reaches finality or
    // a reorganisation takes it back to a pool (seen) or nowhere (dropped). Releasing the funds now
    // could pay twice, so it waits, however long the chain takes.
    if (status.status === "confirmed") return "waiting"
    // Where a transaction's life is bounded (Solana's blockhash, TON's valid_until, Tron's
    // expiration), one still waiting to land is not given up at the budget: it lands or reads
    // dropped by the end of its life, soon. A poll count is no clock (duplicate jobs count twice),
    // so a second budget is given; past it (a node that keeps reading seen), it times out.
    if (
      status.status === "seen" &&
      adapterOf(row).signReplacement === undefined &&
      polls <= 2 * poll_count_max
    )
      return "waiting"
    if (adapterOf(row).signReplacement !== undefined) {
      const replacing = await replacementOnce(row)
      if (replacing !== null) return await advanceReplaced(replacing)
    }
    await fail(row, {
      code: "confirmation_timeout",
      message: `The transaction was still ${status.status} after ${poll_count_max} polls; the funds were released.`,
    })
    return "settled"
  }

  /**
   * Signs and persists the transfer's replacement, once (under the row's lock, like the first
   * signature); null when the sender cannot pay for one.
   */
  const replacementOnce = async (row: TransferRow): Promise<TransferRow | null> => {
    const adapter = adapterOf(row)
    assert(adapter.signReplacement !== undefined, "only a family with pools replaces")
    const client = await pool.connect()
    try {
      await client.query("begin")
      const locked = await loadRow(client, row.transfer_id, true)
      assert(locked?.raw_transaction != null, "a replaced transfer was signed")
      if (locked.replacement_tx_hash !== null || locked.status !== "pending") {
        await client.query("commit")
        return locked
      }
      const key = await deps.signingKey({
        environment: locked.environment,
        chain: locked.chain as CustodyChain,
        tenant_index: locked.key_tenant_index,
        wallet_index: locked.key_wallet_index,
      })
      const signed = await Effect.runPromise(
        Effect.result(adapter.signReplacement(key, locked.raw_transaction)),
      )
      if (Result.isFailure(signed)) {
        await client.query("rollback")
        return null
      }
      const persisted = await client.query(
        `update platform.chain_transfers set replacement_raw_transaction = $2, replacement_tx_hash = $3
          where transfer_id = $1 returning *`,
        [locked.transfer_id, signed.success.raw, signed.success.tx_hash],
      )
      await client.query("commit")
      return fromDb(persisted.rows[0])
    } catch (error) {
      await client.query("rollback").catch(() => {})
      throw error
    } finally {
      client.release()
    }
  }

  /**
   * A replaced transfer: completes if its own transaction lands after all, fails once the
   * replacement (which took the nonce) is final, and otherwise (re)broadcasts the replacement and
   * waits, for at most another `poll_count_max` polls.
   */
  const advanceReplaced = async (row: TransferRow): Promise<"settled" | "waiting"> => {
    if (row.status !== "pending") return "settled"
    assert(
      row.tx_hash !== null && row.replacement_tx_hash !== null && row.replacement_raw_transaction !== null,
      "a replaced transfer has both transactions",
    )
    const adapter = adapterOf(row)
    const own = await Effect.runPromise(adapter.transactionStatus(row.tx_hash))
    if (own.status === "finalized") {
      await settle(row, { status: "completed", proof: storedProof(own.proof) })
      return "settled"
    }
    if (own.status === "reverted") {
      await fail(row, {
        code: "reverted",
        message: `The transaction reverted (or moved no tokens) in block ${own.proof.block_number}; the funds were released.`,
      })
      return "settled"
    }
    const replacement = await Effect.runPromise(adapter.transactionStatus(row.replacement_tx_hash))
    if (replacement.status === "finalized") {
      await fail(row, {
        code: "confirmation_timeout",
        message:
          `The transaction was not confirmed within ${poll_count_max} polls; transaction ` +
          `${row.replacement_tx_hash} took its nonce ${String(row.nonce)} and moved nothing, so it can ` +
          "never land: the funds were released.",
      })
      return "settled"
    }
    if (replacement.status === "dropped" && own.status !== "confirmed") {
      // A refusal is no answer yet: a nonce already taken means one of the two landed, and the next
      // poll reads which; a node that forgot the replacement gets it again next time.
      await Effect.runPromise(Effect.result(adapter.broadcast(row.replacement_raw_transaction)))
    }
    if ((await countedPolls(row)) <= 2 * poll_count_max) return "waiting"
    // One of the two is in a block: it decides the transfer once final (see `countPoll`).
    if (own.status === "confirmed" || replacement.status === "confirmed") return "waiting"
    // Read again before giving up: the transaction may have landed since its read above (which is
    // then why the replacement read dropped: its nonce was taken).
    const again = await Effect.runPromise(adapter.transactionStatus(row.tx_hash))
    if (again.status !== "seen" && again.status !== "dropped") return "waiting"
    await fail(row, {
      code: "confirmation_timeout",
      message: `Neither the transaction nor its replacement was final after ${2 * poll_count_max} polls; the funds were released.`,
    })
    return "settled"
  }

  const advance = async (transfer_id: string): Promise<"settled" | "waiting"> => {
    const found = await loadRowAndOutcome(pool, transfer_id)
    if (found === undefined || found.row.status !== "pending") return "settled"
    const loaded = found.row
    if (loaded.failure_code !== null) {
      // Its failure was claimed (refused, given up, or its chain ended) and not settled yet: settle it.
      await fail(loaded, claimedFailure(loaded))
      return "settled"
    }
    if (found.recorded !== undefined) {
      // A settlement whose first step committed is decided: finish it, and leave the chain alone.
      await settle(loaded, found.recorded)
      return "settled"
    }
    const signed =
      loaded.tx_hash === null ? await signOnce(loaded) : ({ kind: "signed", row: loaded } as const)
    if (signed.kind === "waiting") return "waiting"
    if (signed.kind === "failed") {
      await fail(loaded, signed)
      return "settled"
    }
    const row = signed.row
    if (row.status !== "pending") return "settled"
    assert(row.tx_hash !== null && row.raw_transaction !== null, "a signed row has its bytes and hash")
    if (row.replacement_tx_hash !== null) return await advanceReplaced(row)
    const adapter = adapterOf(row)
    // Bytes no node has taken yet are sent without asking the chain first (a chain that cannot tell
    // signed bytes from bytes in flight, like TON, would read `seen`, and a send that failed would
    // never be tried again); bytes the chain does not know (a crash after the broadcast, before its
    // record, or a node that forgot them) are sent again. Broadcasting is idempotent either way.
    if (row.broadcast_at === null && (await waitsForEarlierTransfer(row))) return "waiting"
    let status: TransactionStatus =
      row.broadcast_at === null
        ? { status: "dropped", tx_hash: row.tx_hash }
        : await Effect.runPromise(adapter.transactionStatus(row.tx_hash))
    if (status.status === "dropped") {
      await options.beforeBroadcast?.(row)
      const refused = await broadcast({ ...row, raw_transaction: row.raw_transaction })
      if (refused === "settled") return "settled"
      // Bytes that may be out there: counted as a poll that found nothing, so the transfer times
      // out (EVM: is replaced first) rather than fails now.
      if (refused === "no_answer") return await countPoll(row, status)
      if (refused !== null) {
        await fail(row, refused)
        return "settled"
      }
      await options.afterBroadcast?.(row)
      status = await Effect.runPromise(adapter.transactionStatus(row.tx_hash))
    }
    switch (status.status) {
      case "finalized":
        await settle(row, { status: "completed", proof: storedProof(status.proof) })
        return "settled"
      case "reverted":
        await fail(row, {
          code: "reverted",
          message: `The transaction reverted (or moved no tokens) in block ${status.proof.block_number}; the funds were released.`,
        })
        return "settled"
      case "seen":
      case "confirmed":
      case "dropped":
        return await countPoll(row, status)
    }
  }

  /**
   * Queues the transfer's next poll, unless a job of it is queued already: a job that pg-boss ran
   * again past its expiry while the first run was still going would otherwise make two chains of
   * jobs for ever, each counting polls (the budget, which is no clock, spent twice as fast).
   */
  const schedulePoll = async (transfer_id: string) => {
    const client = await pool.connect()
    try {
      await client.query("begin")
      await client.query("select pg_advisory_xact_lock(hashtextextended($1, 0))", [
        `chain-transfer-poll:${transfer_id}`,
      ])
      const queued = await client.query(
        `select 1 from pgboss.job
          where name = $1 and state in ('created', 'retry') and data->>'transfer_id' = $2 limit 1`,
        [transfer_queue, transfer_id],
      )
      if (queued.rowCount === 0) {
        await boss.insert(
          transfer_queue,
          [{ data: { transfer_id } satisfies TransferJob, startAfter: `${poll_interval_ms} milliseconds` }],
          { db: pgBossDb(client) },
        )
      }
      await client.query("commit")
    } catch (error) {
      await client.query("rollback").catch(() => {})
      throw error
    } finally {
      client.release()
    }
  }

  /**
   * Transfers a job of this process is holding, with that job's id: another job of one of them here
   * ends at once (see `runJob`).
   */
  const holding = new Map<string, string>()

  /**
   * Runs one job: advances its transfer, then keeps polling it in this process every
   * `poll_interval_ms` while it waits on the chain, for at most `hold_ms` (well inside the job's
   * expiry); a transfer still waiting then goes back to the queue as a poll job, as it does when the
   * worker stops. Holding saves the queue round trip per poll, which is most of a transfer's
   * latency on a chain with 1 s blocks.
   */
  const hold = async (transfer_id: string, job_id: string) => {
    holding.set(transfer_id, job_id)
    try {
      await holdHeld(transfer_id)
    } finally {
      holding.delete(transfer_id)
    }
  }

  const holdHeld = async (transfer_id: string) => {
    const started = Date.now()
    let adapter: ChainAdapter | undefined
    for (;;) {
      if ((await advance(transfer_id)) === "settled") return
      if (adapter === undefined) {
        const row = await loadRow(pool, transfer_id)
        if (row === undefined) return
        adapter = adapterOf(row)
      }
      const seen_head = await headOf(adapter)
      // Nothing changes for a transaction until the chain moves: poll again at the next block, or
      // after `poll_idle_max` polls' time should the head stand still.
      for (let idle = 0; idle < poll_idle_max; idle++) {
        if (stopping || Date.now() - started >= hold_ms) break
        await sleep(poll_interval_ms)
        if ((await headOf(adapter)) !== seen_head) break
      }
      if (stopping || Date.now() - started >= hold_ms) {
        await schedulePoll(transfer_id)
        return
      }
    }
  }

  /** Each adapter's newest block, read at most once per half poll interval for all waiting jobs. */
  const heads = new Map<ChainAdapter, { readonly at: number; readonly head: Promise<bigint> }>()
  const headOf = (adapter: ChainAdapter): Promise<bigint> => {
    const cached = heads.get(adapter)
    if (cached !== undefined && Date.now() - cached.at < poll_interval_ms / 2) return cached.head
    const head = Effect.runPromise(adapter.blockNumber())
    heads.set(adapter, { at: Date.now(), head })
    return head
  }

  let stopping = false
  let in_flight = 0
  /** The wakers of the naps in progress; a nap that ends on its own removes its own. */
  const idle = new Set<() => void>()
  /** Resolves at the next job's end or after `ms`, whichever comes first. */
  const nap = (ms: number) =>
    new Promise<void>((resolve) => {
      const wake = () => {
        clearTimeout(timer)
        idle.delete(wake)
        resolve()
      }
      const timer = setTimeout(wake, ms)
      idle.add(wake)
    })
  const wakeAll = () => {
    for (const wake of [...idle]) wake()
  }

  /**
   * True when the transfer is pending on a chain this process has no adapter for, and needs it: a
   * claimed failure or a recorded outcome is settled in the ledger alone, by any process.
   */
  const runElsewhere = async (transfer_id: string): Promise<boolean> => {
    const found = await loadRowAndOutcome(pool, transfer_id)
    if (found === undefined) return false
    const { row, recorded } = found
    return (
      row.status === "pending" &&
      row.failure_code === null &&
      recorded === undefined &&
      adapterFor(routes, row.environment, row.chain) === undefined
    )
  }

  const runJob = async (job: JobWithMetadata<TransferJob>) => {
    const holder = holding.get(job.data.transfer_id)
    if (holder !== undefined) {
      // The job holding the transfer goes on and queues the next poll itself. This one ends at once;
      // if it is that very job, run again by pg-boss past its expiry, it is left to the run still
      // going, which completes it or, on an error, fails it for a retry (completed here, the
      // failure would find it completed, and the transfer would have no job).
      if (holder !== job.id)
        await boss.complete(transfer_queue, job.id, null, { db: pgBossDb(pool) }).catch(onError)
      in_flight -= 1
      wakeAll()
      return
    }
    try {
      if (await runElsewhere(job.data.transfer_id)) {
        // Another process runs its chain (the sandbox's chains run in one process): the job goes back
        // to the queue for it, this one ends without touching the transfer (both in one
        // transaction: never two jobs, never none).
        await inTransaction(pool, async (client) => {
          const data: TransferJob = {
            transfer_id: job.data.transfer_id,
            prior_attempts: priorAttempts(job.data) + job.retryCount,
          }
          await boss.insert(transfer_queue, [{ data, startAfter: handed_back_delay_s }], {
            db: pgBossDb(client),
          })
          await boss.complete(transfer_queue, job.id, null, { db: pgBossDb(client) })
        })
        return
      }
      await hold(job.data.transfer_id, job.id)
      await boss.complete(transfer_queue, job.id, null, { db: pgBossDb(pool) })
    } catch (error) {
      onError(error)
      const next = await afterStepError(job).catch((failed: unknown) => {
        onError(failed)
        return "retry" as const
      })
      // pg-boss retries it (the queue's retry policy); a failure to record that leaves the job active
      // until it expires, when pg-boss runs it again.
      await (next === "settled"
        ? boss.complete(transfer_queue, job.id, null, { db: pgBossDb(pool) })
        : boss.fail(transfer_queue, job.id, { message: String(error) }, { db: pgBossDb(pool) })
      ).catch(onError)
    } finally {
      in_flight -= 1
      wakeAll()
    }
  }

  /**
   * Gives a new job to every pending transfer that has none waiting or running. Each transfer's
   * job is written with its row and replaced before it ends, so this finds only jobs lost to a
   * failure in between (the database gone while a job that had run out of retries was replaced).
   * Transfers younger than a job's expiry are left to their own job.
   */
  const requeueOrphans = async (): Promise<number> => {
    const orphans = await pool.query<{ transfer_id: string }>(
      `select t.transfer_id from platform.chain_transfers t
        where t.status = 'pending' and t.created_at < now() - make_interval(secs => $2)
          and not exists (
            select 1 from pgboss.job j
             where j.name = $1 and j.state < 'completed' and j.data->>'transfer_id' = t.transfer_id)
        limit 1000`,
      [transfer_queue, 2 * job_expire_seconds],
    )
    if (orphans.rows.length === 0) return 0
    await boss.insert(
      transfer_queue,
      orphans.rows.map(({ transfer_id }) => ({ data: { transfer_id } satisfies TransferJob })),
      { db: pgBossDb(pool) },
    )
    return orphans.rows.length
  }

  const orphanLoop = async () => {
    while (!stopping) {
      await requeueOrphans().catch(onError)
      // Woken early by every job's end and by `stop`: naps again for the rest of the interval.
      const until = Date.now() + orphan_sweep_interval_ms
      while (!stopping && Date.now() < until) await nap(until - Date.now())
    }
  }

  /** Fetches due jobs while slots are free; naps `fetch_interval_ms` when none is due. */
  const fetchLoop = async () => {
    while (!stopping) {
      const free = concurrency_max - in_flight
      if (free <= 0) {
        await nap(fetch_interval_ms)
        continue
      }
      let jobs: ReadonlyArray<JobWithMetadata<TransferJob>> = []
      try {
        jobs = await boss.fetch<TransferJob>(transfer_queue, { batchSize: free, includeMetadata: true })
      } catch (error) {
        onError(error)
      }
      for (const job of jobs) {
        in_flight += 1
        void runJob(job)
      }
      if (jobs.length < free) await nap(fetch_interval_ms)
    }
  }

  return (async () => {
    await createTransferQueue(boss, job_expire_seconds, {
      limit: step_retry_limit,
      delay_max_seconds: step_retry_delay_max,
    })
    if (options.chains_restarted !== undefined) await failTransfersOfEndedChains(options.chains_restarted)
    const loop = fetchLoop()
    const orphans = orphanLoop()
    return {
      advance,
      stop: async () => {
        stopping = true
        wakeAll()
        await Promise.all([loop, orphans])
        while (in_flight > 0) await nap(50)
      },
    }
  })()
}
