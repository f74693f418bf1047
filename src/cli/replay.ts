/**
 * `ledger replay`: rebuilds the read model from the first event (src/projections/rebuild.ts) and
 * swaps it in, drawing a progress bar on stderr: redrawn in place on a terminal, a line at most
 * every second otherwise (logs, pipes).
 */
import type pg from "pg"
import type { EventStore } from "../ports/event-store.ts"
import { type RebuildProgress, type RebuildResult, rebuildProjection } from "../projections/rebuild.ts"

const bar_width = 30
const redraw_interval_ms_tty = 100
const redraw_interval_ms_log = 1_000

const rate = (events: number, elapsed_ms: number): number =>
  Math.round((events * 1000) / Math.max(elapsed_ms, 1))

/**
 * One progress line.
 * @example progressLine({ phase: "build", event_count: 500, event_count_total: 1000, elapsed_ms: 100 })
 * // "[###############               ]  50.0%  500/1,000 events  5,000 events/s"
 */
export const progressLine = (p: RebuildProgress): string => {
  const fraction = p.event_count_total === 0 ? 1 : Math.min(1, p.event_count / p.event_count_total)
  const filled = Math.round(fraction * bar_width)
  const percent = (fraction * 100).toFixed(1).padStart(5)
  // Events appended during the replay are replayed too: the total grows with them.
  const total = Math.max(p.event_count_total, p.event_count)
  const count = `${p.event_count.toLocaleString("en-US")}/${total.toLocaleString("en-US")}`
  const phase = p.phase === "index" ? "  (building indexes)" : p.phase === "swap" ? "  (swapping in)" : ""
  const speed = rate(p.event_count, p.elapsed_ms).toLocaleString("en-US")
  return `[${"#".repeat(filled)}${" ".repeat(bar_width - filled)}] ${percent}%  ${count} events  ${speed} events/s${phase}`
}

/** Runs the rebuild, reporting on `err`; returns the final summary line. */
export const replay = async (
  pool: pg.Pool,
  store: EventStore["Service"],
  err: NodeJS.WriteStream,
  batch_size?: number,
): Promise<{ result: RebuildResult; summary: string }> => {
  const interval_ms = err.isTTY ? redraw_interval_ms_tty : redraw_interval_ms_log
  let drawn_ms = Number.NEGATIVE_INFINITY
  let last: RebuildProgress | undefined
  const draw = (p: RebuildProgress) =>
    err.write(err.isTTY ? `\r${progressLine(p)}\x1b[K` : `${progressLine(p)}\n`)
  const result = await rebuildProjection(pool, store, {
    ...(batch_size === undefined ? {} : { batch_size }),
    onProgress: (p) => {
      // A new phase is always shown: the index build takes seconds without progress of its own.
      const phase_changed = p.phase !== last?.phase
      last = p
      if (!phase_changed && p.elapsed_ms - drawn_ms < interval_ms) return
      drawn_ms = p.elapsed_ms
      draw(p)
    },
  })
  const final: RebuildProgress = {
    phase: "build",
    event_count: result.event_count,
    event_count_total: Math.max(last?.event_count_total ?? 0, result.event_count),
    elapsed_ms: result.elapsed_ms,
  }
  draw(final)
  if (err.isTTY) err.write("\n")
  const seconds = (result.elapsed_ms / 1000).toFixed(2)
  const summary = `replayed ${result.event_count} events in ${seconds} s (${rate(result.event_count, result.elapsed_ms)} events/s)`
  return { result, summary }
}
