// Proves that a database's sandbox chains are one process's: a second platform process that would
// start sandbox chains on the same database while the first runs them is refused at start, with a
// clear message, so it never fails the first process's pending transfers as "dropped" (releasing
// funds whose tokens the first process's chain still moves). A transfer the first process signed
// completes while the refused start comes and goes; a process without sandbox chains shares the
// database as before. A lock whose connection is lost is taken again; a process that finds it taken by
// another meanwhile stops, and another may then run the chains.
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

    // The lock lives as long as its connection. Lost, it is taken again once the database answers,
    // and the process runs on; taken meanwhile by another process, this one stops, its chains with it.
    const lock_key = "hashtextextended('platform:sandbox-chains', 0)"
    const terminateLockHolder = () =>
      first.database.pool.query(
        `select pg_terminate_backend(pid) from pg_locks
          where locktype = 'advisory' and granted and pid <> pg_backend_pid()
            and objid = (${lock_key} & 4294967295)::bigint::oid`,
      )
    const until = async (done: () => Promise<boolean> | boolean, what: string) => {
      const deadline = Date.now() + 60_000
      while (!(await done())) {
        expect(Date.now(), what).toBeLessThan(deadline)
        await new Promise((resolve) => setTimeout(resolve, 200))
      }
    }
    const answers = async () =>
      fetch(`${first.url}/health`).then(
        (response) => response.status === 200,
        () => false,
      )
    await terminateLockHolder()
    await until(
      () => first.output().includes("the sandbox chains' database lock was taken again"),
      "taken again",
    )
    expect(await answers()).toBe(true)

    const other = await first.database.pool.connect()
    try {
      await terminateLockHolder()
      // Waits for the terminated connection to end, then holds the lock before the platform's retry.
      await other.query(`select pg_advisory_lock(${lock_key})`)
      await until(async () => !(await answers()), "the platform stops")
      expect(first.output()).toContain(
        "another process took the sandbox chains' database lock while it was lost: stopping",
      )
      await other.query(`select pg_advisory_unlock(${lock_key})`)
    } finally {
      other.release()
    }
    // Its chains ended with it: another process may run them now.
    const next = await startPlatform(env, { database: first.database })
    started.push(next)
  }, 240_000)
})
