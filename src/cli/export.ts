/**
 * `ledger export`: writes recorded events as NDJSON or CSV, a page at a time, waiting for the output
 * to drain before reading the next page, so memory stays constant however large the store is.
 * Every field the hash covers is written as stored, so an export can be verified on its own.
 */
import { once } from "node:events"
import type { Writable } from "node:stream"
import { Effect } from "effect"
import type { EventStore, RecordedEvent } from "../ports/event-store.ts"

export type ExportFormat = "ndjson" | "csv"

export interface ExportSelection {
  /** One stream; otherwise every stream in global position order. */
  readonly stream_id?: string
  /** Every stream: up to this position only (the log's settled end: see settled.ts). */
  readonly up_to_position?: bigint
  /** Inclusive lower bound on `recorded_at`, epoch ms. */
  readonly from_ms?: number
  /** Exclusive upper bound on `recorded_at`, epoch ms. */
  readonly to_ms?: number
}

const export_page_size = 1_000

/** The CSV columns, also the NDJSON keys, in this order. */
export const export_columns = [
  "global_position",
  "stream_id",
  "stream_version",
  "event_id",
  "event_type",
  "schema_version",
  "recorded_at",
  "hash",
  "prev_hash",
  "data",
  "metadata",
] as const

/** One event as a JSON-ready object: the position as a decimal string (JSON has no bigint). */
const exportRecord = (e: RecordedEvent) => ({
  global_position: e.global_position.toString(),
  stream_id: e.stream_id,
  stream_version: e.stream_version,
  event_id: e.event_id,
  event_type: e.event_type,
  schema_version: e.schema_version,
  recorded_at: e.recorded_at,
  hash: e.hash,
  prev_hash: e.prev_hash,
  data: e.data,
  metadata: e.metadata,
})

/**
 * RFC 4180: a field with a comma, quote, CR or LF is quoted, and quotes inside are doubled.
 * @example csvField('{"a":"b,c"}') // '"{""a"":""b,c""}"'
 */
const csvField = (value: string): string =>
  /[",\r\n]/.test(value) ? `"${value.replaceAll('"', '""')}"` : value

const csvLine = (e: RecordedEvent): string => {
  const record = exportRecord(e)
  return `${export_columns
    .map((column) => {
      const value = record[column]
      return csvField(typeof value === "object" ? JSON.stringify(value) : String(value))
    })
    .join(",")}\r\n`
}

const ndjsonLine = (e: RecordedEvent): string => `${JSON.stringify(exportRecord(e))}\n`

/** Writes `chunk`, then waits for the stream to drain if its buffer is full: backpressure. */
const write = async (out: Writable, chunk: string): Promise<void> => {
  if (!out.write(chunk)) await once(out, "drain")
}

/** Pages of the selected events (before the time filter), each at most `export_page_size`. */
async function* pages(store: EventStore["Service"], selection: ExportSelection) {
  const { stream_id, up_to_position } = selection
  let after_position = 0n
  let from_version = 1
  for (;;) {
    const page = await Effect.runPromise(
      stream_id === undefined
        ? store.readAll({
            after_position,
            max_count: export_page_size,
            ...(up_to_position === undefined ? {} : { up_to_position }),
          })
        : store.readStream(stream_id, { from_version, max_count: export_page_size }),
    )
    if (page.length === 0) return
    yield page
    const last = page[page.length - 1] as RecordedEvent
    after_position = last.global_position
    from_version = last.stream_version + 1
    if (page.length < export_page_size) return
  }
}

/**
 * Writes the selected events to `out` (not ended here) and returns how many it wrote.
 * @example await exportEvents(store, { stream_id: "ledger-acme-sandbox" }, "csv", process.stdout)
 */
export const exportEvents = async (
  store: EventStore["Service"],
  selection: ExportSelection,
  format: ExportFormat,
  out: Writable,
): Promise<number> => {
  const line = format === "csv" ? csvLine : ndjsonLine
  if (format === "csv") await write(out, `${export_columns.join(",")}\r\n`)
  const from_ms = selection.from_ms ?? Number.NEGATIVE_INFINITY
  const to_ms = selection.to_ms ?? Number.POSITIVE_INFINITY
  let written = 0
  for await (const page of pages(store, selection)) {
    let chunk = ""
    for (const event of page) {
      const at = Date.parse(event.recorded_at)
      if (at < from_ms || at >= to_ms) continue
      chunk += line(event)
      written += 1
    }
    if (chunk !== "") await write(out, chunk)
  }
  return written
}
