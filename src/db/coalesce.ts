/**
 * Coalesced point reads: many concurrent reads of the same kind become one query.
 *
 * A read never joins a query that is already running: it waits for the next one, so it sees every
 * write committed before it was asked (read-your-writes holds as for a query of its own). All the
 * reads asked while one query runs go into the next query together, so under load the number of
 * queries stays near one per round trip instead of one per read; alone, a read is sent at once.
 */
export interface CoalescedReadOptions {
  /** Keys read by one query at most; the rest go into the next. */
  readonly keys_max?: number
}

/**
 * @param fetch reads every key in one query and answers one value per key, in the keys' order.
 * @example
 * const read = makeCoalescedRead((ids: ReadonlyArray<string>) => selectMany(pool, ids))
 * const row = await read("w_123")
 */
export const makeCoalescedRead = <K, V>(
  fetch: (keys: ReadonlyArray<K>) => Promise<ReadonlyArray<V>>,
  options: CoalescedReadOptions = {},
): ((key: K) => Promise<V>) => {
  const keys_max = options.keys_max ?? 512
  let waiting: Array<{
    readonly key: K
    readonly resolve: (value: V) => void
    readonly reject: (error: unknown) => void
  }> = []
  let running = false

  const next = () => {
    if (running || waiting.length === 0) return
    running = true
    const taken = waiting.slice(0, keys_max)
    waiting = waiting.slice(keys_max)
    fetch(taken.map((read) => read.key))
      .then((values) => {
        if (values.length !== taken.length)
          throw new Error(`coalesced read: ${values.length} values for ${taken.length} keys`)
        for (const [index, read] of taken.entries()) read.resolve(values[index] as V)
      })
      .catch((error: unknown) => {
        for (const read of taken) read.reject(error)
      })
      .finally(() => {
        running = false
        next()
      })
  }

  return (key) =>
    new Promise<V>((resolve, reject) => {
      waiting.push({ key, resolve, reject })
      next()
    })
}
