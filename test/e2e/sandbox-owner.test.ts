// Proves that a database's sandbox chains are one process's: a second platform process that would
// start sandbox chains on the same database while the first runs them is refused at start, with a
// clear message, so it never fails the first process's pending transfers as "dropped" (releasing
// funds whose tokens the first process's chain still moves). A transfer the first process signed
// completes while the refused start comes and goes; a process without sandbox chains shares the
// database as before. A process whose lock's connection is lost stops, and another may then run them.
import { randomBytes } from "node:crypto"
import { type Address, createPublicClient, erc20Abi, http } from "viem"
import { generatePrivateKey, privateKeyToAccount } from "viem/accounts"
import { afterAll, describe, expect, it } from "vitest"
import type { ChainTransfer, Wallet } from "../../src/http/api.ts"
import { expectOk } from "../support/api-expect.ts"
import { type RunningPlatform, registerTenant, startPlatform } from "../support/platform-process.ts"

const started: Array<RunningPlatform> = []
afterAll(async () => {
  for (const platform of started.reverse()) {
    platform.resume()
    await platform.stop()
  }
})

const rpcUrl = (output: string): string => {
  const match = /"sandbox chain running".*"rpc_url":"([^"]+)"/.exec(output)
  if (match?.[1] === undefined) throw new Error(`no sandbox chain in the platform's log:\n${output}`)
  return match[1]
}

describe("the sandbox's chains of one database", () => {
  it("are one process's: a second that would run them is refused, and the first's transfer completes", async () => {
    const env = {
      CUSTODY_KEK: randomBytes(32).toString("hex"),
      SANDBOX_EVM_CHAINS: "ethereum",
      LOG_LEVEL: "info",
    }
    const first = await startPlatform(env)
    started.push(first)
    const { client } = await registerTenant(first.url)
    const wallet = expectOk(
      await client.post<typeof Wallet.Type>("/api/v1/wallets", {
        external_id: "sender",
        label: "sender",
        chain: "ethereum",
      }),
      201,
    )
    expectOk(
      await client.post("/api/v1/sandbox/faucet", {
        wallet_id: wallet.wallet_id,
        token: "USDC",
        amount: "100",
      }),
    )
    const recipient = privateKeyToAccount(generatePrivateKey()).address
    const requested = expectOk(
      await client.post<typeof ChainTransfer.Type>("/api/v2/transfers", {
        from_wallet: wallet.wallet_id,
        to_address: recipient,
        amount: "25",
        token: "USDC",
        chain: "ethereum",
      }),
      202,
    )
    // Signed by the first process, which is then held still while a second one starts.
    const deadline = Date.now() + 30_000
    for (;;) {
      const row = await first.database.pool.query<{ tx_hash: string | null }>(
        "select tx_hash from platform.chain_transfers where transfer_id = $1",
        [requested.transaction_id],
      )
      if (row.rows[0]?.tx_hash != null) break
      expect(Date.now(), "the transfer is signed in time").toBeLessThan(deadline)
      await new Promise((resolve) => setTimeout(resolve, 20))
    }
    first.pause()
    try {
      await expect(startPlatform(env, { database: first.database })).rejects.toThrow(
        /Another platform process on this database runs the sandbox's chains/,
      )
    } finally {
      first.resume()
    }
    // A process without sandbox chains shares the database.
    const { CUSTODY_KEK } = env
    const plain = await startPlatform({ CUSTODY_KEK }, { database: first.database })
    started.push(plain)

    const settled = Date.now() + 60_000
    let transfer = requested
    while (transfer.status === "pending" && Date.now() < settled) {
      await new Promise((resolve) => setTimeout(resolve, 200))
      transfer = expectOk(
        await client.get<typeof ChainTransfer.Type>(`/api/v2/transfers/${requested.transaction_id}`),
      )
    }
    expect(transfer.status).toBe("completed")
    const usdc = expectOk(
      await client.get<{
        data: Array<{ chain: string; tokens: Array<{ token: string; contract_address: string }> }>
      }>("/api/v2/chains"),
    )
      .data.find((chain) => chain.chain === "ethereum")
      ?.tokens.find((token) => token.token === "USDC")?.contract_address as Address
    const held = await createPublicClient({ transport: http(rpcUrl(first.output())) }).readContract({
      address: usdc,
      abi: erc20Abi,
      functionName: "balanceOf",
      args: [recipient],
    })
    expect(held).toBe(25_000_000n)

    // The lock lives as long as its connection: lost, the process that ran the chains stops (its
    // chains with it) rather than run on while another may take them over.
    await first.database.pool.query(
      `select pg_terminate_backend(pid) from pg_locks
        where locktype = 'advisory' and granted and pid <> pg_backend_pid()
          and objid = (hashtextextended('platform:sandbox-chains', 0) & 4294967295)::bigint::oid`,
    )
    const stopping = Date.now() + 60_000
    const answers = async () =>
      fetch(`${first.url}/health`).then(
        () => true,
        () => false,
      )
    while ((await answers()) && Date.now() < stopping)
      await new Promise((resolve) => setTimeout(resolve, 200))
    expect(await answers()).toBe(false)
    expect(first.output()).toContain("the sandbox chains' database lock was lost: stopping")
    // Its chains ended with it: another process may run them now.
    const next = await startPlatform(env, { database: first.database })
    started.push(next)
  }, 240_000)
})
