/**
 * The hash chain of an event stream, shared by every event-store adapter and by the auditor's
 * `verify` command. Pure: the same event always gives the same bytes and the same hash, on any
 * machine, so a chain written by one adapter can be verified from a plain export.
 *
 * Each event's hash is SHA-256 over the previous event's hash (32 bytes; 32 zero bytes for a
 * stream's first event) followed by the canonical JSON of the event's recorded fields.
 */
import { hash } from "node:crypto"

/** The `prev_hash` of a stream's first event: 32 zero bytes, hex. */
export const GENESIS_HASH = "0".repeat(64)

/** Nesting deeper than this is rejected: it bounds the recursion and catches cycles. */
const json_depth_max = 64

/** A value that has no canonical JSON form (a programmer error: events are plain JSON data). */
export class CanonicalJsonError extends TypeError {
  override readonly name = "CanonicalJsonError"
}

const isPlainObject = (value: object): boolean => {
  const prototype: unknown = Object.getPrototypeOf(value)
  return prototype === Object.prototype || prototype === null
}

/** Thrown by the fast writer; `canonicalJson` then walks again with paths to say what and where. */
const invalid = new Error("canonical JSON: invalid value")

/** Cleared by `writeFast` when the text cannot give the value back (an undefined key, -0). */
let exact = true

/** The canonical text of a valid value; throws `invalid` for anything else. Builds no paths. */
const writeFast = (value: unknown, depth: number): string => {
  if (depth > json_depth_max) throw invalid
  if (value === null) return "null"
  switch (typeof value) {
    case "string":
      return JSON.stringify(value)
    case "boolean":
      return value ? "true" : "false"
    case "number":
      if (!Number.isFinite(value)) throw invalid
      if (Object.is(value, -0)) exact = false
      return JSON.stringify(value)
    case "object":
      break
    default:
      throw invalid
  }
  if (Array.isArray(value)) {
    let out = "["
    for (let index = 0; index < value.length; index += 1) {
      const item: unknown = value[index]
      if (item === undefined) throw invalid
      if (index > 0) out += ","
      out += writeFast(item, depth + 1)
    }
    return `${out}]`
  }
  if (!isPlainObject(value)) throw invalid
  const record = value as Readonly<Record<string, unknown>>
  const keys = Object.keys(record).sort()
  let out = "{"
  let first = true
  for (const key of keys) {
    const item = record[key]
    // Keys with an undefined value are left out, as JSON.stringify (and hence the database) does.
    if (item === undefined) {
      exact = false
      continue
    }
    if (!first) out += ","
    first = false
    out += `${JSON.stringify(key)}:${writeFast(item, depth + 1)}`
  }
  return `${out}}`
}

/**
 * Whether `JSON.stringify(value)` is already its canonical text: plain JSON data (finite numbers
 * other than -0, no undefined anywhere, plain objects within the depth limit) whose objects list
 * their keys in sorted order, as enumeration (and hence JSON.stringify) meets them. The ledger
 * builds its events' data and metadata that way, so the hot path serialises natively and only
 * other values take `writeFast`'s sorting walk.
 */
const isSortedJson = (value: unknown, depth: number): boolean => {
  if (depth > json_depth_max) return false
  if (value === null) return true
  switch (typeof value) {
    case "string":
    case "boolean":
      return true
    case "number":
      return Number.isFinite(value) && !Object.is(value, -0)
    case "object":
      break
    default:
      return false
  }
  if (Array.isArray(value)) {
    for (let index = 0; index < value.length; index += 1) {
      const item: unknown = value[index]
      if (item === undefined || !isSortedJson(item, depth + 1)) return false
    }
    return true
  }
  if (!isPlainObject(value)) return false
  const record = value as Readonly<Record<string, unknown>>
  let previous: string | undefined
  for (const key in record) {
    if (!Object.hasOwn(record, key)) return false
    if (previous !== undefined && !(previous < key)) return false
    previous = key
    const item = record[key]
    if (item === undefined || !isSortedJson(item, depth + 1)) return false
  }
  return true
}

/** The slow walk, with paths, run only to explain a value `writeFast` refused. */
const writeCanonical = (value: unknown, path: string, depth: number, out: string[]): void => {
  if (depth > json_depth_max) throw new CanonicalJsonError(`${path}: nested deeper than ${json_depth_max}`)
  if (value === null || typeof value === "boolean" || typeof value === "string") {
    out.push(JSON.stringify(value))
    return
  }
  if (typeof value === "number") {
    if (!Number.isFinite(value)) throw new CanonicalJsonError(`${path}: ${value} has no JSON form`)
    out.push(JSON.stringify(value))
    return
  }
  if (typeof value !== "object")
    throw new CanonicalJsonError(`${path}: ${typeof value} values have no JSON form`)
  if (Array.isArray(value)) {
    out.push("[")
    for (let index = 0; index < value.length; index += 1) {
      const item: unknown = value[index]
      if (item === undefined) throw new CanonicalJsonError(`${path}[${index}]: undefined has no JSON form`)
      if (index > 0) out.push(",")
      writeCanonical(item, `${path}[${index}]`, depth + 1, out)
    }
    out.push("]")
    return
  }
  if (!isPlainObject(value)) {
    throw new CanonicalJsonError(
      `${path}: only plain objects have a JSON form, got ${Object.prototype.toString.call(value)}`,
    )
  }
  const record = value as Readonly<Record<string, unknown>>
  // Keys with an undefined value are left out, as JSON.stringify (and hence the database) does.
  const keys = Object.keys(record)
    .filter((key) => record[key] !== undefined)
    .sort()
  out.push("{")
  keys.forEach((key, index) => {
    if (index > 0) out.push(",")
    out.push(JSON.stringify(key), ":")
    writeCanonical(record[key], `${path}.${key}`, depth + 1, out)
  })
  out.push("}")
}

/**
 * The canonical JSON text of a value: object keys sorted by UTF-16 code units, no whitespace,
 * strings and numbers written as `JSON.stringify` writes them (this is RFC 8785, JCS). Keys whose
 * value is `undefined` are omitted. Throws `CanonicalJsonError` for what JSON cannot hold
 * faithfully: non-finite numbers, bigint, undefined in arrays, functions, symbols, class instances
 * (`Date`, `Map`, ...) and nesting deeper than 64.
 *
 * @example
 * canonicalJson({ b: [1, "x"], a: null }) // '{"a":null,"b":[1,"x"]}'
 */
export const canonicalJson = (value: unknown): string => canonicalJsonExact(value).json

/**
 * `canonicalJson`, and whether parsing the text gives back a value equal to `value` (false when
 * it had keys whose value is undefined, or -0), so that a caller may keep `value` instead.
 */
export const canonicalJsonExact = (value: unknown): { readonly json: string; readonly exact: boolean } => {
  if (isSortedJson(value, 0)) return { json: JSON.stringify(value), exact: true }
  exact = true
  try {
    const json = writeFast(value, 0)
    return { json, exact }
  } catch (error) {
    if (error !== invalid) throw error
    // Say what is wrong and where (a cycle shows as nesting deeper than the limit).
    writeCanonical(value, "$", 0, [])
    throw new CanonicalJsonError("$: has no canonical JSON form")
  }
}

/** The fields of a recorded event that its hash covers: all but position, hash and previous hash. */
export interface HashedEventFields {
  readonly stream_id: string
  readonly stream_version: number
  readonly event_id: string
  readonly event_type: string
  readonly schema_version: number
  readonly data: Readonly<Record<string, unknown>>
  readonly metadata: Readonly<Record<string, unknown>>
  /** ISO 8601 with milliseconds, UTC, exactly as stored and read back. */
  readonly recorded_at: string
}

/**
 * The UTF-8 bytes of the canonical JSON of an event's hashed fields. Other fields of the argument
 * (a `RecordedEvent`'s `global_position`, `hash`, ...) are ignored.
 *
 * @example
 * canonicalEventBytes(recorded) // Uint8Array of '{"data":{...},"event_id":"0190...",...}'
 */
export const canonicalEventBytes = (event: HashedEventFields): Uint8Array =>
  new TextEncoder().encode(
    canonicalJson({
      stream_id: event.stream_id,
      stream_version: event.stream_version,
      event_id: event.event_id,
      event_type: event.event_type,
      schema_version: event.schema_version,
      data: event.data,
      metadata: event.metadata,
      recorded_at: event.recorded_at,
    }),
  )

const hashPattern = /^[0-9a-f]{64}$/

/** SHA-256 over the previous hash's 32 bytes and the canonical text: one buffer, one-shot hash. */
const chainHash = (prev_hash: string, canonical: string | Uint8Array): string => {
  const length = typeof canonical === "string" ? Buffer.byteLength(canonical, "utf8") : canonical.length
  const bytes = Buffer.allocUnsafe(32 + length)
  bytes.write(prev_hash, 0, "hex")
  if (typeof canonical === "string") bytes.write(canonical, 32, "utf8")
  else bytes.set(canonical, 32)
  return hash("sha256", bytes, "hex")
}

/**
 * The same text as `canonicalJson` of the hashed fields, assembled from data and metadata already in
 * canonical JSON (the writer has them anyway), so the hot append path serialises each event once.
 * Top-level keys appear in sorted order, as canonicalJson would put them.
 */
const canonicalEventText = (
  event: Omit<HashedEventFields, "data" | "metadata">,
  data_json: string,
  metadata_json: string,
): string => {
  if (!Number.isSafeInteger(event.schema_version) || !Number.isSafeInteger(event.stream_version)) {
    throw new CanonicalJsonError("$: versions must be safe integers")
  }
  return (
    `{"data":${data_json},"event_id":${JSON.stringify(event.event_id)},"event_type":${JSON.stringify(event.event_type)},` +
    `"metadata":${metadata_json},"recorded_at":${JSON.stringify(event.recorded_at)},` +
    `"schema_version":${event.schema_version},"stream_id":${JSON.stringify(event.stream_id)},` +
    `"stream_version":${event.stream_version}}`
  )
}

/** One event for `eventHashesCanonical`: its hashed fields and its canonical JSON texts. */
export interface CanonicalEventInput {
  readonly fields: Omit<HashedEventFields, "data" | "metadata">
  readonly data_json: string
  readonly metadata_json: string
}

/**
 * The hashes of a run of events whose data and metadata are given as their canonical JSON text
 * (`canonicalJson(data)`, `canonicalJson(metadata)`), each chained on the one before, the first on
 * `prev_hash`: equal to `eventHash` event by event, one serialisation fewer. `prev_hash` is checked
 * once; the hashes computed here need no check. Returns the hashes in order.
 * @example eventHashesCanonical(GENESIS_HASH, [first, second]) // [hash of first, hash of second]
 */
export const eventHashesCanonical = (
  prev_hash: string,
  events: ReadonlyArray<CanonicalEventInput>,
): Array<string> => {
  if (!hashPattern.test(prev_hash)) throw new TypeError(`prev_hash must be 64 lowercase hex digits`)
  const hashes: Array<string> = []
  let previous = prev_hash
  for (const event of events) {
    previous = chainHash(previous, canonicalEventText(event.fields, event.data_json, event.metadata_json))
    hashes.push(previous)
  }
  return hashes
}

/** `eventHashesCanonical` for one event. */
export const eventHashCanonical = (
  prev_hash: string,
  event: Omit<HashedEventFields, "data" | "metadata">,
  data_json: string,
  metadata_json: string,
): string => eventHashesCanonical(prev_hash, [{ fields: event, data_json, metadata_json }])[0] as string

/**
 * The hash of an event, hex: SHA-256(previous hash bytes || canonical event bytes). Throws a
 * `TypeError` if `prev_hash` is not 64 lowercase hex digits, `CanonicalJsonError` if the event's
 * data or metadata is not plain JSON.
 *
 * @example
 * const first = eventHash(GENESIS_HASH, events[0])
 * const second = eventHash(first, events[1])
 */
export const eventHash = (prev_hash: string, event: HashedEventFields): string => {
  if (!hashPattern.test(prev_hash)) throw new TypeError(`prev_hash must be 64 lowercase hex digits`)
  return chainHash(prev_hash, canonicalEventBytes(event))
}
