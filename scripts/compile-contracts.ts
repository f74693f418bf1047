/**
 * Compiles the platform's contracts with the npm `solc` package and writes their ABI and bytecode to
 * `contracts/build/<Name>.json`. The settings are fixed (compiler version pinned in package.json,
 * optimizer runs, EVM version, metadata) so that anyone recompiling the source in the repository gets
 * byte-for-byte the committed bytecode; a test checks it.
 *
 * Usage: `sh scripts/node.sh scripts/compile-contracts.ts`
 */
import * as fs from "node:fs"
import * as path from "node:path"
import solc from "solc"

const contracts_dir = path.join(import.meta.dirname, "..", "contracts")
/** The compiled contracts; each is `contracts/<name>.sol` declaring a contract of the same name. */
export const contract_names = ["PlatformStablecoin"] as const
export type ContractName = (typeof contract_names)[number]

/** The one compiler version whose output is committed; a different solc is refused, not used. */
const solc_version_expected = "0.8.37"
const optimizer_runs = 200
const evm_version = "cancun"

/** What `contracts/build/<Name>.json` holds. */
export interface ContractArtifact {
  readonly contract_name: string
  readonly compiler: string
  readonly evm_version: string
  readonly optimizer_runs: number
  readonly abi: ReadonlyArray<unknown>
  /** Creation bytecode, 0x-prefixed hex. */
  readonly bytecode: `0x${string}`
  /** Runtime bytecode, 0x-prefixed hex. */
  readonly deployed_bytecode: `0x${string}`
}

interface SolcOutput {
  readonly errors?: ReadonlyArray<{ readonly severity: string; readonly formattedMessage: string }>
  readonly contracts: Record<
    string,
    Record<
      string,
      {
        readonly abi: ReadonlyArray<unknown>
        readonly evm: { readonly bytecode: { object: string }; readonly deployedBytecode: { object: string } }
      }
    >
  >
}

/**
 * Compiles one contract from its source in `contracts/`; throws on any compiler error or warning,
 * since a warning in a money contract deserves a human's attention.
 * @example compileContract("PlatformStablecoin").bytecode.startsWith("0x60") // true
 */
export function compileContract(name: ContractName): ContractArtifact {
  const version: string = solc.version()
  if (!version.startsWith(`${solc_version_expected}+`)) {
    throw new Error(`solc ${solc_version_expected} expected, found ${version}`)
  }
  const file = `${name}.sol`
  const input = {
    language: "Solidity",
    sources: { [file]: { content: fs.readFileSync(path.join(contracts_dir, file), "utf8") } },
    settings: {
      optimizer: { enabled: true, runs: optimizer_runs },
      evmVersion: evm_version,
      metadata: { bytecodeHash: "ipfs" },
      outputSelection: { [file]: { [name]: ["abi", "evm.bytecode.object", "evm.deployedBytecode.object"] } },
    },
  }
  const output = JSON.parse(solc.compile(JSON.stringify(input))) as SolcOutput
  const problems = output.errors ?? []
  if (problems.length > 0) {
    throw new Error(`solc reported:\n${problems.map((problem) => problem.formattedMessage).join("\n")}`)
  }
  const compiled = output.contracts[file]?.[name]
  if (compiled === undefined) throw new Error(`solc produced no contract ${name} from ${file}`)
  return {
    contract_name: name,
    compiler: `solc ${version}`,
    evm_version,
    optimizer_runs,
    abi: compiled.abi,
    bytecode: `0x${compiled.evm.bytecode.object}`,
    deployed_bytecode: `0x${compiled.evm.deployedBytecode.object}`,
  }
}

/** Where a contract's artifact is committed. */
export function artifactPath(name: ContractName): string {
  return path.join(contracts_dir, "build", `${name}.json`)
}

if (import.meta.main) {
  for (const name of contract_names) {
    const artifact = compileContract(name)
    fs.mkdirSync(path.dirname(artifactPath(name)), { recursive: true })
    fs.writeFileSync(artifactPath(name), `${JSON.stringify(artifact, null, 2)}\n`)
    console.log(`compiled ${name}: ${(artifact.deployed_bytecode.length - 2) / 2} bytes of runtime code`)
  }
}
