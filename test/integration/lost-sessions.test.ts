/**
 * `makeLockHolder` ends exactly the sessions it lost while they held its lock, and only while they
 * are those sessions: never another session, never one that merely reuses a lost one's pid.
 */
import pg from "pg"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { makeLockHolder } from "../../src/db/lost-sessions.ts"
import { freshDatabase, type TestDatabase } from "../support/db.ts"

let db: TestDatabase
const clients: Array<pg.Client> = []

beforeAll(async () => {
  db = await freshDatabase({ migrate: false })
})
afterAll(async () => {
  for (const client of clients) await client.end().catch(() => {})
  await db.drop()
})

const connect = async () => {
  const client = new pg.Client({ connectionString: db.url })
  client.on("error", () => {})
  await client.connect()
  clients.push(client)
  return client
}

const tryLock = async (client: pg.Client, key: number) =>
  (await client.query<{ ok: boolean }>("select pg_try_advisory_lock($1) as ok", [key])).rows[0]?.ok === true

const alive = async (client: pg.Client) =>
  client.query("select 1").then(
    () => true,
    () => false,
  )

describe("a lock holder", () => {
  it("ends the session it lost holding the lock, and no other", async () => {
    const holder = makeLockHolder()
    const lost = await connect()
    const bystander = await connect()
    const other_lock = await connect()
    expect(await tryLock(lost, 41)).toBe(true)
    await holder.taken(lost)
    expect(await tryLock(other_lock, 42)).toBe(true)
    // Given up on this side; the server never heard of it, so the session holds the lock still.
    holder.letGo(true)
    const next = await connect()
    expect(await tryLock(next, 41)).toBe(false)
    await holder.reap(next)
    expect(await tryLock(next, 41)).toBe(true)
    expect(await alive(lost)).toBe(false)
    expect(await alive(bystander)).toBe(true)
    expect(await alive(other_lock)).toBe(true)
  })

  it("ends nothing after an unlock, nor when reaped twice", async () => {
    const holder = makeLockHolder()
    const first = await connect()
    expect(await tryLock(first, 43)).toBe(true)
    await holder.taken(first)
    await first.query("select pg_advisory_unlock(43)")
    holder.letGo(false)
    const next = await connect()
    await holder.reap(next)
    expect(await alive(first)).toBe(true)

    await holder.taken(first)
    holder.letGo(true)
    await holder.reap(next)
    expect(await alive(first)).toBe(false)
    // The lost session is forgotten once ended: reaping again touches nobody.
    await holder.reap(next)
    expect(await alive(next)).toBe(true)
  })

  it("leaves a session that reuses a lost one's pid alone", async () => {
    // A session at the lost one's pid now, started later than the lost one did.
    const reused = await connect()
    const found = await reused.query<{ pid: number; started: string }>(
      "select pid, backend_start::text as started from pg_stat_activity where pid = pg_backend_pid()",
    )
    const session = found.rows[0]
    if (session === undefined) throw new Error("no session row")
    const holder = makeLockHolder()
    // What `taken` read of the lost session: the same pid, a start a second earlier.
    const lost_view = {
      query: async () => ({
        rows: [{ pid: session.pid, started: new Date(Date.parse(session.started) - 1_000).toISOString() }],
      }),
    } as unknown as pg.ClientBase
    await holder.taken(lost_view)
    holder.letGo(true)
    await holder.reap(await connect())
    expect(await alive(reused)).toBe(true)
  })
})
