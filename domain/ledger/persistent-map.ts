/**
 * An immutable map from string keys that reads like a `Map` (`get`, `has`, `size`, `keys`...) and
 * changes only by returning a new map (`with`). The ledger state needs both: `evolve` must leave the
 * old state usable (the writer rolls back to it), and a change must cost O(log n), not a copy.
 * Backed by effect's HashMap (a hash array mapped trie); the wrapper keeps that choice private. A
 * hand-written trie specialised to string keys measured no faster (memory traffic dominates), so
 * the well-tested one stays.
 */
import { HashMap, Option } from "effect"

/** A persistent map from string keys to `V`; see the module comment. */
export class PersistentMap<V> implements Iterable<[string, V]> {
  readonly #entries: HashMap.HashMap<string, V>

  private constructor(entries: HashMap.HashMap<string, V>) {
    this.#entries = entries
  }

  /** A map with no entries. */
  static empty<V>(): PersistentMap<V> {
    return new PersistentMap(HashMap.empty<string, V>())
  }

  get size(): number {
    return HashMap.size(this.#entries)
  }

  get(key: string): V | undefined {
    return Option.getOrUndefined(HashMap.get(this.#entries, key))
  }

  has(key: string): boolean {
    return HashMap.has(this.#entries, key)
  }

  /** A new map where `key` maps to `value`; this one is unchanged (like `Array.prototype.with`). */
  with(key: string, value: V): PersistentMap<V> {
    return new PersistentMap(HashMap.set(this.#entries, key, value))
  }

  /** A new map without `keys`; this one is unchanged. One pass, however many keys. */
  withoutAll(keys: Iterable<string>): PersistentMap<V> {
    return new PersistentMap(
      HashMap.mutate(this.#entries, (entries) => {
        for (const key of keys) HashMap.remove(entries, key)
      }),
    )
  }

  keys(): IterableIterator<string> {
    return HashMap.keys(this.#entries)
  }

  values(): IterableIterator<V> {
    return HashMap.values(this.#entries)
  }

  entries(): IterableIterator<[string, V]> {
    return HashMap.entries(this.#entries)
  }

  [Symbol.iterator](): IterableIterator<[string, V]> {
    return this.entries()
  }
}
