import { encodeErrorResult, getAddress, parseAbi } from "viem"
import { describe, expect, it } from "vitest"
import { describeRevert } from "../../adapters/chains/evm/revert.ts"

const abi = parseAbi([
  "error AccountBlocked(address account)",
  "error InsufficientBalance(address account, uint256 balance, uint256 needed)",
  "error ERC20InsufficientBalance(address sender, uint256 balance, uint256 needed)",
  "error ZeroAddress()",
  "error Error(string)",
  "error Panic(uint256)",
  "error SomethingElse(uint256)",
])
const holder = getAddress("0x00000000000000000000000000000000000000aa")

describe("describeRevert", () => {
  it("names a token's custom error, its arguments and what it means to the sender", () => {
    expect(describeRevert(encodeErrorResult({ abi, errorName: "AccountBlocked", args: [holder] }))).toBe(
      `AccountBlocked(${holder}): the token's issuer has blocked this account`,
    )
    expect(
      describeRevert(encodeErrorResult({ abi, errorName: "InsufficientBalance", args: [holder, 5n, 7n] })),
    ).toBe(
      `InsufficientBalance(${holder}, 5, 7): the sending address holds less of the token than the amount (in base units)`,
    )
    expect(
      describeRevert(
        encodeErrorResult({ abi, errorName: "ERC20InsufficientBalance", args: [holder, 0n, 1n] }),
      ),
    ).toMatch(/^ERC20InsufficientBalance\(0x0{38}[aA]{2}, 0, 1\): the sending address holds less/)
    expect(describeRevert(encodeErrorResult({ abi, errorName: "ZeroAddress" }))).toBe(
      "ZeroAddress(): the zero address cannot send or receive the token",
    )
  })

  it("gives Solidity's own reasons: a require message as written, a panic with its code", () => {
    expect(
      describeRevert(
        encodeErrorResult({ abi, errorName: "Error", args: ["Blacklistable: account is blacklisted"] }),
      ),
    ).toBe("Blacklistable: account is blacklisted")
    expect(describeRevert(encodeErrorResult({ abi, errorName: "Error", args: ["x".repeat(500)] }))).toBe(
      "x".repeat(200),
    )
    expect(describeRevert(encodeErrorResult({ abi, errorName: "Panic", args: [17n] }))).toMatch(
      /^Panic\(17\): the contract failed an internal check$/,
    )
  })

  it("leaves what it does not know to the node's own words", () => {
    expect(describeRevert(encodeErrorResult({ abi, errorName: "SomethingElse", args: [1n] }))).toBeUndefined()
    for (const data of [undefined, null, 42, "", "0x", "0x1234", "not hex", "0x28e9b385", { data: "0x" }]) {
      expect(describeRevert(data), JSON.stringify(data)).toBeUndefined()
    }
  })
})
