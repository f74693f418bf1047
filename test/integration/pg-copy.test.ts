/**
 * Proves that `copyRows` copies exactly the rows it is given, reports a failed COPY, and keeps the
 * client's statement deadline (`query_timeout`) working: a COPY that hangs gives up, and a COPY
 * that finished leaves no deadline timer behind (one left armed held the COPY's payload until the
 * deadline, then fired on a finished statement).
 */
import pg from "pg"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { copyField, copyRows } from "../../projections/pg-copy.ts"
import { freshDatabase, type TestDatabase } from "../support/db.ts"

let db: TestDatabase

beforeAll(async () => {
  db = await freshDatabase({ migrate: false })
  await db.pool.query("create table copied (id int primary key, note text)")
})

afterAll(async () => {
  await db.drop()
})

/** A client of its own, with a statement deadline. */
const clientWithDeadline = async (query_timeout: number): Promise<pg.Client> => {
  const client = new pg.Client({ connectionString: db.url, query_timeout } as pg.ClientConfig)
  client.on("error", () => {})
  await client.connect()
  return client
}

const timers = (): number => process.getActiveResourcesInfo().filter((kind) => kind === "Timeout").length

describe("copyRows", () => {
  it("copies every row, special characters and nulls included, and returns the count", async () => {
    const client = await db.pool.connect()
    try {
      const notes = ["plain", "tab\there", "line\nbreak", "back\\slash", null]
      const rows = notes.map((note, i) => `${copyField(i + 1)}\t${copyField(note)}\n`).join("")
      expect(await copyRows(client, "copied", ["id", "note"], rows)).toBe(5)
      const found = await client.query<{ note: string | null }>("select note from copied order by id")
      expect(found.rows.map((r) => r.note)).toEqual(notes)
    } finally {
      client.release()
    }
  })

  it("rejects a COPY the server refuses, and the connection stays usable", async () => {
    const client = await clientWithDeadline(60_000)
    try {
      await expect(copyRows(client, "copied", ["id", "note"], "1\tagain\n")).rejects.toThrow(/duplicate key/)
      expect((await client.query("select 1 as one")).rows).toEqual([{ one: 1 }])
    } finally {
      await client.end()
    }
  })

  it("leaves no deadline timer behind once a COPY has finished or failed", async () => {
    const client = await clientWithDeadline(60_000)
    try {
      await client.query("select 1")
      const before = timers()
      await copyRows(client, "copied", ["id", "note"], "100\tfirst\n101\tsecond\n")
      await expect(copyRows(client, "copied", ["id", "note"], "100\tagain\n")).rejects.toThrow(
        /duplicate key/,
      )
      // At most as many as before: another timer of the process may have ended meanwhile (the
      // suite runs with others on a busy machine); one left by the COPY would make one more.
      expect(timers()).toBeLessThanOrEqual(before)
    } finally {
      await client.end()
    }
  })

  it("gives up on a COPY that hangs once the deadline passes", async () => {
    const holder = await db.pool.connect()
    const client = await clientWithDeadline(300)
    try {
      await holder.query("begin")
      await holder.query("lock table copied in access exclusive mode")
      await expect(copyRows(client, "copied", ["id", "note"], "200\tblocked\n")).rejects.toThrow(
        /Query read timeout/,
      )
    } finally {
      await holder.query("rollback")
      holder.release()
      await client.end()
    }
  })
})
