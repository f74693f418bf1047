/**
 * Webhook signatures, for the sender and for receivers (tenants may import `verifySignature` as it
 * is). The header is
 *
 *   x-service-signature: t=<unix seconds>,v1=<hex HMAC-SHA256(secret, "<t>.<raw body>")>
 *
 * While a secret rotates, the sender signs with both the new and the previous secret and sends
 * `t=...,v1=<new>,v1=<old>`; a receiver accepts the request when any `v1` matches its secret, so it
 * can switch secrets at any moment of the overlap. The timestamp is signed too, and a receiver
 * refuses one outside its tolerance, so a captured request cannot be replayed later.
 *
 * Pure apart from HMAC: the caller passes the time.
 */
import { createHmac, timingSafeEqual } from "node:crypto"
import { assert } from "../assert.ts"

/** The header that carries the signature. */
export const signature_header = "x-service-signature"
/** How far a signature's timestamp may be from the receiver's clock, either way, by default. */
export const signature_tolerance_s_default = 300
/** The most `v1` signatures a header may carry (one per secret of an overlap, with room to spare). */
export const signature_count_max = 8
/** Longer headers are refused unread: a real one is about 150 characters per signature. */
export const signature_header_length_max = 2_048

const timestamp_pattern = /^[0-9]{1,12}$/
const signature_pattern = /^[0-9a-fA-F]{64}$/

const hmac = (secret: string, timestamp_s: number, body: string | Uint8Array): Buffer =>
  createHmac("sha256", secret).update(`${timestamp_s}.`).update(body).digest()

/**
 * The header value for `body`, signed at `timestamp_s` with each secret in order (the current one
 * first, then the previous one while it is still valid).
 * @example
 * signPayload({ secrets: ["whsec_new", "whsec_old"], body: '{"id":"evt_1"}', timestamp_s: 1735689600 })
 * // "t=1735689600,v1=5d1c...,v1=9a0e..."
 */
export function signPayload(input: {
  readonly secrets: ReadonlyArray<string>
  readonly body: string | Uint8Array
  readonly timestamp_s: number
}): string {
  const { secrets, body, timestamp_s } = input
  assert(secrets.length >= 1 && secrets.length <= signature_count_max, "one to eight signing secrets")
  assert(
    secrets.every((secret) => secret.length > 0),
    "a signing secret is not empty",
  )
  assert(Number.isSafeInteger(timestamp_s) && timestamp_s >= 0, "a signature timestamp is whole seconds")
  const signatures = secrets.map((secret) => `v1=${hmac(secret, timestamp_s, body).toString("hex")}`)
  return [`t=${timestamp_s}`, ...signatures].join(",")
}

export type SignatureFailure =
  | "missing"
  | "malformed"
  | "timestamp_too_old"
  | "timestamp_in_future"
  | "no_matching_signature"
export type SignatureVerification =
  | { readonly ok: true }
  | { readonly ok: false; readonly reason: SignatureFailure }

interface ParsedHeader {
  readonly timestamp_s: number
  readonly signatures: ReadonlyArray<Buffer>
}

/**
 * Reads `t=<digits>` (exactly once) and `v1=<64 hex digits>` (one to `signature_count_max` times).
 * Other schemes (`v0=`, a future `v2=`) are skipped, so a receiver keeps working when one is added.
 * Whitespace around items is allowed; empty items, missing `=`, and bad values are not.
 */
function parseHeader(header: string): ParsedHeader | undefined {
  if (header.length === 0 || header.length > signature_header_length_max) return undefined
  let timestamp_s: number | undefined
  const signatures: Buffer[] = []
  for (const item of header.split(",")) {
    const separator = item.indexOf("=")
    if (separator <= 0) return undefined
    const key = item.slice(0, separator).trim()
    const value = item.slice(separator + 1).trim()
    if (key === "t") {
      if (timestamp_s !== undefined || !timestamp_pattern.test(value)) return undefined
      timestamp_s = Number(value)
    } else if (key === "v1") {
      if (!signature_pattern.test(value) || signatures.length === signature_count_max) return undefined
      signatures.push(Buffer.from(value, "hex"))
    }
  }
  if (timestamp_s === undefined || signatures.length === 0) return undefined
  return { timestamp_s, signatures }
}

/**
 * Checks a webhook request: the header is well formed, its timestamp lies within `tolerance_s` of
 * `now_s`, and at least one `v1` signature is the HMAC of `"<t>.<body>"` under `secret`. Pass the
 * raw body exactly as received (before any JSON parsing), and your current time in Unix seconds.
 * The comparison takes the same time wherever the signatures differ.
 * @example
 * const result = verifySignature({
 *   header: request.headers["x-service-signature"],
 *   body: rawBody,
 *   secret: process.env.WEBHOOK_SECRET,
 *   now_s: Math.floor(Date.now() / 1000),
 * })
 * if (!result.ok) return response.status(400).send(result.reason)
 */
export function verifySignature(input: {
  /**
   * The header as Node's `request.headers` gives it: absent (undefined) is refused as "missing", a
   * list (never one header) as "malformed".
   */
  readonly header: string | ReadonlyArray<string> | undefined
  readonly body: string | Uint8Array
  readonly secret: string
  readonly now_s: number
  readonly tolerance_s?: number
}): SignatureVerification {
  const tolerance_s = input.tolerance_s ?? signature_tolerance_s_default
  if (input.header === undefined) return { ok: false, reason: "missing" }
  if (typeof input.header !== "string") return { ok: false, reason: "malformed" }
  const parsed = parseHeader(input.header)
  if (parsed === undefined) return { ok: false, reason: "malformed" }
  if (input.now_s - parsed.timestamp_s > tolerance_s) return { ok: false, reason: "timestamp_too_old" }
  if (parsed.timestamp_s - input.now_s > tolerance_s) return { ok: false, reason: "timestamp_in_future" }
  const expected = hmac(input.secret, parsed.timestamp_s, input.body)
  let matched = false
  // Every candidate is compared, so the time taken does not tell which one matched.
  for (const candidate of parsed.signatures) {
    if (timingSafeEqual(candidate, expected)) matched = true
  }
  return matched ? { ok: true } : { ok: false, reason: "no_matching_signature" }
}
