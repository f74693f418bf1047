// Coalesced point reads: concurrent reads share a query, a read never joins a query already
// running (it would miss writes committed after that query started), failures reach every read of
// the failed query and only those.
import { describe, expect, it } from "vitest"
import { makeCoalescedRead } from "../../src/db/coalesce.ts"

/** A fetch whose queries the test finishes by hand; it records the keys of each query. */
const manualFetch = () => {
  const queries: Array<{
    readonly keys: ReadonlyArray<number>
    readonly answer: (values?: ReadonlyArray<string>) => void
    readonly fail: (error: Error) => void
  }> = []
  const fetch = (keys: ReadonlyArray<number>) =>
    new Promise<ReadonlyArray<string>>((resolve, reject) => {
      queries.push({
        keys,
        answer: (values) => resolve(values ?? keys.map((key) => `v${key}`)),
        fail: reject,
      })
    })
  return { fetch, queries }
}

const tick = () => new Promise((resolve) => setImmediate(resolve))

describe("makeCoalescedRead", () => {
  it("a lone read is sent at once; reads asked while it runs share the next query", async () => {
    const { fetch, queries } = manualFetch()
    const read = makeCoalescedRead(fetch)
    const first = read(1)
    expect(queries.map((q) => q.keys)).toEqual([[1]])
    const later = [read(2), read(3), read(4)]
    await tick()
    // Not joined to the running query, and not sent before it ends.
    expect(queries).toHaveLength(1)
    queries[0]?.answer()
    expect(await first).toBe("v1")
    await tick()
    expect(queries.map((q) => q.keys)).toEqual([[1], [2, 3, 4]])
    queries[1]?.answer()
    expect(await Promise.all(later)).toEqual(["v2", "v3", "v4"])
  })

  it("splits a backlog into queries of at most keys_max keys, in order", async () => {
    const { fetch, queries } = manualFetch()
    const read = makeCoalescedRead(fetch, { keys_max: 2 })
    const reads = [0, 1, 2, 3, 4].map(read)
    for (let index = 0; index < 4; index++) {
      await tick()
      queries[index]?.answer()
    }
    expect(await Promise.all(reads)).toEqual(["v0", "v1", "v2", "v3", "v4"])
    expect(queries.map((q) => q.keys)).toEqual([[0], [1, 2], [3, 4]])
  })

  it("a failed query fails its own reads only; the next query goes on", async () => {
    const { fetch, queries } = manualFetch()
    const read = makeCoalescedRead(fetch)
    const first = read(1)
    const second = read(2)
    queries[0]?.fail(new Error("connection lost"))
    await expect(first).rejects.toThrow("connection lost")
    await tick()
    queries[1]?.answer()
    expect(await second).toBe("v2")
  })

  it("an answer with the wrong number of values fails its reads instead of mismatching them", async () => {
    const { fetch, queries } = manualFetch()
    const read = makeCoalescedRead(fetch)
    const first = read(1)
    const rest = [read(2), read(3)]
    queries[0]?.answer()
    await first
    await tick()
    queries[1]?.answer(["only one"])
    for (const pending of rest) await expect(pending).rejects.toThrow(/1 values for 2 keys/)
  })
})
