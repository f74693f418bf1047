// Proves the persistent expiry index agrees with a sorted array for any sequence of adds and removes (its first entry and its count of due entries too), stays balanced, and never changes an older version.
import fc from "fast-check"
import { describe, expect, it } from "vitest"
import {
  countDue,
  type ExpiryEntry,
  type ExpiryIndex,
  emptyExpiryIndex,
  firstExpiry,
  insertExpiry,
  removeExpiry,
} from "../../domain/ledger/expiry-index.ts"

function inOrder(tree: ExpiryIndex): Array<ExpiryEntry> {
  if (tree === null) return []
  return [
    ...inOrder(tree.left),
    { expires_at_ms: tree.expires_at_ms, transfer_id: tree.transfer_id },
    ...inOrder(tree.right),
  ]
}

function balancedHeight(tree: ExpiryIndex): number {
  if (tree === null) return 0
  const left = balancedHeight(tree.left)
  const right = balancedHeight(tree.right)
  expect(Math.abs(left - right)).toBeLessThanOrEqual(1)
  expect(tree.height).toBe(1 + Math.max(left, right))
  return tree.height
}

const byExpiry = (a: ExpiryEntry, b: ExpiryEntry) =>
  a.expires_at_ms - b.expires_at_ms ||
  (a.transfer_id < b.transfer_id ? -1 : a.transfer_id > b.transfer_id ? 1 : 0)

const operation = fc.record({
  remove: fc.boolean(),
  expires_at_ms: fc.integer({ min: 0, max: 20 }),
  transfer_id: fc.constantFrom("a", "b", "c", "d", "e", "f", "g", "h"),
})

describe("expiry index", () => {
  it("matches a sorted array model, stays AVL-balanced and leaves old versions intact", () => {
    fc.assert(
      fc.property(fc.array(operation, { minLength: 20, maxLength: 300 }), (operations) => {
        let tree = emptyExpiryIndex
        let model: Array<ExpiryEntry> = []
        for (const { remove, ...entry } of operations) {
          const present = model.some((e) => byExpiry(e, entry) === 0)
          const before = tree
          const beforeEntries = inOrder(before)
          if (remove && present) {
            tree = removeExpiry(tree, entry)
            model = model.filter((e) => byExpiry(e, entry) !== 0)
          } else if (!remove && !present) {
            tree = insertExpiry(tree, entry)
            model = [...model, entry].sort(byExpiry)
          }
          expect(inOrder(before)).toEqual(beforeEntries)
          expect(inOrder(tree)).toEqual(model)
          expect(firstExpiry(tree)?.transfer_id).toBe(model[0]?.transfer_id)
          for (const now_ms of [-1, 0, 7, 20])
            for (const limit of [1, 3, 100]) {
              const due = model.filter((e) => e.expires_at_ms <= now_ms).length
              expect(countDue(tree, now_ms, limit)).toBe(Math.min(due, limit))
            }
          balancedHeight(tree)
        }
      }),
    )
  })

  it("crashes when asked to add a present entry or remove an absent one", () => {
    const one = insertExpiry(emptyExpiryIndex, { expires_at_ms: 1, transfer_id: "a" })
    expect(() => insertExpiry(one, { expires_at_ms: 1, transfer_id: "a" })).toThrow()
    expect(() => removeExpiry(one, { expires_at_ms: 2, transfer_id: "a" })).toThrow()
  })
})
