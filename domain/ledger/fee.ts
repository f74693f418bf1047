/**
 * The payment fee and the transfers that charge it. The fee is 0.3 % of the amount, rounded to the
 * asset's smallest unit half to even ("banker's rounding"): exact halves go to the even neighbour,
 * so over many payments rounding neither favours the platform nor the payer.
 */
import { assert } from "../assert.ts"
import type { CreateTransfers, TransferSpec } from "./commands.ts"

/** The fee rate as an exact fraction: 3 / 1000 = 0.3 %. */
export const paymentFeeRateNumerator = 3n
export const paymentFeeRateDenominator = 1000n

/**
 * numerator / denominator rounded to the nearest integer, exact halves to the even one. Symmetric
 * for negative values (-2.5 -> -2).
 * @example divideRoundHalfEven(15n, 10n) // 2n (1.5 -> 2)
 * @example divideRoundHalfEven(25n, 10n) // 2n (2.5 -> 2)
 * @example divideRoundHalfEven(26n, 10n) // 3n
 */
export function divideRoundHalfEven(numerator: bigint, denominator: bigint): bigint {
  assert(denominator !== 0n, "no division by zero")
  const negative = numerator < 0n !== denominator < 0n
  const n = numerator < 0n ? -numerator : numerator
  const d = denominator < 0n ? -denominator : denominator
  const quotient = n / d
  const twiceRemainder = (n % d) * 2n
  const roundUp = twiceRemainder > d || (twiceRemainder === d && quotient % 2n === 1n)
  const magnitude = roundUp ? quotient + 1n : quotient
  return negative ? -magnitude : magnitude
}

/**
 * The fee on a payment of `amount` minor units: 0.3 %, half to even.
 * @example paymentFee(10_000n) // 30n
 * @example paymentFee(500n) // 2n (1.5 rounds to even 2)
 * @example paymentFee(1_500n) // 4n (4.5 rounds to even 4)
 * @example paymentFee(166n) // 0n (0.498)
 */
export function paymentFee(amount: bigint): bigint {
  assert(amount >= 0n, "a payment amount is not negative")
  return divideRoundHalfEven(amount * paymentFeeRateNumerator, paymentFeeRateDenominator)
}

/**
 * What the payer is charged for a payment of `amount`: the amount plus its fee.
 * @example paymentCharge(10_000n) // 10_030n
 */
export function paymentCharge(amount: bigint): bigint {
  return amount + paymentFee(amount)
}

export interface PaymentTransfersInput {
  /** Names the linked group in the events. */
  readonly group_id: string
  readonly payment_transfer_id: string
  readonly fee_transfer_id: string
  readonly payer_account_id: string
  readonly payee_account_id: string
  readonly fee_account_id: string
  /** What the payee receives, in minor units. */
  readonly amount: bigint
  readonly code: number
  /** Code of the fee transfer; defaults to `code`. */
  readonly fee_code?: number
  readonly user_data: string | null
  /** Reserve both transfers (two-phase) instead of posting them, e.g. while a chain confirms. */
  readonly pending?: { readonly timeout_ms: number }
  readonly now_ms: number
}

/**
 * The command for a payment: payer -> payee `amount` and payer -> fee account `paymentFee(amount)`,
 * as one linked group so the payment never goes through without its fee. The fee transfer is left
 * out when the fee rounds to zero (the ledger refuses zero amounts); the payment is then alone and a
 * refusal comes back as its plain reason rather than LinkedTransferFailed.
 * @example paymentTransfers({ amount: 10_000n, ... }) // transfers of 10_000n and 30n
 */
export function paymentTransfers(input: PaymentTransfersInput): CreateTransfers {
  const fee = paymentFee(input.amount)
  const pending = input.pending === undefined ? {} : { pending: { timeout_ms: input.pending.timeout_ms } }
  const payment: TransferSpec = {
    transfer_id: input.payment_transfer_id,
    debit_account_id: input.payer_account_id,
    credit_account_id: input.payee_account_id,
    amount: input.amount,
    code: input.code,
    user_data: input.user_data,
    ...pending,
  }
  const feeTransfer: TransferSpec = {
    transfer_id: input.fee_transfer_id,
    debit_account_id: input.payer_account_id,
    credit_account_id: input.fee_account_id,
    amount: fee,
    code: input.fee_code ?? input.code,
    user_data: input.user_data,
    ...pending,
  }
  return {
    type: "CreateTransfers",
    group_id: input.group_id,
    transfers: fee === 0n ? [payment] : [payment, feeTransfer],
    now_ms: input.now_ms,
  }
}
