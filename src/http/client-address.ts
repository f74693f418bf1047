/**
 * The address a request came from, for the budgets kept per client (refused keys, registrations).
 * Directly, the socket's peer. Behind `TRUSTED_PROXY_HOPS` proxies (a load balancer, a reverse
 * proxy) that peer is the nearest proxy, shared by every client, so the client is read from
 * `X-Forwarded-For`, to which each proxy appends the address it received the request from: the
 * client is the entry that many places from its end. Entries before it came from the client itself
 * and are not trusted. A header shorter than the proxies configured falls back to the peer.
 */
import { Option } from "effect"
import type { HttpServerRequest } from "effect/http"

export const clientAddress = (
  request: HttpServerRequest.HttpServerRequest,
  trusted_proxy_hops: number,
): string => {
  const peer = Option.getOrElse(request.remoteAddress, () => "unknown")
  if (trusted_proxy_hops === 0) return peer
  const forwarded = request.headers["x-forwarded-for"]
  if (forwarded === undefined) return peer
  const hops = forwarded
    .split(",")
    .map((hop) => hop.trim())
    .filter((hop) => hop !== "")
  return hops[hops.length - trusted_proxy_hops] ?? peer
}
