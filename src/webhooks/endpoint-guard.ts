/**
 * The delivery-time half of production's rule (see `endpoint-url.ts`): resolve the endpoint's host
 * once, refuse when any address it resolves to is not public, and connect only to the addresses
 * checked. A name checked when the endpoint was created may resolve elsewhere later, and a name
 * that answers one address to the check and another to the connection (DNS rebinding) is caught
 * only if the connection uses the very answer that was checked: `pinnedLookup` gives it that.
 */
import * as dns from "node:dns"
import { isIP, type LookupFunction } from "node:net"
import { resolvedAddressRefusal, unbracketed } from "./endpoint-url.ts"

export type Resolution =
  | { readonly ok: true; readonly addresses: ReadonlyArray<dns.LookupAddress> }
  | { readonly ok: false; readonly refusal: string }

/** Every address of a host name, as the system resolver gives them (hosts file included). */
export type ResolveHost = (hostname: string) => Promise<ReadonlyArray<dns.LookupAddress>>

const resolveWithSystem: ResolveHost = (hostname) => dns.promises.lookup(hostname, { all: true })

/** `promise`, or a rejection with the signal's reason as soon as it aborts (a lookup cannot be cancelled). */
const untilAborted = <T>(promise: Promise<T>, signal: AbortSignal): Promise<T> =>
  new Promise<T>((resolve, reject) => {
    const abort = () => reject(signal.reason)
    if (signal.aborted) return abort()
    signal.addEventListener("abort", abort, { once: true })
    promise.then(resolve, reject).finally(() => signal.removeEventListener("abort", abort))
  })

/**
 * The addresses a production delivery to `hostname` (a URL's hostname; IPv6 in brackets) may
 * connect to, or the refusal to record. An IP literal is its own address. Rejects when the name
 * does not resolve or `signal` aborts.
 * @example await resolvePublicAddresses("localhost", signal) // { ok: false, refusal: "refused: localhost resolves to 127.0.0.1 (loopback), ..." }
 */
export async function resolvePublicAddresses(
  hostname: string,
  signal: AbortSignal,
  resolve: ResolveHost = resolveWithSystem,
): Promise<Resolution> {
  const host = unbracketed(hostname)
  const family = isIP(host)
  const addresses = family === 0 ? await untilAborted(resolve(host), signal) : [{ address: host, family }]
  const refusal = resolvedAddressRefusal(
    hostname,
    addresses.map((entry) => entry.address),
  )
  return refusal === undefined ? { ok: true, addresses } : { ok: false, refusal }
}

const familyNumber = (family: dns.LookupOptions["family"]): number =>
  family === "IPv4" ? 4 : family === "IPv6" ? 6 : (family ?? 0)

/**
 * A `lookup` for `http.request` that answers every query with `addresses` (those of the family
 * asked for), so the connection goes where the check said it may, whatever DNS says by then.
 * @example http.request(url, { lookup: pinnedLookup([{ address: "93.184.215.14", family: 4 }]) })
 */
export const pinnedLookup =
  (addresses: ReadonlyArray<dns.LookupAddress>): LookupFunction =>
  (hostname, options, callback) => {
    const family = familyNumber(options.family)
    const usable = addresses.filter((entry) => family === 0 || entry.family === family)
    const [first] = usable
    if (first === undefined) {
      const error: NodeJS.ErrnoException = new Error(`no checked IPv${family} address for ${hostname}`)
      error.code = "ENOTFOUND"
      callback(error, [])
    } else if (options.all === true) callback(null, usable)
    else callback(null, first.address, first.family)
  }
