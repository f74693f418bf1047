/**
 * Pending transfers that can lapse, ordered by (expires_at_ms, transfer_id): a persistent AVL tree.
 * Persistent because `evolve` must leave the previous state intact (the writer rolls back to it);
 * a tree because finding the next expiry, adding one and removing a posted or voided one must each
 * cost O(log n), not a scan of every pending transfer. The id breaks ties, so the order (and so the
 * order of expiry events) is total and deterministic.
 */
import { assert } from "../assert.ts"

export interface ExpiryEntry {
  readonly expires_at_ms: number
  readonly transfer_id: string
}

interface ExpiryNode extends ExpiryEntry {
  readonly left: ExpiryIndex
  readonly right: ExpiryIndex
  readonly height: number
}

/** An immutable set of expiry entries; `null` is the empty set. */
export type ExpiryIndex = ExpiryNode | null

export const emptyExpiryIndex: ExpiryIndex = null

function compare(a: ExpiryEntry, b: ExpiryEntry): number {
  if (a.expires_at_ms !== b.expires_at_ms) return a.expires_at_ms < b.expires_at_ms ? -1 : 1
  if (a.transfer_id === b.transfer_id) return 0
  return a.transfer_id < b.transfer_id ? -1 : 1
}

function height(tree: ExpiryIndex): number {
  return tree === null ? 0 : tree.height
}

function node(entry: ExpiryEntry, left: ExpiryIndex, right: ExpiryIndex): ExpiryNode {
  const { expires_at_ms, transfer_id } = entry
  return { expires_at_ms, transfer_id, left, right, height: 1 + Math.max(height(left), height(right)) }
}

/** Joins two subtrees whose heights differ by at most two under `entry`, rotating back into balance. */
function balance(entry: ExpiryEntry, left: ExpiryIndex, right: ExpiryIndex): ExpiryNode {
  if (left !== null && left.height > height(right) + 1) {
    const inner = left.right
    if (inner !== null && inner.height > height(left.left)) {
      return node(inner, node(left, left.left, inner.left), node(entry, inner.right, right))
    }
    return node(left, left.left, node(entry, inner, right))
  }
  if (right !== null && right.height > height(left) + 1) {
    const inner = right.left
    if (inner !== null && inner.height > height(right.right)) {
      return node(inner, node(entry, left, inner.left), node(right, inner.right, right.right))
    }
    return node(right, node(entry, left, inner), right.right)
  }
  return node(entry, left, right)
}

/** Adds `entry`, which must not be present (a transfer is reserved once). */
export function insertExpiry(tree: ExpiryIndex, entry: ExpiryEntry): ExpiryNode {
  if (tree === null) return node(entry, null, null)
  const order = compare(entry, tree)
  assert(order !== 0, "an expiry is inserted once")
  return order < 0
    ? balance(tree, insertExpiry(tree.left, entry), tree.right)
    : balance(tree, tree.left, insertExpiry(tree.right, entry))
}

function removeFirst(tree: ExpiryNode): ExpiryIndex {
  return tree.left === null ? tree.right : balance(tree, removeFirst(tree.left), tree.right)
}

/** Removes `entry`, which must be present (only a reserved transfer is posted, voided or expired). */
export function removeExpiry(tree: ExpiryIndex, entry: ExpiryEntry): ExpiryIndex {
  assert(tree !== null, "a removed expiry is present")
  const order = compare(entry, tree)
  if (order < 0) return balance(tree, removeExpiry(tree.left, entry), tree.right)
  if (order > 0) return balance(tree, tree.left, removeExpiry(tree.right, entry))
  if (tree.left === null) return tree.right
  if (tree.right === null) return tree.left
  return balance(leftmost(tree.right), tree.left, removeFirst(tree.right))
}

function leftmost(tree: ExpiryNode): ExpiryNode {
  let current = tree
  while (current.left !== null) current = current.left
  return current
}

/** The entry that lapses first, or null when nothing can lapse. */
export function firstExpiry(tree: ExpiryIndex): ExpiryEntry | null {
  return tree === null ? null : leftmost(tree)
}

/**
 * How many entries are due at `now_ms` (expire at or before it), counting no further than `limit`:
 * an in-order walk that stops at the first entry not due or at the limit, so O(limit + log n).
 */
export function countDue(tree: ExpiryIndex, now_ms: number, limit: number): number {
  let count = 0
  const walk = (subtree: ExpiryIndex): boolean => {
    if (subtree === null || count >= limit) return count < limit
    if (!walk(subtree.left)) return false
    if (subtree.expires_at_ms > now_ms) return false
    count += 1
    if (count >= limit) return false
    return walk(subtree.right)
  }
  walk(tree)
  return count
}
