/**
 * Compiles the platform's TON jetton contracts (contracts/ton/*.fc) with the FunC compiler of
 * `@ton-community/func-js` (WASM, pinned in package.json) and writes their code to
 * `contracts/build/ton-jetton.json`: each contract's code cell as a base64 bag of cells and its
 * hash. The settings are fixed (compiler version, optimisation level, source order) so that anyone
 * recompiling the source in the repository gets the committed code byte for byte; a test checks it.
 *
 * Usage: `sh scripts/node.sh scripts/compile-ton-contracts.ts`
 */
import * as fs from "node:fs"
import * as path from "node:path"
import { Cell } from "@ton/core"
import { compileFunc, compilerVersion } from "@ton-community/func-js"

const sources_dir = path.join(import.meta.dirname, "..", "contracts", "ton")
/** The one FunC version whose output is committed; a different compiler is refused, not used. */
const func_version_expected = "0.4.6"
const optimization_level = 2
/** Declarations first: FunC reads its targets in order and needs names declared before use. */
const shared_sources = ["stdlib.fc", "jetton-common.fc"] as const
export const ton_contract_names = ["jetton-minter", "jetton-wallet"] as const
export type TonContractName = (typeof ton_contract_names)[number]

export interface TonContractCode {
  /** The code cell as a bag of cells, base64. */
  readonly code_boc: string
  /** The code cell's hash, hex: what a contract's StateInit commits to. */
  readonly code_hash: string
}

/** What `contracts/build/ton-jetton.json` holds. */
export interface TonJettonArtifact {
  readonly compiler: string
  readonly optimization_level: number
  readonly contracts: Record<TonContractName, TonContractCode>
}

/** Where the artifact is committed. */
export const ton_artifact_path = path.join(import.meta.dirname, "..", "contracts", "build", "ton-jetton.json")

/**
 * Compiles one contract with the shared sources; throws on a compiler error or any warning. Another
 * optimisation level gives other code for the same behaviour (the tests use that to stand in for
 * a foreign jetton); the build always uses the fixed one.
 * @example (await compileTonContract("jetton-wallet")).code_hash.length // 64
 */
export async function compileTonContract(
  name: TonContractName,
  optimization = optimization_level,
): Promise<TonContractCode> {
  const targets = [...shared_sources, `${name}.fc`]
  const sources = Object.fromEntries(
    targets.map((file) => [file, fs.readFileSync(path.join(sources_dir, file), "utf8")]),
  )
  const result = await compileFunc({ targets, sources, optLevel: optimization })
  if (result.status === "error") throw new Error(`FunC refused ${name}:\n${result.message}`)
  if ((result.warnings ?? "").trim() !== "") throw new Error(`FunC warned on ${name}:\n${result.warnings}`)
  const code = Cell.fromBase64(result.codeBoc)
  return { code_boc: code.toBoc().toString("base64"), code_hash: code.hash().toString("hex") }
}

/**
 * Compiles both contracts; refuses any compiler but the pinned one.
 * @example (await compileTonJetton()).contracts["jetton-minter"].code_boc
 */
export async function compileTonJetton(): Promise<TonJettonArtifact> {
  const { funcVersion } = await compilerVersion()
  if (funcVersion !== func_version_expected) {
    throw new Error(`FunC ${func_version_expected} expected, found ${funcVersion}`)
  }
  return {
    compiler: `func ${funcVersion}`,
    optimization_level,
    contracts: {
      "jetton-minter": await compileTonContract("jetton-minter"),
      "jetton-wallet": await compileTonContract("jetton-wallet"),
    },
  }
}

/** The artifact as it is written to disk. */
export function serializeTonArtifact(artifact: TonJettonArtifact): string {
  return `${JSON.stringify(artifact, null, 2)}\n`
}

if (import.meta.main) {
  const artifact = await compileTonJetton()
  fs.mkdirSync(path.dirname(ton_artifact_path), { recursive: true })
  fs.writeFileSync(ton_artifact_path, serializeTonArtifact(artifact))
  for (const name of ton_contract_names) {
    const bytes = Buffer.from(artifact.contracts[name].code_boc, "base64").length
    console.log(`compiled ${name}: ${bytes} bytes of code`)
  }
}
