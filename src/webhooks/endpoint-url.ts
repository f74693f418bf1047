/**
 * What a webhook endpoint may be. `checkWebhookUrl` checks and normalises the URL a tenant gives
 * when creating or changing an endpoint; `classifyAddress` says where an IP address points, and
 * `hostRefusal` why a production endpoint may not name a host. Delivery checks again, on the
 * addresses the host resolves to at that moment (see `endpoint-guard.ts`).
 *
 * The sandbox may reach anything: tenants and our tests run receivers on their own machines.
 * Production reaches only public addresses, so that no tenant can make the platform call into its
 * own network (cloud metadata, databases, admin ports) and read the answer in the delivery log.
 *
 * Pure: no DNS, no clock.
 */
import { isIP } from "node:net"
import { assert } from "../../domain/assert.ts"
import type { Environment } from "../../domain/platform/scopes.ts"

export const url_length_max = 2_048

/** Where an IP address points. Production delivers only to `public` ones. */
export type AddressKind =
  | "public"
  | "unspecified"
  | "loopback"
  | "private"
  | "link-local"
  | "unique-local"
  | "carrier-grade-nat"
  | "multicast"
  | "reserved"

interface AddressRange {
  /** The range's first address, as a number (32 bits for IPv4, 128 for IPv6). */
  readonly start: bigint
  readonly prefix_length: number
  readonly kind: AddressKind
}

const ipv4Value = (text: string): bigint =>
  text.split(".").reduce((value, octet) => (value << 8n) | BigInt(Number(octet)), 0n)

/** An IPv6 address (valid, without zone) as 128 bits; an IPv4 tail becomes its two groups. */
const ipv6Value = (text: string): bigint => {
  const tail_start = text.lastIndexOf(":") + 1
  const tail = text.slice(tail_start)
  const tail_value = tail.includes(".") ? ipv4Value(tail) : undefined
  const hex =
    tail_value === undefined
      ? text
      : `${text.slice(0, tail_start)}${(tail_value >> 16n).toString(16)}:${(tail_value & 0xffffn).toString(16)}`
  const [head = "", rest] = hex.split("::")
  const head_groups = head === "" ? [] : head.split(":")
  const rest_groups = rest === undefined || rest === "" ? [] : rest.split(":")
  const zero_count = rest === undefined ? 0 : 8 - head_groups.length - rest_groups.length
  const groups = [...head_groups, ...Array<string>(zero_count).fill("0"), ...rest_groups]
  assert(groups.length === 8, "an IPv6 address has eight groups")
  return groups.reduce((value, group) => (value << 16n) | BigInt(Number.parseInt(group, 16)), 0n)
}

const range = (cidr: string, kind: AddressKind): AddressRange => {
  const [address = "", length = ""] = cidr.split("/")
  const version = isIP(address)
  assert(version !== 0, "a range starts at an IP address")
  return {
    start: version === 4 ? ipv4Value(address) : ipv6Value(address),
    prefix_length: Number(length),
    kind,
  }
}

/** IANA's special-purpose IPv4 blocks that are not globally reachable; the first match wins. */
const ipv4_ranges: ReadonlyArray<AddressRange> = [
  range("0.0.0.0/32", "unspecified"),
  range("0.0.0.0/8", "reserved"), // "this network"
  range("10.0.0.0/8", "private"),
  range("100.64.0.0/10", "carrier-grade-nat"),
  range("127.0.0.0/8", "loopback"),
  range("169.254.0.0/16", "link-local"), // cloud metadata services live here
  range("172.16.0.0/12", "private"),
  range("192.0.0.0/24", "reserved"), // IETF protocol assignments
  range("192.0.2.0/24", "reserved"), // documentation
  range("192.88.99.0/24", "reserved"), // 6to4 relays, deprecated
  range("192.168.0.0/16", "private"),
  range("198.18.0.0/15", "reserved"), // benchmarking
  range("198.51.100.0/24", "reserved"), // documentation
  range("203.0.113.0/24", "reserved"), // documentation
  range("224.0.0.0/4", "multicast"),
  range("240.0.0.0/4", "reserved"), // future use, and the broadcast address
]

/** IPv6 blocks; an address in none of them is outside global unicast (2000::/3), so reserved. */
const ipv6_ranges: ReadonlyArray<AddressRange> = [
  range("::/128", "unspecified"),
  range("::1/128", "loopback"),
  range("fc00::/7", "unique-local"),
  range("fe80::/10", "link-local"),
  range("ff00::/8", "multicast"),
  range("2001::/23", "reserved"), // IETF protocol assignments, Teredo among them
  range("2001:db8::/32", "reserved"), // documentation
  range("3fff::/20", "reserved"), // documentation
  range("2000::/3", "public"),
]

const inRange = (range: AddressRange, bits: number, value: bigint): boolean => {
  const host_bits = BigInt(bits - range.prefix_length)
  return value >> host_bits === range.start >> host_bits
}

const kindIn = (ranges: ReadonlyArray<AddressRange>, bits: number, value: bigint): AddressKind | undefined =>
  ranges.find((range) => inRange(range, bits, value))?.kind

const classifyIpv4 = (value: bigint): AddressKind => kindIn(ipv4_ranges, 32, value) ?? "public"

/**
 * IPv6 forms that carry an IPv4 address reach that address (an IPv4-mapped socket, a NAT64 gateway,
 * a 6to4 relay), so they are what it is.
 */
const embedded_ipv4_ranges: ReadonlyArray<{ readonly range: AddressRange; readonly shift: bigint }> = [
  { range: range("::ffff:0:0/96", "reserved"), shift: 0n }, // IPv4-mapped
  { range: range("64:ff9b::/96", "reserved"), shift: 0n }, // NAT64, well-known prefix
  { range: range("2002::/16", "reserved"), shift: 80n }, // 6to4: the IPv4 address follows the prefix
]

const classifyIpv6 = (value: bigint): AddressKind => {
  const embedding = embedded_ipv4_ranges.find(({ range }) => inRange(range, 128, value))
  if (embedding !== undefined) return classifyIpv4((value >> embedding.shift) & 0xffff_ffffn)
  return kindIn(ipv6_ranges, 128, value) ?? "reserved"
}

/**
 * Where an IP address points: "public", or the kind of non-public range it is in (loopback,
 * private 10/8 172.16/12 192.168/16, link-local, unique-local fc00::/7, unspecified,
 * carrier-grade NAT 100.64/10, multicast, reserved). IPv6 forms carrying an IPv4 address
 * (`::ffff:a.b.c.d`, NAT64 `64:ff9b::/96`, 6to4 `2002::/16`) are classified by that address.
 * Takes an address as `node:net` writes one (no brackets; an IPv6 zone is ignored).
 * @example classifyAddress("169.254.169.254") // "link-local"
 * @example classifyAddress("::ffff:7f00:1") // "loopback"
 * @example classifyAddress("8.8.8.8") // "public"
 */
export function classifyAddress(address: string): AddressKind {
  const [unzoned = ""] = address.split("%")
  const version = isIP(unzoned)
  assert(version !== 0, "classifyAddress takes an IP address")
  return version === 4 ? classifyIpv4(ipv4Value(unzoned)) : classifyIpv6(ipv6Value(unzoned))
}

/** A URL's hostname without the brackets of an IPv6 literal: what `node:net` and DNS take. */
export const unbracketed = (hostname: string): string =>
  hostname.startsWith("[") && hostname.endsWith("]") ? hostname.slice(1, -1) : hostname

/** Names that never lead to the public internet (RFC 6761, RFC 6762, cloud providers' internal DNS). */
const private_name_suffixes = [".localhost", ".local", ".internal"] as const

/**
 * Why a production endpoint may not name this host, or undefined when it may. Takes the hostname
 * as the WHATWG URL parser gives it (lower case, IPv4 in dotted form however it was written, IPv6
 * in brackets). Refuses IP literals that are not public, `localhost` and `*.localhost`, `*.local`,
 * `*.internal` (`metadata.google.internal` among them), and single-label names, which the
 * resolver would complete with the platform's own search domains.
 * @example hostRefusal(new URL("https://0x7f.1/").hostname) // "127.0.0.1 is not a public address (loopback)"
 * @example hostRefusal("hooks.example.com") // undefined
 */
export function hostRefusal(hostname: string): string | undefined {
  const bare = unbracketed(hostname)
  if (isIP(bare) !== 0) {
    const kind = classifyAddress(bare)
    return kind === "public" ? undefined : `${bare} is not a public address (${kind})`
  }
  const name = bare.toLowerCase().replace(/\.$/, "")
  if (name === "localhost") return `${hostname} is a loopback name`
  const suffix = private_name_suffixes.find((ending) => name.endsWith(ending))
  if (suffix !== undefined) return `${hostname} is a private name (*${suffix})`
  if (!name.includes(".")) return `${hostname} is a single-label name; give a fully qualified domain name`
  return undefined
}

/** On success, `url` is the URL as the WHATWG parser writes it: store and call that one. */
export type WebhookUrlCheck =
  | { readonly ok: true; readonly url: string }
  | { readonly ok: false; readonly problem: string }

const refused = (problem: string): WebhookUrlCheck => ({ ok: false, problem })

/** Spaces of any kind (U+00A0 and Unicode's others too) or control characters (C0, DEL, C1) anywhere. */
const hasSpaceOrControl = (text: string): boolean => {
  for (let i = 0; i < text.length; i++) {
    const code = text.charCodeAt(i)
    if (code <= 0x20 || (code >= 0x7f && code <= 0x9f)) return true
  }
  return /\s/.test(text)
}

/** What comes between "//" and the path, query or fragment: userinfo, host and port. */
const authorityOf = (url: string): string => {
  const rest = url.slice(url.indexOf("//") + 2)
  const end = rest.search(/[/?#]/)
  return end === -1 ? rest : rest.slice(0, end)
}

/**
 * Checks a URL for a webhook endpoint and gives it normalised (scheme and host in lower case, IPv4
 * in dotted form, default port dropped), or says what is wrong with it. Absolute http(s) written
 * with "//" and the host right after it, without spaces (of any kind), control characters (C0, DEL,
 * C1), backslashes or credentials (an empty userinfo too), at most 2,048 characters. Production endpoints must use https and a host `hostRefusal` accepts.
 * @example checkWebhookUrl("HTTPS://Example.com/hooks", "production") // { ok: true, url: "https://example.com/hooks" }
 * @example checkWebhookUrl("https://10.0.0.1/x", "production").problem // "production endpoints must reach a public host: 10.0.0.1 is not a public address (private)"
 */
export function checkWebhookUrl(url: string, environment: Environment): WebhookUrlCheck {
  if (url.length > url_length_max) return refused("the URL is longer than 2,048 characters")
  // The parser would silently drop leading and trailing spaces and controls, remove tabs and
  // newlines anywhere, read "\" as "/" and "http:host" as "http://host": what it stored and called
  // would not be what the tenant wrote, so these are refused rather than repaired.
  if (hasSpaceOrControl(url)) {
    return refused("the URL must not contain spaces or control characters (percent-encode them)")
  }
  if (url.includes("\\")) return refused("the URL must not contain backslashes")
  if (!/^https?:\/\//i.test(url)) return refused("the URL must start with http:// or https://")
  // The parser skips further slashes ("https:///hooks.example.com/x") and reads an empty userinfo
  // ("https://@hooks.example.com") as none: the host must follow "//", and "@" means credentials.
  const authority = authorityOf(url)
  if (authority === "") return refused("the URL must name its host right after the //")
  if (authority.includes("@")) return refused("the URL must not contain credentials")
  if (!URL.canParse(url)) return refused("not a valid URL")
  const parsed = new URL(url)
  // Nothing listens on port 0, and a name with an empty label (".", "..", "a..b") resolves nowhere.
  if (parsed.port === "0") return refused("the URL's port must be from 1 to 65535")
  const host = unbracketed(parsed.hostname)
  if (isIP(host) === 0 && host.replace(/\.$/, "").split(".").includes("")) {
    return refused("the URL's host name has an empty label")
  }
  if (environment === "production") {
    if (parsed.protocol !== "https:") return refused("production endpoints need https")
    const refusal = hostRefusal(parsed.hostname)
    if (refusal !== undefined) return refused(`production endpoints must reach a public host: ${refusal}`)
  }
  if (parsed.href.length > url_length_max) {
    return refused("the URL is longer than 2,048 characters once normalised")
  }
  return { ok: true, url: parsed.href }
}

/**
 * Why a production delivery may not connect to a host that resolved to `addresses` (all of them
 * are checked: a connection may go to any), or undefined when every one is public.
 * @example resolvedAddressRefusal("hooks.example.com", ["93.184.215.14", "127.0.0.1"]) // "refused: hooks.example.com resolves to 127.0.0.1 (loopback), not only to public addresses"
 */
export function resolvedAddressRefusal(
  hostname: string,
  addresses: ReadonlyArray<string>,
): string | undefined {
  assert(addresses.length >= 1, "a resolved host has at least one address")
  const bare = unbracketed(hostname)
  for (const address of addresses) {
    const kind = classifyAddress(address)
    if (kind === "public") continue
    return address === bare
      ? `refused: ${address} is not a public address (${kind})`
      : `refused: ${bare} resolves to ${address} (${kind}), not only to public addresses`
  }
  return undefined
}
