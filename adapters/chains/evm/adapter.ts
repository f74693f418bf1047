/**
 * The EVM chain adapter, on viem: one instance per configured chain (chain id, RPC URL), for
 * Ethereum, Polygon, BSC, Arbitrum, Optimism, Base, Avalanche and anvil alike. Token transfers are
 * ERC-20 `transfer` calls; transactions are EIP-1559.
 *
 * A JSON-RPC error answer from the node is an expected outcome and becomes a typed error; a transport
 * failure (connection refused, timeout) is a defect that the calling job retries.
 */
import { bytesToHex } from "@noble/hashes/utils.js"
import { Effect } from "effect"
import {
  type Address,
  BaseError,
  createPublicClient,
  decodeFunctionData,
  encodeFunctionData,
  erc20Abi,
  getAbiItem,
  getAddress,
  type Hex,
  http,
  isAddress,
  isHex,
  keccak256,
  type PublicClient,
  pad,
  parseTransaction,
  RpcRequestError,
  recoverTransactionAddress,
  TransactionNotFoundError,
  TransactionReceiptNotFoundError,
  type TransactionSerialized,
  toEventSelector,
  toFunctionSelector,
} from "viem"
import { privateKeyToAccount } from "viem/accounts"
import { assert } from "../../../domain/assert.ts"
import type { SigningKey } from "../../../domain/custody/derive.ts"
import {
  BroadcastRejected,
  type ChainAdapter,
  type ChainAsset,
  type InclusionProof,
  type IncomingTransfer,
  type IncomingTransfersQuery,
  InsufficientFundsForFee,
  InvalidChainAddress,
  incoming_addresses_max,
  incoming_block_range_max,
  NonceTooLow,
  QueryTooWide,
  type SignedTransfer,
  type SignOptions,
  type TransactionStatus,
  type TransferIntent,
  TransferWouldRevert,
} from "../../../src/ports/chain.ts"
import { describeRevert } from "./revert.ts"

export interface EvmChainConfig {
  readonly chain_id: number
  readonly rpc_url: string
  /** Confirmations (1 = in the newest block) from which a transaction counts as finalized. */
  readonly finality_confirmations: number
  /** Per-request timeout of the RPC transport. */
  readonly rpc_timeout_ms?: number
}

/**
 * Headroom over the estimated gas limit: an ERC-20 transfer costs more if the recipient's balance
 * went from zero meanwhile, and an out-of-gas revert would still burn the fee. Unused gas is refunded.
 */
const gas_margin_percent = 20n
const rpc_timeout_ms_default = 10_000
/** A plain transfer without data costs exactly this much gas. */
const replacement_gas = 21_000n
/** Above the 10 % most nodes require of a replacement's fees, with room for rounding. */
const replacement_bump_percent = 13n
const transfer_event = getAbiItem({ abi: erc20Abi, name: "Transfer" })
const transfer_topic = toEventSelector(transfer_event)
const transfer_selector = toFunctionSelector(getAbiItem({ abi: erc20Abi, name: "transfer" }))

/**
 * Makes the adapter for one EVM chain.
 * @example const adapter = makeEvmAdapter({ chain_id: 31337, rpc_url: node.rpc_url, finality_confirmations: 12 })
 */
export function makeEvmAdapter(config: EvmChainConfig): ChainAdapter {
  assert(config.finality_confirmations >= 1, "finality needs at least one confirmation")
  const client = createPublicClient({
    // Confirmations count from the newest block: a cached block number would understate them.
    cacheTime: 0,
    transport: http(config.rpc_url, { timeout: config.rpc_timeout_ms ?? rpc_timeout_ms_default }),
  })
  return {
    estimateTransferFee: (from, intent) =>
      Effect.gen(function* () {
        const sender = yield* parseAddress(from)
        const call = yield* transferCall(intent)
        const gas = yield* estimateGas(client, sender, call)
        const fees = yield* Effect.promise(() => client.estimateFeesPerGas())
        return withMargin(gas) * fees.maxFeePerGas
      }),
    signTransfer: (key, intent, options) => signTransfer(client, config, key, intent, options ?? {}),
    signReplacement: (key, raw) => {
      assert(isHex(raw) && raw.length > 2, "a replacement replaces raw bytes signTransfer returned")
      return signReplacement(client, config, key, raw)
    },
    broadcast: (raw) => {
      assert(isHex(raw) && raw.length > 2, "broadcast takes the raw bytes signTransfer returned")
      return broadcast(client, raw)
    },
    transactionStatus: (tx_hash, log_index) => {
      assert(isHex(tx_hash) && tx_hash.length === 66, "a transaction hash is 32 bytes of hex")
      return transactionStatus(client, config, tx_hash, log_index === undefined)
    },
    balance: (address, asset) =>
      Effect.gen(function* () {
        const owner = yield* parseAddress(address)
        return yield* readBalance(client, owner, asset)
      }),
    blockNumber: () => Effect.promise(() => client.getBlockNumber()),
    incomingTransfers: (query) => incomingTransfers(client, query),
  }
}

/** A contract call or value transfer, ready to estimate or sign. */
interface Call {
  readonly to: Address
  readonly value: bigint
  readonly data: Hex | undefined
}

function transferCall(intent: TransferIntent): Effect.Effect<Call, InvalidChainAddress> {
  return Effect.gen(function* () {
    assert(intent.amount > 0n, "a transfer amount is positive")
    const recipient = yield* parseAddress(intent.to)
    switch (intent.asset.kind) {
      case "native":
        return { to: recipient, value: intent.amount, data: undefined }
      case "token": {
        const contract = yield* parseAddress(intent.asset.contract)
        const data = encodeFunctionData({
          abi: erc20Abi,
          functionName: "transfer",
          args: [recipient, intent.amount],
        })
        return { to: contract, value: 0n, data }
      }
    }
  })
}

function signTransfer(
  client: PublicClient,
  config: EvmChainConfig,
  key: SigningKey,
  intent: TransferIntent,
  options: SignOptions,
): Effect.Effect<SignedTransfer, InvalidChainAddress | InsufficientFundsForFee | TransferWouldRevert> {
  return Effect.gen(function* () {
    assert(key.curve === "secp256k1", "an EVM key is secp256k1")
    const account = privateKeyToAccount(`0x${bytesToHex(key.exposeSecret())}`)
    const call = yield* transferCall(intent)
    const [gas_estimate, fees, nonce, available] = yield* Effect.all(
      [
        estimateGas(client, account.address, call),
        Effect.promise(() => client.estimateFeesPerGas()),
        options.nonce === undefined
          ? Effect.promise(() =>
              client.getTransactionCount({ address: account.address, blockTag: "pending" }),
            )
          : Effect.succeed(options.nonce),
        Effect.promise(() => client.getBalance({ address: account.address })),
      ],
      { concurrency: "unbounded" },
    )
    const gas = withMargin(gas_estimate)
    const fee_max = gas * fees.maxFeePerGas
    if (available < fee_max + call.value) {
      return yield* new InsufficientFundsForFee({
        address: account.address,
        required: fee_max + call.value,
        available,
      })
    }
    const raw = yield* Effect.promise(() =>
      account.signTransaction({
        type: "eip1559",
        chainId: config.chain_id,
        nonce,
        to: call.to,
        value: call.value,
        ...(call.data === undefined ? {} : { data: call.data }),
        gas,
        maxFeePerGas: fees.maxFeePerGas,
        maxPriorityFeePerGas: fees.maxPriorityFeePerGas,
      }),
    )
    return { raw, tx_hash: keccak256(raw), from: account.address, nonce, fee_max }
  })
}

/**
 * A zero-value transfer to the sender itself at `raw`'s nonce, its fees `replacement_bump_percent`
 * above `raw`'s (rounded up) or at current prices, whichever is higher: nodes refuse a replacement
 * that does not raise both fees by their minimum bump (geth: 10 %).
 */
function signReplacement(
  client: PublicClient,
  config: EvmChainConfig,
  key: SigningKey,
  raw: Hex,
): Effect.Effect<SignedTransfer, InsufficientFundsForFee> {
  return Effect.gen(function* () {
    assert(key.curve === "secp256k1", "an EVM key is secp256k1")
    const account = privateKeyToAccount(`0x${bytesToHex(key.exposeSecret())}`)
    const replaced = parseTransaction(raw)
    const sender = yield* Effect.promise(() =>
      recoverTransactionAddress({ serializedTransaction: raw as TransactionSerialized }),
    )
    assert(sender === account.address, "a replacement is signed by the sender of the transaction it replaces")
    assert(replaced.nonce !== undefined, "a signed EIP-1559 transaction has a nonce")
    const [fees, available] = yield* Effect.all(
      [
        Effect.promise(() => client.estimateFeesPerGas()),
        Effect.promise(() => client.getBalance({ address: account.address })),
      ],
      { concurrency: "unbounded" },
    )
    const maxFeePerGas = max(bumped(replaced.maxFeePerGas ?? 0n), fees.maxFeePerGas)
    const maxPriorityFeePerGas = max(bumped(replaced.maxPriorityFeePerGas ?? 0n), fees.maxPriorityFeePerGas)
    const fee_max = replacement_gas * maxFeePerGas
    if (available < fee_max) {
      return yield* new InsufficientFundsForFee({ address: account.address, required: fee_max, available })
    }
    const signed = yield* Effect.promise(() =>
      account.signTransaction({
        type: "eip1559",
        chainId: config.chain_id,
        nonce: replaced.nonce ?? 0,
        to: account.address,
        value: 0n,
        gas: replacement_gas,
        maxFeePerGas,
        maxPriorityFeePerGas: min(maxPriorityFeePerGas, maxFeePerGas),
      }),
    )
    return {
      raw: signed,
      tx_hash: keccak256(signed),
      from: account.address,
      nonce: replaced.nonce ?? 0,
      fee_max,
    }
  })
}

function bumped(fee_per_gas: bigint): bigint {
  return fee_per_gas + (fee_per_gas * replacement_bump_percent + 99n) / 100n
}

function max(a: bigint, b: bigint): bigint {
  return a > b ? a : b
}

function min(a: bigint, b: bigint): bigint {
  return a < b ? a : b
}

/**
 * Sends the raw bytes. When the node refuses them but already holds a transaction with their hash
 * (in its pool or in a block), this is a rebroadcast and succeeds: the same bytes cannot spend twice.
 */
function broadcast(
  client: PublicClient,
  raw: Hex,
): Effect.Effect<{ readonly tx_hash: string }, InsufficientFundsForFee | NonceTooLow | BroadcastRejected> {
  return Effect.gen(function* () {
    const tx_hash = keccak256(raw)
    const sent = yield* attempt(() => client.sendRawTransaction({ serializedTransaction: raw }))
    if (sent.ok) {
      assert(sent.value.toLowerCase() === tx_hash, "the node names a transaction by the hash of its bytes")
      return { tx_hash }
    }
    const reason = rejectionReason(sent.error)
    if (reason === null) return yield* Effect.die(sent.error)
    if (yield* isKnown(client, tx_hash)) return { tx_hash }
    if (/nonce too low|nonce has already been used/i.test(reason)) {
      return yield* new NonceTooLow({ tx_hash, nonce: parseTransaction(raw).nonce ?? 0 })
    }
    if (/insufficient funds/i.test(reason)) {
      const transaction = parseTransaction(raw)
      const address = yield* Effect.promise(() =>
        recoverTransactionAddress({ serializedTransaction: raw as TransactionSerialized }),
      )
      const available = yield* Effect.promise(() => client.getBalance({ address }))
      const required = (transaction.gas ?? 0n) * (transaction.maxFeePerGas ?? 0n) + (transaction.value ?? 0n)
      return yield* new InsufficientFundsForFee({ address, required, available })
    }
    return yield* new BroadcastRejected({ tx_hash, reason })
  })
}

function isKnown(client: PublicClient, hash: Hex): Effect.Effect<boolean> {
  return Effect.gen(function* () {
    const found = yield* attempt(() => client.getTransaction({ hash }))
    if (found.ok) return true
    if (found.error instanceof TransactionNotFoundError) return false
    return yield* Effect.die(found.error)
  })
}

/**
 * `own_transfer`: the transaction is one the platform signed (no `log_index` given), so a token
 * transfer counts only with its Transfer log; a deposit's status (with its log's index) is its
 * receipt's, since a sender's contract may move the tokens by a call of its own.
 */
function transactionStatus(
  client: PublicClient,
  config: EvmChainConfig,
  hash: Hex,
  own_transfer: boolean,
): Effect.Effect<TransactionStatus> {
  return Effect.gen(function* () {
    const found = yield* attempt(() => client.getTransactionReceipt({ hash }))
    if (!found.ok) {
      if (!(found.error instanceof TransactionReceiptNotFoundError)) return yield* Effect.die(found.error)
      // No receipt: still in the pool (seen), or known nowhere (dropped). A transaction mined
      // between the two reads shows as seen, and as confirmed on the next poll.
      return (yield* isKnown(client, hash))
        ? { status: "seen", tx_hash: hash }
        : { status: "dropped", tx_hash: hash }
    }
    const receipt = found.value
    const latest = yield* Effect.promise(() => client.getBlockNumber())
    const transfer_log = receipt.logs.find((log) => log.topics[0] === transfer_topic)
    const proof: InclusionProof = {
      tx_hash: receipt.transactionHash,
      block_number: receipt.blockNumber,
      block_hash: receipt.blockHash,
      log_index: receipt.status === "success" ? (transfer_log?.logIndex ?? null) : null,
      confirmations: Number(latest - receipt.blockNumber + 1n),
    }
    // A revert is final only with its block: a reorganisation can still order the transaction
    // where it succeeds, so until then it reads confirmed (in a block, not yet decided).
    if (proof.confirmations < config.finality_confirmations) return { status: "confirmed", proof }
    if (receipt.status === "reverted") return { status: "reverted", proof }
    if (!own_transfer) return { status: "finalized", proof }
    const sent = yield* Effect.promise(() => client.getTransaction({ hash }))
    const moved = tokenTransferLog(sent, receipt.logs)
    if (moved === undefined) return { status: "finalized", proof }
    // A token that answers `transfer` with false, or moves nothing without reverting, leaves the
    // call's success without its Transfer log: nothing moved, as in a revert (the fee was paid).
    if (moved === null) return { status: "reverted", proof: { ...proof, log_index: null } }
    return { status: "finalized", proof: { ...proof, log_index: moved.logIndex } }
  })
}

/**
 * For a direct ERC-20 `transfer(to, amount)` call (the only token call the platform signs), the
 * log of the token contract that records a transfer from the sender to `to`, or null without one;
 * undefined for any other transaction (a native transfer, a deposit made through another contract),
 * whose success is its receipt's.
 */
function tokenTransferLog(
  sent: { readonly from: Address; readonly to: Address | null; readonly input: Hex },
  logs: ReadonlyArray<{
    readonly address: Address
    readonly topics: ReadonlyArray<Hex>
    readonly logIndex: number
  }>,
): { readonly logIndex: number } | null | undefined {
  if (sent.to === null || sent.input.slice(0, 10).toLowerCase() !== transfer_selector) return undefined
  let call: ReturnType<typeof decodeFunctionData<typeof erc20Abi>>
  try {
    call = decodeFunctionData({ abi: erc20Abi, data: sent.input })
  } catch {
    return undefined
  }
  if (call.functionName !== "transfer") return undefined
  const [recipient] = call.args
  const topicOf = (address: Address) => pad(address.toLowerCase() as Hex, { size: 32 })
  const found = logs.find(
    (log) =>
      log.address.toLowerCase() === sent.to?.toLowerCase() &&
      log.topics[0] === transfer_topic &&
      log.topics[1]?.toLowerCase() === topicOf(sent.from) &&
      log.topics[2]?.toLowerCase() === topicOf(recipient),
  )
  return found ?? null
}

function readBalance(client: PublicClient, owner: Address, asset: ChainAsset) {
  return Effect.gen(function* () {
    switch (asset.kind) {
      case "native":
        return yield* Effect.promise(() => client.getBalance({ address: owner }))
      case "token": {
        const contract = yield* parseAddress(asset.contract)
        return yield* Effect.promise(() =>
          client.readContract({ address: contract, abi: erc20Abi, functionName: "balanceOf", args: [owner] }),
        )
      }
    }
  })
}

function incomingTransfers(
  client: PublicClient,
  query: IncomingTransfersQuery,
): Effect.Effect<ReadonlyArray<IncomingTransfer>, InvalidChainAddress | QueryTooWide> {
  return Effect.gen(function* () {
    const span = query.to_block - query.from_block + 1n
    if (span < 1n || span > incoming_block_range_max) {
      return yield* new QueryTooWide({ reason: `${span} blocks; 1 to ${incoming_block_range_max} allowed` })
    }
    if (query.addresses.length === 0) return []
    if (query.addresses.length > incoming_addresses_max) {
      return yield* new QueryTooWide({
        reason: `${query.addresses.length} addresses; ${incoming_addresses_max} at most`,
      })
    }
    const contract = yield* parseAddress(query.contract)
    const recipients = yield* Effect.forEach(query.addresses, parseAddress)
    const [logs, latest] = yield* Effect.all([
      Effect.promise(() =>
        client.getLogs({
          address: contract,
          event: transfer_event,
          args: { to: recipients },
          fromBlock: query.from_block,
          toBlock: query.to_block,
          strict: true,
        }),
      ),
      Effect.promise(() => client.getBlockNumber()),
    ])
    return logs.map(
      (log): IncomingTransfer => ({
        contract,
        from: log.args.from,
        to: log.args.to,
        amount: log.args.value,
        proof: {
          tx_hash: log.transactionHash,
          block_number: log.blockNumber,
          block_hash: log.blockHash,
          log_index: log.logIndex,
          confirmations: Number(latest - log.blockNumber + 1n),
        },
      }),
    )
  })
}

function estimateGas(
  client: PublicClient,
  from: Address,
  call: Call,
): Effect.Effect<bigint, TransferWouldRevert> {
  return Effect.gen(function* () {
    const estimated = yield* attempt(() =>
      client.estimateGas({
        account: from,
        to: call.to,
        value: call.value,
        ...(call.data === undefined ? {} : { data: call.data }),
      }),
    )
    if (estimated.ok) return estimated.value
    const reason = rejectionReason(estimated.error)
    if (reason === null) return yield* Effect.die(estimated.error)
    return yield* new TransferWouldRevert({ reason })
  })
}

function parseAddress(address: string): Effect.Effect<Address, InvalidChainAddress> {
  return isAddress(address)
    ? Effect.succeed(getAddress(address))
    : Effect.fail(new InvalidChainAddress({ address }))
}

type Attempt<A> = { readonly ok: true; readonly value: A } | { readonly ok: false; readonly error: unknown }

/** Runs a node call and keeps its failure as a value, for the caller to classify. */
function attempt<A>(run: () => Promise<A>): Effect.Effect<Attempt<A>> {
  return Effect.promise(() =>
    run().then(
      (value): Attempt<A> => ({ ok: true, value }),
      (error: unknown): Attempt<A> => ({ ok: false, error }),
    ),
  )
}

/**
 * The node's own words when it answered with a JSON-RPC error; null for any other failure (no
 * answer, a timeout, a bug), which is not the node's refusal and becomes a defect.
 */
function rejectionReason(error: unknown): string | null {
  const answer = error instanceof BaseError ? error.walk((cause) => cause instanceof RpcRequestError) : null
  if (!(answer instanceof RpcRequestError)) return null
  // A custom error comes as its selector and raw arguments: said in words where it is known.
  const described = describeRevert(answer.data)
  return described === undefined ? answer.details : `execution reverted: ${described}`
}

/** The gas limit to sign for an estimate; the fee estimate uses it too, so a reservation covers it. */
function withMargin(gas_estimate: bigint): bigint {
  return gas_estimate + (gas_estimate * gas_margin_percent + 99n) / 100n
}
