/**
 * Where a backwards read of an address's history can start near a given position. The production
 * TON and Solana APIs page an address's history from its newest transaction back, and can start
 * only at a transaction they are named (TON: lt and hash; Solana: a signature), not at a position:
 * without a starting point, reading an old range means reading every transaction newer than it.
 * The transports remember here the transactions their reads passed (one a page), so that a read of
 * a range below them starts just above it, however busy the address has been since.
 *
 * Only positions that can never change are remembered (TON: any transaction; Solana: finalized
 * ones): an anchor the chain dropped would make the API answer an empty history.
 */

/** Anchors remembered per address; past it, every other one is dropped (the rest stay spread). */
const anchor_count_per_address_max = 256
/** Addresses remembered; past it, the one used longest ago is forgotten. */
const address_count_max = 10_000

export interface HistoryAnchors<A> {
  /** The remembered anchor of `address` at the lowest position above `position`; undefined if none. */
  readonly above: (address: string, position: bigint) => A | undefined
  readonly remember: (address: string, position: bigint, anchor: A) => void
}

/**
 * An empty memory of anchors of type `A` (what the API takes to start a page there).
 * @example const anchors = historyAnchors<{ lt: string; hash: string }>()
 */
export function historyAnchors<A>(): HistoryAnchors<A> {
  // Per address, ascending by position; a Map's order is its use order, the oldest first.
  const byAddress = new Map<string, Array<{ readonly position: bigint; readonly anchor: A }>>()

  const listOf = (address: string) => {
    const list = byAddress.get(address) ?? []
    byAddress.delete(address)
    byAddress.set(address, list)
    if (byAddress.size > address_count_max) {
      const oldest = byAddress.keys().next()
      if (oldest.done !== true) byAddress.delete(oldest.value)
    }
    return list
  }

  return {
    above: (address, position) => listOf(address).find((entry) => entry.position > position)?.anchor,
    remember: (address, position, anchor) => {
      const list = listOf(address)
      const index = list.findIndex((entry) => entry.position >= position)
      if (list[index]?.position === position) return
      list.splice(index < 0 ? list.length : index, 0, { position, anchor })
      if (list.length > anchor_count_per_address_max) {
        byAddress.set(
          address,
          list.filter((_, kept) => kept % 2 === 0),
        )
      }
    },
  }
}
