/**
 * Revert data in words. A node's simulation that fails on a custom error says only
 * `execution reverted: custom error 0x28e9b385: 000…`; the errors token contracts raise on a
 * transfer are decoded here into their name, their arguments and what they mean, so that a
 * refused transfer tells its sender why (the account is blocked, the balance is short...).
 *
 * Known: the platform's sandbox stablecoin (contracts/PlatformStablecoin.sol), OpenZeppelin's
 * ERC-6093 errors (most tokens since OpenZeppelin 5), and Solidity's own `Error(string)` and
 * `Panic(uint256)`, which viem decodes without an ABI. Anything else is left as the node wrote it.
 */
import { decodeErrorResult, type Hex, isHex, parseAbi } from "viem"

const token_errors = parseAbi([
  "error NotIssuer(address caller)",
  "error ZeroAddress()",
  "error AccountBlocked(address account)",
  "error AccountFrozen(address account)",
  "error InsufficientBalance(address account, uint256 balance, uint256 needed)",
  "error InsufficientAllowance(address owner, address spender, uint256 allowance, uint256 needed)",
  "error ERC20InsufficientBalance(address sender, uint256 balance, uint256 needed)",
  "error ERC20InvalidSender(address sender)",
  "error ERC20InvalidReceiver(address receiver)",
  "error ERC20InsufficientAllowance(address spender, uint256 allowance, uint256 needed)",
  "error EnforcedPause()",
])

/** What each known error means to the sender of a transfer. */
const meaning: Readonly<Record<string, string>> = {
  NotIssuer: "only the token's issuer may do this",
  ZeroAddress: "the zero address cannot send or receive the token",
  AccountBlocked: "the token's issuer has blocked this account",
  AccountFrozen: "the token's issuer has frozen this account",
  InsufficientBalance: "the sending address holds less of the token than the amount (in base units)",
  InsufficientAllowance: "the allowance is smaller than the amount (in base units)",
  ERC20InsufficientBalance: "the sending address holds less of the token than the amount (in base units)",
  ERC20InvalidSender: "the token refuses this sender",
  ERC20InvalidReceiver: "the token refuses this recipient",
  ERC20InsufficientAllowance: "the allowance is smaller than the amount (in base units)",
  EnforcedPause: "the token's transfers are paused",
  Panic: "the contract failed an internal check",
}

/** Addresses and numbers as they are; other strings quoted, and cut at 200 characters. */
const argumentText = (value: unknown): string => {
  if (typeof value !== "string") return String(value)
  if (isHex(value)) return value
  return JSON.stringify(value.length > 200 ? `${value.slice(0, 200)}…` : value)
}

/**
 * The revert's name, arguments and meaning, e.g. `AccountBlocked(0xF3f5…) — the token's issuer has
 * blocked this account`; `undefined` when the data is not one of the known errors.
 */
export function describeRevert(data: unknown): string | undefined {
  if (typeof data !== "string" || !isHex(data) || data.length < 10) return undefined
  let decoded: { readonly errorName: string; readonly args: ReadonlyArray<unknown> | undefined }
  try {
    decoded = decodeErrorResult({ abi: token_errors, data: data as Hex })
  } catch {
    return undefined
  }
  const args = decoded.args ?? []
  // Error(string) is the reason itself: the node usually writes it out already, but not always.
  if (decoded.errorName === "Error") return String(args[0]).slice(0, 200)
  const call = `${decoded.errorName}(${args.map(argumentText).join(", ")})`
  const means = meaning[decoded.errorName]
  return means === undefined ? call : `${call}: ${means}`
}
