// Proves which webhook endpoints the platform accepts and where production may deliver: every IP
// address is classified by the range it falls in (IPv4, IPv6, and IPv6 forms that carry an IPv4
// address), production refuses non-public hosts however the URL writes them, a URL is stored as the
// WHATWG parser normalises it or refused when the parser would have to guess, and at delivery a
// host is refused when any address it resolves to is not public, the connection being pinned to
// the addresses checked; names are resolved by DNS queries on the event loop, which a silent server
// cannot make hold libuv's threads.
import { pbkdf2 } from "node:crypto"
import * as dgram from "node:dgram"
import * as http from "node:http"
import type { AddressInfo } from "node:net"
import fc from "fast-check"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { dnsResolverOf, pinnedLookup, resolvePublicAddresses } from "../../src/webhooks/endpoint-guard.ts"
import {
  type AddressKind,
  checkWebhookUrl,
  classifyAddress,
  hostRefusal,
  resolvedAddressRefusal,
} from "../../src/webhooks/endpoint-url.ts"

describe("classifyAddress", () => {
  it.each<readonly [string, AddressKind]>([
    ["8.8.8.8", "public"],
    ["93.184.215.14", "public"],
    ["0.0.0.0", "unspecified"],
    ["0.1.2.3", "reserved"],
    ["9.255.255.255", "public"],
    ["10.0.0.1", "private"],
    ["10.255.255.255", "private"],
    ["11.0.0.0", "public"],
    ["100.63.255.255", "public"],
    ["100.64.0.1", "carrier-grade-nat"],
    ["100.127.255.255", "carrier-grade-nat"],
    ["100.128.0.0", "public"],
    ["127.0.0.1", "loopback"],
    ["127.255.255.254", "loopback"],
    ["169.254.169.254", "link-local"],
    ["172.15.255.255", "public"],
    ["172.16.0.1", "private"],
    ["172.31.255.255", "private"],
    ["172.32.0.0", "public"],
    ["192.0.0.8", "reserved"],
    ["192.0.2.1", "reserved"],
    ["192.168.1.1", "private"],
    ["192.169.0.0", "public"],
    ["198.18.0.1", "reserved"],
    ["198.51.100.7", "reserved"],
    ["203.0.113.9", "reserved"],
    ["224.0.0.1", "multicast"],
    ["239.255.255.255", "multicast"],
    ["240.0.0.1", "reserved"],
    ["255.255.255.255", "reserved"],
  ])("IPv4 %s is %s", (address, kind) => {
    expect(classifyAddress(address)).toBe(kind)
  })

  it.each<readonly [string, AddressKind]>([
    ["::", "unspecified"],
    ["::1", "loopback"],
    ["0:0:0:0:0:0:0:1", "loopback"],
    ["fe80::1", "link-local"],
    ["fe80::1%eth0", "link-local"],
    ["febf:ffff::1", "link-local"],
    ["fec0::1", "reserved"],
    ["fc00::1", "unique-local"],
    ["fd12:3456:789a::1", "unique-local"],
    ["ff02::1", "multicast"],
    ["2001:4860:4860::8888", "public"],
    ["2606:4700:4700::1111", "public"],
    ["2a00:1450:4001:81b::200e", "public"],
    ["2001::1", "reserved"],
    ["2001:db8::1", "reserved"],
    ["3fff::1", "reserved"],
    ["100::1", "reserved"],
    ["4000::1", "reserved"],
    ["::7f00:1", "reserved"],
    ["::1.2.3.4", "reserved"],
  ])("IPv6 %s is %s", (address, kind) => {
    expect(classifyAddress(address)).toBe(kind)
  })

  it.each<readonly [string, AddressKind]>([
    ["::ffff:127.0.0.1", "loopback"],
    ["::ffff:7f00:1", "loopback"],
    ["0:0:0:0:0:ffff:7f00:1", "loopback"],
    ["::ffff:a9fe:a9fe", "link-local"],
    ["::ffff:10.0.0.1", "private"],
    ["::ffff:0.0.0.0", "unspecified"],
    ["::ffff:8.8.8.8", "public"],
    ["64:ff9b::7f00:1", "loopback"],
    ["64:ff9b::8.8.8.8", "public"],
    ["2002:7f00:1::", "loopback"],
    ["2002:c0a8:101::1", "private"],
    ["2002:808:808::1", "public"],
  ])("IPv6 carrying IPv4, %s, is %s", (address, kind) => {
    expect(classifyAddress(address)).toBe(kind)
  })
})

describe("hostRefusal, on the hostname the URL parser gives", () => {
  const hostOf = (url: string) => new URL(url).hostname

  it.each([
    ["https://127.0.0.1/x", "127.0.0.1 is not a public address (loopback)"],
    ["https://2130706433/", "127.0.0.1 is not a public address (loopback)"],
    ["https://0x7f.1/", "127.0.0.1 is not a public address (loopback)"],
    ["https://017700000001/", "127.0.0.1 is not a public address (loopback)"],
    ["https://127.1/", "127.0.0.1 is not a public address (loopback)"],
    ["https://0177.0.0.1/", "127.0.0.1 is not a public address (loopback)"],
    ["https://127.0.0.1./", "127.0.0.1 is not a public address (loopback)"],
    ["https://%31%32%37.0.0.1/", "127.0.0.1 is not a public address (loopback)"],
    ["https://\u2460\u2461\u2466.0.0.1/", "127.0.0.1 is not a public address (loopback)"],
    ["https://10.0.0.1/x", "10.0.0.1 is not a public address (private)"],
    ["https://0.0.0.0/x", "0.0.0.0 is not a public address (unspecified)"],
    ["https://169.254.169.254/latest/meta-data", "169.254.169.254 is not a public address (link-local)"],
    ["https://100.100.100.200/", "100.100.100.200 is not a public address (carrier-grade-nat)"],
    ["https://[::1]/x", "::1 is not a public address (loopback)"],
    ["https://[::]/x", ":: is not a public address (unspecified)"],
    ["https://[::ffff:127.0.0.1]/x", "::ffff:7f00:1 is not a public address (loopback)"],
    ["https://[fd00::1]/", "fd00::1 is not a public address (unique-local)"],
    ["https://[fe80::1]/", "fe80::1 is not a public address (link-local)"],
    ["https://localhost/", "localhost is a loopback name"],
    ["https://LOCALHOST./", "localhost. is a loopback name"],
    ["https://LOCALHOST\u3002/", "localhost. is a loopback name"],
    ["https://api.localhost/", "api.localhost is a private name (*.localhost)"],
    ["https://printer.local/", "printer.local is a private name (*.local)"],
    ["https://metadata.google.internal/x", "metadata.google.internal is a private name (*.internal)"],
    ["https://metadata.google.internal./x", "metadata.google.internal. is a private name (*.internal)"],
    ["https://intranet/", "intranet is a single-label name; give a fully qualified domain name"],
  ])("refuses %s: %s", (url, refusal) => {
    expect(hostRefusal(hostOf(url))).toBe(refusal)
  })

  it.each([
    "https://example.com/",
    "https://hooks.example.co.uk/",
    "https://8.8.8.8/",
    "https://[2001:4860:4860::8888]/",
    "https://localhost.example.com/",
    "https://internal.example.com/",
    "https://xn--bcher-kva.example/",
    // A public name that resolves to 127.0.0.1: only the delivery-time check can see that.
    "https://127.0.0.1.nip.io/",
  ])("accepts %s", (url) => {
    expect(hostRefusal(hostOf(url))).toBeUndefined()
  })
})

describe("checkWebhookUrl", () => {
  it.each([
    ["HTTP://LOCALHOST:3199/a", "sandbox", "http://localhost:3199/a"],
    ["hTtP://LocalHost:3199/a", "sandbox", "http://localhost:3199/a"],
    ["http://127.0.0.1:8080/hooks", "sandbox", "http://127.0.0.1:8080/hooks"],
    ["http://10.0.0.1/hooks", "sandbox", "http://10.0.0.1/hooks"],
    ["https://example.com/hooks", "production", "https://example.com/hooks"],
    ["HTTPS://EXAMPLE.COM/Hooks?Order=1", "production", "https://example.com/Hooks?Order=1"],
    ["https://example.com:443/x", "production", "https://example.com/x"],
    ["https://bücher.example/x", "production", "https://xn--bcher-kva.example/x"],
    ["https://8.8.8.8/x", "production", "https://8.8.8.8/x"],
    ["https://hooks.example.com./x", "production", "https://hooks.example.com./x"],
  ] as const)("accepts %s in %s as %s", (url, environment, normalised) => {
    expect(checkWebhookUrl(url, environment)).toEqual({ ok: true, url: normalised })
  })

  const spaces = "the URL must not contain spaces or control characters (percent-encode them)"
  const scheme = "the URL must start with http:// or https://"
  it.each([
    [" http://localhost:3199/a", spaces],
    ["\thttp://localhost:3199/a", spaces],
    ["http://localhost:3199/a\n", spaces],
    ["http://local host/a", spaces],
    ["http://localhost/a\u0000", spaces],
    ["http:localhost:3199/a", scheme],
    ["http:/localhost:3199/a", scheme],
    ["http:\\\\localhost\\a", "the URL must not contain backslashes"],
    ["http://localhost\\a", "the URL must not contain backslashes"],
    ["ftp://example.com", scheme],
    ["/relative", scheme],
    ["not a url", spaces],
    ["", scheme],
    ["http://", "the URL must name its host right after the //"],
    ["https://[::1/", "not a valid URL"],
    ["https://user:pass@example.com", "the URL must not contain credentials"],
    ["https://@example.com/in", "the URL must not contain credentials"],
    ["https://user@example.com/in", "the URL must not contain credentials"],
    ["https:///in", "the URL must name its host right after the //"],
    ["https:///hooks.example.com/in", "the URL must name its host right after the //"],
    ["http://?x", "the URL must name its host right after the //"],
    ["https://example.com/\u0085in", spaces],
    ["https://example.com/\u00a0in", spaces],
    ["https://example.com/in\u2028", spaces],
    ["https://example.com/\ufeffin", spaces],
    ["https://../x", "the URL's host name has an empty label"],
    ["http://./", "the URL's host name has an empty label"],
    ["https://hooks..example.com/x", "the URL's host name has an empty label"],
    ["https://example.com:0/x", "the URL's port must be from 1 to 65535"],
    [`https://example.com/${"a".repeat(2_100)}`, "the URL is longer than 2,048 characters"],
    [`https://example.com/${"é".repeat(700)}`, "the URL is longer than 2,048 characters once normalised"],
  ])("refuses %j in the sandbox: %s", (url, problem) => {
    expect(checkWebhookUrl(url, "sandbox")).toEqual({ ok: false, problem })
  })

  it("refuses http in production", () => {
    expect(checkWebhookUrl("http://example.com/hooks", "production")).toEqual({
      ok: false,
      problem: "production endpoints need https",
    })
  })

  it.each([
    ["https://169.254.169.254/latest/meta-data", "169.254.169.254 is not a public address (link-local)"],
    ["https://127.0.0.1/x", "127.0.0.1 is not a public address (loopback)"],
    ["https://10.0.0.1/x", "10.0.0.1 is not a public address (private)"],
    ["https://[::1]/x", "::1 is not a public address (loopback)"],
    ["https://0.0.0.0/x", "0.0.0.0 is not a public address (unspecified)"],
    ["https://metadata.google.internal/x", "metadata.google.internal is a private name (*.internal)"],
    ["https://2130706433/", "127.0.0.1 is not a public address (loopback)"],
    ["https://0x7f.1/", "127.0.0.1 is not a public address (loopback)"],
    ["https://[::ffff:127.0.0.1]/", "::ffff:7f00:1 is not a public address (loopback)"],
    ["HTTPS://LOCALHOST:3199/a", "localhost is a loopback name"],
  ])("refuses %s in production: %s", (url, refusal) => {
    expect(checkWebhookUrl(url, "production")).toEqual({
      ok: false,
      problem: `production endpoints must reach a public host: ${refusal}`,
    })
  })
})

describe("checkWebhookUrl, as a property", () => {
  // The store asserts that a URL it is given is one checkWebhookUrl accepted, as it wrote it: a
  // normalised URL that checked differently a second time would be a 500.
  const piece = fc.constantFrom(
    "HTTP",
    "hTtPs",
    "http",
    "https",
    ":",
    "/",
    "//",
    "\\",
    " ",
    "\t",
    "@",
    "[",
    "]",
    "::1",
    "127.0.0.1",
    "0x7f.1",
    "2130706433",
    "LocalHost",
    "example.com",
    "EXAMPLE.COM.",
    "xn--bcher-kva",
    "bücher",
    "%41",
    "%00",
    "?",
    "#",
    ".",
    "..",
    ":443",
    ":8080",
    "é",
    "\u00a0",
  )
  const url = fc.oneof(
    fc.webUrl({ withQueryParameters: true, withFragments: true }),
    fc
      .tuple(fc.constantFrom("http://", "HTTPS://", "hTtP://", ""), fc.array(piece, { maxLength: 12 }))
      .map(([scheme, pieces]) => `${scheme}${pieces.join("")}`),
    fc.string(),
  )

  it("accepts what it gave, unchanged, in the same environment", () => {
    fc.assert(
      fc.property(url, fc.constantFrom("sandbox", "production"), (text, environment) => {
        const first = checkWebhookUrl(text, environment)
        if (!first.ok) return
        expect(checkWebhookUrl(first.url, environment)).toEqual(first)
      }),
      { numRuns: 5_000 },
    )
  })
})

describe("at delivery", () => {
  it("refuses a host when any address it resolves to is not public", () => {
    expect(resolvedAddressRefusal("hooks.example.com", ["93.184.215.14", "2606:2800::1"])).toBeUndefined()
    expect(resolvedAddressRefusal("hooks.example.com", ["93.184.215.14", "127.0.0.1"])).toBe(
      "refused: hooks.example.com resolves to 127.0.0.1 (loopback), not only to public addresses",
    )
    expect(resolvedAddressRefusal("hooks.example.com", ["::ffff:a9fe:a9fe"])).toBe(
      "refused: hooks.example.com resolves to ::ffff:a9fe:a9fe (link-local), not only to public addresses",
    )
    expect(resolvedAddressRefusal("[::1]", ["::1"])).toBe("refused: ::1 is not a public address (loopback)")
  })

  it("resolves localhost as loopback (RFC 6761) and IP literals as themselves, and checks what it gives", async () => {
    const signal = new AbortController().signal
    const localhost = await resolvePublicAddresses("localhost", signal)
    expect(localhost.ok).toBe(false)
    if (!localhost.ok)
      expect(localhost.refusal).toMatch(/^refused: localhost resolves to (127\.0\.0\.1|::1) \(loopback\)/)
    expect(await resolvePublicAddresses("8.8.8.8", signal)).toEqual({
      ok: true,
      addresses: [{ address: "8.8.8.8", family: 4 }],
    })
    expect(await resolvePublicAddresses("[::ffff:7f00:1]", signal)).toEqual({
      ok: false,
      refusal: "refused: ::ffff:7f00:1 is not a public address (loopback)",
    })
  })

  it("checks every answer afresh: a name that rebinds to a private address is refused", async () => {
    const answers = [[{ address: "93.184.215.14", family: 4 }], [{ address: "10.0.0.7", family: 4 }]]
    const rebinding = async () => answers.shift() ?? []
    const signal = new AbortController().signal
    expect(await resolvePublicAddresses("rebind.example", signal, rebinding)).toMatchObject({ ok: true })
    expect(await resolvePublicAddresses("rebind.example", signal, rebinding)).toEqual({
      ok: false,
      refusal: "refused: rebind.example resolves to 10.0.0.7 (private), not only to public addresses",
    })
  })

  it("resolves with DNS queries on the event loop: names whose server never answers hold none of libuv's threads, and an abort cancels them", async () => {
    // A DNS server that takes every query and answers none.
    const silent = dgram.createSocket("udp4")
    const queries: Array<Buffer> = []
    silent.on("message", (query) => queries.push(query))
    await new Promise<void>((resolve) => silent.bind(0, "127.0.0.1", resolve))
    try {
      const resolve = dnsResolverOf([`127.0.0.1:${silent.address().port}`])
      const controller = new AbortController()
      const settled: Array<string> = []
      const lookups = Array.from({ length: 8 }, (_, index) =>
        resolve(`stuck-${index}.example`, controller.signal).then(
          () => settled.push("answered"),
          (error: NodeJS.ErrnoException) => settled.push(String(error.code)),
        ),
      )
      // Eight lookups pending, more than libuv's four threads: work on those threads still runs.
      await new Promise((resolve) => setTimeout(resolve, 100))
      expect(queries.length).toBeGreaterThan(0)
      await new Promise<void>((resolve, reject) =>
        pbkdf2("key", "salt", 1, 32, "sha256", (error) => (error ? reject(error) : resolve())),
      )
      expect(settled).toEqual([])
      controller.abort()
      await Promise.all(lookups)
      expect(new Set(settled)).toEqual(new Set(["ECANCELLED"]))
    } finally {
      silent.close()
    }
  })

  it("bounds a lookup: at most 4 s against a server that never answers, and half a second for AAAA once A answered", async () => {
    // Answers A queries at once (one public address), takes AAAA queries and answers none.
    const server = dgram.createSocket("udp4")
    server.on("message", (query, peer) => {
      let offset = 12
      while ((query[offset] ?? 0) !== 0) offset += (query[offset] ?? 0) + 1
      const qtype = query.readUInt16BE(offset + 1)
      if (qtype !== 1) return
      const question = query.subarray(12, offset + 5)
      const header = Buffer.from([0, 0, 0x81, 0x80, 0, 1, 0, 1, 0, 0, 0, 0])
      query.copy(header, 0, 0, 2)
      const answer = Buffer.from([0xc0, 0x0c, 0, 1, 0, 1, 0, 0, 0, 60, 0, 4, 93, 184, 215, 14])
      server.send(Buffer.concat([header, question, answer]), peer.port, peer.address)
    })
    await new Promise<void>((resolve) => server.bind(0, "127.0.0.1", resolve))
    const silent = dgram.createSocket("udp4")
    await new Promise<void>((resolve) => silent.bind(0, "127.0.0.1", resolve))
    try {
      // Two servers that never answer, two tries each, the timeout doubling: c-ares alone would
      // wait well over 10 s.
      const stuck = dnsResolverOf([
        `127.0.0.1:${silent.address().port}`,
        `127.0.0.2:${silent.address().port}`,
      ])
      const started = Date.now()
      await expect(stuck("stuck.example")).rejects.toMatchObject({ code: "ECANCELLED" })
      expect(Date.now() - started).toBeLessThan(5_000)
      expect(Date.now() - started).toBeGreaterThanOrEqual(3_900)
      const half = dnsResolverOf([`127.0.0.1:${server.address().port}`])
      const asked = Date.now()
      expect(await half("v4-only.example")).toEqual([{ address: "93.184.215.14", family: 4 }])
      expect(Date.now() - asked).toBeLessThan(1_500)
    } finally {
      server.close()
      silent.close()
    }
  }, 15_000)

  it("gives up on a resolver that does not answer when the attempt's signal aborts", async () => {
    const never = () => new Promise<never>(() => {})
    await expect(
      resolvePublicAddresses("slow.example", AbortSignal.timeout(50), never),
    ).rejects.toMatchObject({
      name: "TimeoutError",
    })
  })

  describe("pinnedLookup", () => {
    const addresses = [
      { address: "93.184.215.14", family: 4 },
      { address: "2606:2800::1", family: 6 },
    ]
    const ask = (options: { family?: number; all?: boolean }) =>
      new Promise((resolve) =>
        pinnedLookup(addresses)("hooks.example", options, (error, address, family) =>
          resolve({ code: error?.code ?? null, address, family }),
        ),
      )

    it("answers every query with the checked addresses, of the family asked for", async () => {
      expect(await ask({ all: true })).toEqual({ code: null, address: addresses, family: undefined })
      expect(await ask({ family: 6, all: true })).toEqual({
        code: null,
        address: [addresses[1]],
        family: undefined,
      })
      expect(await ask({})).toEqual({ code: null, address: "93.184.215.14", family: 4 })
      expect(await ask({ family: 6 })).toEqual({ code: null, address: "2606:2800::1", family: 6 })
      const v4_only = await new Promise((resolve) =>
        pinnedLookup([{ address: "93.184.215.14", family: 4 }])("hooks.example", { family: 6 }, (error) =>
          resolve(error?.code),
        ),
      )
      expect(v4_only).toBe("ENOTFOUND")
    })

    let server: http.Server
    beforeAll(async () => {
      server = http.createServer((request, response) => response.end(`reached ${request.headers.host}`))
      await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve))
    })
    afterAll(async () => {
      server.closeAllConnections()
      await new Promise((resolve) => server.close(resolve))
    })

    it("is where http.request connects: a name no resolver knows reaches the pinned address", async () => {
      const { port } = server.address() as AddressInfo
      const body = await new Promise<string>((resolve, reject) => {
        const request = http.get(
          `http://hooks.invalid:${port}/`,
          { lookup: pinnedLookup([{ address: "127.0.0.1", family: 4 }]), agent: false },
          (response) => {
            let text = ""
            response.on("data", (chunk) => (text += chunk))
            response.on("end", () => resolve(text))
          },
        )
        request.on("error", reject)
      })
      expect(body).toBe(`reached hooks.invalid:${port}`)
    })
  })
})
