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

/** Every address of a host name; `signal` aborting gives the lookup up. */
export type ResolveHost = (
  hostname: string,
  signal?: AbortSignal,
) => Promise<ReadonlyArray<dns.LookupAddress>>

/** Per DNS query: how long its first try waits (c-ares doubles it for each server round), and how many tries. */
const dns_query_timeout_ms = 2_000
const dns_query_tries = 2
/** A lookup gives up after this long, however many servers and tries it has left. */
const dns_lookup_ms_max = 4_000
/** Once one family (A or AAAA) has answered addresses, the other gets this much longer. */
const dns_other_family_wait_ms = 500

/**
 * Resolves with DNS itself (A and AAAA queries, as c-ares makes them on the event loop), not with
 * the system's `getaddrinfo`: that runs on libuv's four shared threads and cannot be cancelled, so
 * endpoints at names whose servers never answer (a tenant's own, say) could hold every thread for
 * as long as the system resolver waits, and stall every tenant's deliveries and the process's file
 * and crypto work with them. A lookup gives up after 4 s at most (whatever its servers and tries),
 * 0.5 s after one family answered for the other, or when the attempt aborts.
 * `localhost` and its subdomains are loopback (RFC 6761) without asking; the hosts file is not read
 * (a production endpoint is a public name).
 */
export const resolveWithDns: ResolveHost = (hostname, signal) => resolveWith(undefined, hostname, signal)

/** `resolveWithDns`, asking `servers` (`"127.0.0.1:5353"`) instead of the system's. */
export const dnsResolverOf =
  (servers: ReadonlyArray<string>): ResolveHost =>
  (hostname, signal) =>
    resolveWith(servers, hostname, signal)

const resolveWith = async (
  servers: ReadonlyArray<string> | undefined,
  hostname: string,
  signal: AbortSignal | undefined,
): Promise<ReadonlyArray<dns.LookupAddress>> => {
  const name = hostname.toLowerCase().replace(/\.$/, "")
  if (name === "localhost" || name.endsWith(".localhost")) {
    return [
      { address: "127.0.0.1", family: 4 },
      { address: "::1", family: 6 },
    ]
  }
  const resolver = new dns.promises.Resolver({ timeout: dns_query_timeout_ms, tries: dns_query_tries })
  if (servers !== undefined) resolver.setServers([...servers])
  const cancel = () => resolver.cancel()
  signal?.addEventListener("abort", cancel, { once: true })
  // Cancelled queries reject (ECANCELLED): the lookup ends with what has answered by then. Only the
  // addresses answered are checked and connected to, so not waiting for the other family is safe.
  const deadline = setTimeout(cancel, dns_lookup_ms_max)
  let rest: NodeJS.Timeout | undefined
  const answered = (addresses: ReadonlyArray<string>) => {
    if (addresses.length > 0 && rest === undefined) rest = setTimeout(cancel, dns_other_family_wait_ms)
  }
  try {
    const [v4, v6] = await Promise.allSettled([
      resolver.resolve4(name).then((found) => {
        answered(found)
        return found
      }),
      resolver.resolve6(name).then((found) => {
        answered(found)
        return found
      }),
    ])
    const addresses = [
      ...(v4.status === "fulfilled" ? v4.value.map((address) => ({ address, family: 4 })) : []),
      ...(v6.status === "fulfilled" ? v6.value.map((address) => ({ address, family: 6 })) : []),
    ]
    if (addresses.length > 0) return addresses
    throw v4.status === "rejected"
      ? v4.reason
      : v6.status === "rejected"
        ? v6.reason
        : new Error(`${name}: no address`)
  } finally {
    clearTimeout(deadline)
    clearTimeout(rest)
    signal?.removeEventListener("abort", cancel)
  }
}

/** `promise`, or a rejection with the signal's reason as soon as it aborts. */
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
  resolve: ResolveHost = resolveWithDns,
): Promise<Resolution> {
  const host = unbracketed(hostname)
  const family = isIP(host)
  const addresses =
    family === 0 ? await untilAborted(resolve(host, signal), signal) : [{ address: host, family }]
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
