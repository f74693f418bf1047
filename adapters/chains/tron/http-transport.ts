/**
 * The Tron transport over a full node's HTTP API (java-tron `/wallet/*`, as TronGrid serves it):
 * `CHAIN_RPC_URL_TRON` points at it, `CHAIN_API_KEY_TRON` is sent as `TRON-PRO-API-KEY` when set. Every
 * answer is decoded with a schema; a fetch failure, a non-2xx status or an answer that does not
 * decode becomes a defect. Addresses are asked for in hex (no `visible`), so log addresses come
 * back as the node stores them. No Tron node can run here: the block and transaction reads are
 * tested against a local server answering in java-tron's documented JSON shapes
 * (test/unit/chains-tron-incoming.test.ts); broadcasting, accounts, simulation and chain
 * parameters are not exercised.
 */
import { bytesToHex, hexToBytes } from "@noble/hashes/utils.js"
import { Effect, Schema } from "effect"
import { type ReferenceBlock, tronTransactionId } from "./transaction.ts"
import type {
  TronBroadcastAnswer,
  TronResourcePrices,
  TronSimulation,
  TronTransactionInfo,
  TronTransport,
} from "./transport.ts"

export interface TronHttpConfig {
  /** The full node's base URL, e.g. `https://api.trongrid.io` (CHAIN_RPC_URL_TRON). */
  readonly full_node_url: string
  /** TronGrid's API key (CHAIN_API_KEY_TRON); other nodes need none. */
  readonly api_key?: string
  readonly request_timeout_ms: number
}

const Block = Schema.Struct({
  blockID: Schema.String,
  block_header: Schema.Struct({
    raw_data: Schema.Struct({ number: Schema.Number, timestamp: Schema.Number }),
  }),
})
/** A block with its transactions; `{}` when the node has no block at that number. */
const MaybeBlock = Schema.Struct({
  blockID: Schema.optional(Schema.String),
  transactions: Schema.optional(Schema.Array(Schema.Struct({ txID: Schema.String }))),
})
const Broadcast = Schema.Struct({
  result: Schema.optional(Schema.Boolean),
  code: Schema.optional(Schema.String),
  message: Schema.optional(Schema.String),
})
const Info = Schema.Struct({
  blockNumber: Schema.optional(Schema.Number),
  result: Schema.optional(Schema.String),
  receipt: Schema.optional(Schema.Struct({ result: Schema.optional(Schema.String) })),
  log: Schema.optional(
    Schema.Array(
      Schema.Struct({ address: Schema.String, topics: Schema.Array(Schema.String), data: Schema.String }),
    ),
  ),
})
const BlockInfos = Schema.Array(
  Schema.Struct({ ...Info.fields, id: Schema.String, blockNumber: Schema.Number }),
)
const Pending = Schema.Struct({ txID: Schema.optional(Schema.String) })
const RawTransaction = Schema.Struct({ raw_data_hex: Schema.optional(Schema.String) })
const Account = Schema.Struct({
  address: Schema.optional(Schema.String),
  balance: Schema.optional(Schema.Number),
})
const Constant = Schema.Struct({
  result: Schema.Struct({ result: Schema.optional(Schema.Boolean), message: Schema.optional(Schema.String) }),
  energy_used: Schema.optional(Schema.Number),
  constant_result: Schema.optional(Schema.Array(Schema.String)),
  transaction: Schema.optional(
    Schema.Struct({
      ret: Schema.optional(Schema.Array(Schema.Struct({ ret: Schema.optional(Schema.String) }))),
    }),
  ),
})
const Parameters = Schema.Struct({
  chainParameter: Schema.Array(Schema.Struct({ key: Schema.String, value: Schema.optional(Schema.Number) })),
})

/**
 * A transport against one full node.
 * @example makeTronHttpTransport({ full_node_url: process.env.CHAIN_RPC_URL_TRON ?? "", request_timeout_ms: 5_000 })
 */
export function makeTronHttpTransport(config: TronHttpConfig): TronTransport {
  const post = <A>(path: string, body: object, schema: Schema.Codec<A, unknown>) =>
    // The signal aborts the request when the effect is interrupted (a sibling block read failed).
    Effect.promise(async (interrupted) => {
      const response = await fetch(new URL(path, config.full_node_url), {
        method: "POST",
        headers: {
          "content-type": "application/json",
          ...(config.api_key === undefined ? {} : { "TRON-PRO-API-KEY": config.api_key }),
        },
        body: JSON.stringify(body),
        signal: AbortSignal.any([interrupted, AbortSignal.timeout(config.request_timeout_ms)]),
      })
      if (!response.ok) throw new Error(`Tron full node ${path} answered HTTP ${response.status}`)
      return Schema.decodeUnknownSync(schema)(await response.json())
    })

  return {
    nowBlock: () =>
      post("/wallet/getnowblock", {}, Block).pipe(
        Effect.map(
          (block): ReferenceBlock => ({
            number: BigInt(block.block_header.raw_data.number),
            id: hexToBytes(block.blockID),
            timestamp_ms: BigInt(block.block_header.raw_data.timestamp),
          }),
        ),
      ),
    block: (number) =>
      post("/wallet/getblockbynum", { num: Number(number) }, MaybeBlock).pipe(
        Effect.map((block) =>
          block.blockID === undefined
            ? null
            : {
                id: hexToBytes(block.blockID),
                tx_ids: (block.transactions ?? []).map((transaction) => transaction.txID.toLowerCase()),
              },
        ),
      ),
    blockTransactionInfos: (number) =>
      post("/wallet/gettransactioninfobyblocknum", { num: Number(number) }, BlockInfos).pipe(
        Effect.map((infos) =>
          infos.map((info) => ({ tx_id: info.id.toLowerCase(), ...transactionInfo(info, info.blockNumber) })),
        ),
      ),
    broadcastHex: (transaction_hex) =>
      post("/wallet/broadcasthex", { transaction: transaction_hex }, Broadcast).pipe(
        Effect.map(broadcastAnswer),
      ),
    transactionInfo: (tx_id_hex) =>
      post("/wallet/gettransactioninfobyid", { value: tx_id_hex }, Info).pipe(
        Effect.map((info) =>
          info.blockNumber === undefined ? null : transactionInfo(info, info.blockNumber),
        ),
      ),
    transactionRawData: (tx_id_hex) =>
      post("/wallet/gettransactionbyid", { value: tx_id_hex }, RawTransaction).pipe(
        Effect.map((answer) => {
          if (answer.raw_data_hex === undefined) return null
          const raw_data = hexToBytes(answer.raw_data_hex)
          if (bytesToHex(tronTransactionId(raw_data)) !== tx_id_hex.toLowerCase()) {
            throw new Error(`Tron full node answered another transaction's bytes for ${tx_id_hex}`)
          }
          return raw_data
        }),
      ),
    isPending: (tx_id_hex) =>
      post("/wallet/gettransactionfrompending", { value: tx_id_hex }, Pending).pipe(
        Effect.map((answer) => answer.txID !== undefined),
      ),
    account: (address) =>
      post("/wallet/getaccount", { address, visible: true }, Account).pipe(
        Effect.map((account) => ({
          exists: account.address !== undefined,
          balance_sun: BigInt(account.balance ?? 0),
        })),
      ),
    simulate: (owner, contract, data) =>
      post(
        "/wallet/triggerconstantcontract",
        { owner_address: owner, contract_address: contract, data: bytesToHex(data), visible: true },
        Constant,
      ).pipe(Effect.map(simulation)),
    resourcePrices: () => post("/wallet/getchainparameters", {}, Parameters).pipe(Effect.map(resourcePrices)),
  }
}

function transactionInfo(info: typeof Info.Type, block_number: number): TronTransactionInfo {
  return {
    block_number: BigInt(block_number),
    // A TRX transfer has no receipt result; a failed one says so in `result`.
    succeeded: info.result !== "FAILED" && (info.receipt?.result ?? "SUCCESS") === "SUCCESS",
    logs: info.log ?? [],
  }
}

function broadcastAnswer(answer: typeof Broadcast.Type): TronBroadcastAnswer {
  if (answer.result === true) return { accepted: true }
  return { accepted: false, code: answer.code ?? "UNKNOWN", message: hexText(answer.message ?? "") }
}

function simulation(answer: typeof Constant.Type): TronSimulation {
  const failed = answer.transaction?.ret?.some((ret) => ret.ret === "FAILED") ?? false
  if (answer.result.result !== true || failed) {
    return { reverted: true, reason: hexText(answer.result.message ?? "the contract call failed") }
  }
  return {
    reverted: false,
    energy_used: BigInt(answer.energy_used ?? 0),
    result: hexToBytes(answer.constant_result?.[0] ?? ""),
  }
}

function resourcePrices(answer: typeof Parameters.Type): TronResourcePrices {
  const value = (key: string): bigint => {
    const parameter = answer.chainParameter.find((candidate) => candidate.key === key)
    if (parameter?.value === undefined) throw new Error(`Tron chain parameter ${key} is missing`)
    return BigInt(parameter.value)
  }
  return {
    bandwidth_sun_per_byte: value("getTransactionFee"),
    energy_sun_per_unit: value("getEnergyFee"),
    account_activation_sun: value("getCreateNewAccountFeeInSystemContract") + value("getCreateAccountFee"),
  }
}

/** Nodes hex-encode their error messages; show them as text when they are, verbatim when not. */
function hexText(message: string): string {
  if (!/^(?:[0-9a-fA-F]{2})+$/.test(message)) return message
  return new TextDecoder().decode(hexToBytes(message))
}
