/**
 * Cursor pages: every list reads `limit + 1` rows, and this cuts them into the page the API
 * answers, `{data, has_more, next_cursor}` (the cursor is the last item's id).
 */

export interface Page<T> {
  readonly data: ReadonlyArray<T>
  readonly has_more: boolean
  /** The id to pass as `starting_after` for the next page; null on the last page. */
  readonly next_cursor: string | null
}

/**
 * The page of `rows` (read with `limit + 1`), each mapped by `map`, with `cursor` naming an item.
 * @example toPage(found.rows, 20, toWalletView, (wallet) => wallet.wallet_id)
 */
export const toPage = <R, T>(
  rows: ReadonlyArray<R>,
  limit: number,
  map: (row: R) => T,
  cursor: (item: T) => string,
): Page<T> => {
  const data = rows.slice(0, limit).map(map)
  const last = data[data.length - 1]
  const has_more = rows.length > limit
  return { data, has_more, next_cursor: has_more && last !== undefined ? cursor(last) : null }
}
