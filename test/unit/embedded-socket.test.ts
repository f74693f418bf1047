import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import pg from "pg"
import { describe, expect, it } from "vitest"
import { startEmbedded } from "../../src/db/embedded.ts"

describe("the embedded PostgreSQL's Unix-domain socket", () => {
  it("refuses a DATA_DIR too long for the socket before creating anything", async () => {
    const base = fs.mkdtempSync(path.join(os.tmpdir(), "socket-"))
    const dataDir = path.join(base, "d".repeat(120))
    await expect(startEmbedded({ dataDir })).rejects.toThrow(/DATA_DIR .* is too long .* at most 89/)
    expect(fs.existsSync(dataDir)).toBe(false)
    fs.rmSync(base, { recursive: true })
  })

  it("accepts the longest DATA_DIR whose socket fits", async () => {
    const base = fs.mkdtempSync(path.join(os.tmpdir(), "socket-"))
    const dataDir = path.join(base, "d".repeat(89 - base.length - 1))
    expect(Buffer.byteLength(dataDir)).toBe(89)
    const server = await startEmbedded({ dataDir })
    try {
      const client = new pg.Client({ connectionString: server.url })
      await client.connect()
      // No server address: the connection came through the Unix-domain socket, not TCP.
      const { rows } = await client.query<{ address: string | null }>("select inet_server_addr() as address")
      await client.end()
      expect(rows).toEqual([{ address: null }])
      expect(new URL(server.url).hostname).toBe(encodeURIComponent(path.join(dataDir, "pg")))
      expect(fs.readdirSync(path.join(dataDir, "pg")).filter((name) => name.startsWith(".s.PGSQL."))).toEqual(
        [`.s.PGSQL.${server.port}`, `.s.PGSQL.${server.port}.lock`],
      )
      // And nothing else: on TCP, any local account could log in with the fixed password.
      const tcp = new pg.Client({
        host: "127.0.0.1",
        port: server.port,
        user: "postgres",
        password: "postgres",
        database: "postgres",
      })
      await expect(tcp.connect()).rejects.toThrow(/ECONNREFUSED/)
    } finally {
      await server.stop()
      fs.rmSync(base, { recursive: true })
    }
  }, 60_000)
})
