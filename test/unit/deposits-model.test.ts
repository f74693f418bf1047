// Proves the deposit decisions as tables of cases, the ugly ones included: how one scan's sightings
// update, move or add rows (a re-included transaction keeps its row, a credited row is never
// touched, places stay unique), when a `seen` row is credited, orphaned or left to wait, and that
// the simulator's deposit.confirmed sample has the real event's fields.
import { describe, expect, it } from "vitest"
import {
  type DepositRow,
  depositLedgerId,
  judgeSeenDeposit,
  planSightings,
  type Sighting,
  toDepositEvent,
} from "../../src/deposits/model.ts"
import type { InclusionProof, TransactionStatus } from "../../src/ports/chain.ts"
import { sampleEventData } from "../../src/webhooks/simulate.ts"

const asset = { code: "USDC@ethereum", symbol: "USDC", chain: "ethereum", decimals: 6 }
const tonAsset = { code: "USDT@ton", symbol: "USDT", chain: "ton", decimals: 6 }
const tx = "0xaaaa"

const sighting = (log_index: number, block_hash: string, extra: Partial<Sighting> = {}): Sighting => ({
  tenant_id: "ten_1",
  wallet_id: "wal_a",
  asset,
  contract: "0xC",
  from_address: "0xF",
  to_address: "0xA",
  amount: 100n,
  tx_hash: tx,
  log_index,
  block_number: 10n,
  block_hash,
  ...extra,
})

type Existing = Parameters<typeof planSightings>[1][number]
const row = (
  deposit_id: string,
  log_index: number,
  block_hash: string,
  status: DepositRow["status"] = "seen",
  extra: Partial<Existing> = {},
): Existing => ({
  deposit_id,
  status,
  tx_hash: tx,
  log_index,
  block_hash,
  wallet_id: "wal_a",
  token_contract: "0xC",
  from_address: "0xF",
  to_address: "0xA",
  amount: 100n,
  ...extra,
})

const summary = (plan: ReturnType<typeof planSightings>) => ({
  updates: plan.updates.map((update) => [
    update.deposit_id,
    update.sighting.log_index,
    update.sighting.block_hash,
  ]),
  inserts: plan.inserts.map((inserted) => [inserted.log_index, inserted.block_hash]),
})

describe("planSightings", () => {
  const cases: ReadonlyArray<{
    readonly name: string
    readonly sightings: ReadonlyArray<Sighting>
    readonly existing: ReadonlyArray<Existing>
    readonly expected: ReturnType<typeof summary>
  }> = [
    {
      name: "a new transfer is inserted",
      sightings: [sighting(0, "0xb1")],
      existing: [],
      expected: { updates: [], inserts: [[0, "0xb1"]] },
    },
    {
      name: "the same transfer seen again (overlapping pages, rescans) changes nothing",
      sightings: [sighting(0, "0xb1"), sighting(0, "0xb1")],
      existing: [row("dep_1", 0, "0xb1")],
      expected: { updates: [], inserts: [] },
    },
    {
      name: "re-included at the same place in another block: the row follows",
      sightings: [sighting(0, "0xb2")],
      existing: [row("dep_1", 0, "0xb1")],
      expected: { updates: [["dep_1", 0, "0xb2"]], inserts: [] },
    },
    {
      name: "re-included at another log index: the row moves, keeping its id",
      sightings: [sighting(3, "0xb2")],
      existing: [row("dep_1", 0, "0xb1")],
      expected: { updates: [["dep_1", 3, "0xb2"]], inserts: [] },
    },
    {
      name: "an orphaned row seen again is revived",
      sightings: [sighting(0, "0xb1")],
      existing: [row("dep_1", 0, "0xb1", "orphaned")],
      expected: { updates: [["dep_1", 0, "0xb1"]], inserts: [] },
    },
    {
      name: "a credited row is final: its place seen again changes nothing",
      sightings: [sighting(0, "0xb1")],
      existing: [row("dep_1", 0, "0xb1", "credited")],
      expected: { updates: [], inserts: [] },
    },
    {
      name: "a transaction credited in another block is ignored (deeper than finality)",
      sightings: [sighting(4, "0xb9")],
      existing: [row("dep_1", 0, "0xb1", "credited")],
      expected: { updates: [], inserts: [] },
    },
    {
      name: "on TON, a later payout of a wallet message whose first payout is credited is new (each lands in its own transaction)",
      sightings: [
        sighting(1, "0xt2", { asset: tonAsset, wallet_id: "wal_b", to_address: "0xB", amount: 220n }),
      ],
      existing: [row("dep_1", 0, "0xt1", "credited")],
      expected: { updates: [], inserts: [[1, "0xt2"]] },
    },
    {
      name: "on TON, the same later payout with the same content as the credited one is new too",
      sightings: [sighting(1, "0xt2", { asset: tonAsset })],
      existing: [row("dep_1", 0, "0xt1", "credited")],
      expected: { updates: [], inserts: [[1, "0xt2"]] },
    },
    {
      name: "on TON, two equal payouts of one message: the second is new, the first's uncredited row stays (no reorg moves it)",
      sightings: [sighting(1, "0xt2", { asset: tonAsset })],
      existing: [row("dep_1", 0, "0xt1", "seen")],
      expected: { updates: [], inserts: [[1, "0xt2"]] },
    },
    {
      name: "a second transfer of a credited transaction (a wallet added later) is new",
      sightings: [sighting(1, "0xb1", { wallet_id: "wal_b", to_address: "0xB" })],
      existing: [row("dep_1", 0, "0xb1", "credited")],
      expected: { updates: [], inserts: [[1, "0xb1"]] },
    },
    {
      name: "two transfers shifted by one place: each place keeps one row, none is lost",
      sightings: [sighting(6, "0xb2"), sighting(7, "0xb2", { wallet_id: "wal_b", to_address: "0xB" })],
      existing: [
        row("dep_1", 5, "0xb1"),
        row("dep_2", 6, "0xb1", "seen", { wallet_id: "wal_b", to_address: "0xB" }),
      ],
      expected: { updates: [["dep_2", 6, "0xb2"]], inserts: [[7, "0xb2"]] },
    },
    {
      name: "a different amount is not the same transfer",
      sightings: [sighting(2, "0xb2", { amount: 99n })],
      existing: [row("dep_1", 0, "0xb1")],
      expected: { updates: [], inserts: [[2, "0xb2"]] },
    },
  ]
  for (const { name, sightings, existing, expected } of cases) {
    it(name, () => expect(summary(planSightings(sightings, existing))).toEqual(expected))
  }

  it("never leaves two rows at one place", () => {
    const existing = [row("dep_1", 5, "0xb1"), row("dep_2", 6, "0xb1", "seen", { amount: 7n })]
    const plan = planSightings([sighting(6, "0xb2"), sighting(7, "0xb2", { amount: 7n })], existing)
    const places = new Map(existing.map((item) => [item.deposit_id, item.log_index]))
    for (const update of plan.updates) places.set(update.deposit_id, update.sighting.log_index)
    const all = [...places.values(), ...plan.inserts.map((inserted) => inserted.log_index)]
    expect(new Set(all).size).toBe(all.length)
  })
})

describe("judgeSeenDeposit", () => {
  const proof = (block_hash: string, confirmations: number, block_number = 10n): InclusionProof => ({
    tx_hash: tx,
    block_number,
    block_hash,
    log_index: 0,
    confirmations,
  })
  const cases: ReadonlyArray<readonly [string, TransactionStatus, bigint, string]> = [
    ["final in its block at the depth", { status: "finalized", proof: proof("0xb1", 12) }, 30n, "credit"],
    [
      "final in its block, fewer confirmations than asked",
      { status: "finalized", proof: proof("0xb1", 5) },
      30n,
      "wait",
    ],
    [
      "only confirmed (a reorg may still move it)",
      { status: "confirmed", proof: proof("0xb1", 3) },
      30n,
      "wait",
    ],
    ["back in the pool after a reorg", { status: "seen", tx_hash: tx }, 30n, "wait"],
    ["reorganised away, known nowhere", { status: "dropped", tx_hash: tx }, 30n, "orphan"],
    ["re-included and reverted", { status: "reverted", proof: proof("0xb2", 12) }, 30n, "orphan"],
    [
      "final in another block already scanned",
      { status: "finalized", proof: proof("0xb2", 12, 11n) },
      30n,
      "orphan",
    ],
    [
      "final in another block not scanned yet",
      { status: "finalized", proof: proof("0xb2", 12, 11n) },
      11n,
      "wait",
    ],
  ]
  for (const [name, status, next_block, verdict] of cases) {
    it(name, () =>
      expect(judgeSeenDeposit({ block_hash: "0xb1" }, status, 12, next_block).kind).toBe(verdict),
    )
  }
})

describe("depositLedgerId", () => {
  it("names one place on one chain of one environment, whatever the hash's case", () => {
    expect(depositLedgerId("sandbox", "ethereum", "0xABcd", 3)).toBe("deposit:sandbox:ethereum:0xabcd:3")
    expect(depositLedgerId("production", "ethereum", "0xabcd", 3)).not.toBe(
      depositLedgerId("sandbox", "ethereum", "0xabcd", 3),
    )
  })
})

describe("the deposit.confirmed sample of the sandbox simulator", () => {
  it("has exactly the fields of a real event's data, plus simulated", () => {
    const row: DepositRow = {
      deposit_id: "dep_1",
      tenant_id: "ten_1",
      environment: "sandbox",
      wallet_id: "wal_a",
      chain: "ethereum",
      token: "USDC@ethereum",
      token_decimals: 6,
      token_contract: "0xC",
      to_address: "0xA",
      from_address: "0xF",
      amount: 250_000_000n,
      tx_hash: tx,
      log_index: 41,
      block_number: 10n,
      block_hash: "0xb1",
      status: "credited",
      confirmations: 64,
      seen_at: new Date(0),
      credited_at: new Date(1),
      orphaned_at: null,
    }
    const sample = sampleEventData("deposit.confirmed", new Date(1))
    expect(Object.keys(sample).sort()).toEqual([...Object.keys(toDepositEvent(row)), "simulated"].sort())
    expect(toDepositEvent(row)).toMatchObject({ amount: "250.00", token: "USDC", block_number: "10" })
  })
})
