// Proves the list filters' time parser: RFC 3339 with an offset or a plain date, exact to the
// microsecond, and nothing that names no real instant (no rollover, no local time).
import { describe, expect, it } from "vitest"
import { parseTimestamp } from "../../domain/platform/timestamp.ts"

describe("parseTimestamp", () => {
  it.each([
    ["2026-11-24T06:07:03Z", "2026-11-24T06:07:03Z"],
    ["2026-11-24T06:07:03.9999Z", "2026-11-24T06:07:03.9999Z"],
    ["2026-11-24T06:07:03.123456Z", "2026-11-24T06:07:03.123456Z"],
    ["2026-11-24t06:07:03z", "2026-11-24T06:07:03Z"],
    ["2026-11-24T07:07:03+01:00", "2026-11-24T06:07:03Z"],
    ["2026-11-24T01:07:03-05:00", "2026-11-24T06:07:03Z"],
    // An unencoded + in a query string arrives as a space.
    ["2026-11-24T07:07:03 01:00", "2026-11-24T06:07:03Z"],
    // Offsets past PostgreSQL's ±15:59, which RFC 3339 allows, across a day, a month and a year.
    ["2026-11-24T13:35:00+23:59", "2026-11-23T13:36:00Z"],
    ["2026-11-24T13:35:00.000001-16:00", "2026-11-25T05:35:00.000001Z"],
    ["2026-12-31T20:00:00-23:59", "2027-01-01T19:59:00Z"],
    ["2024-03-01T05:00:00+06:00", "2024-02-29T23:00:00Z"],
    ["0099-06-01T00:00:00Z", "0099-06-01T00:00:00Z"],
    ["0001-01-01T12:00:00+11:00", "0001-01-01T01:00:00Z"],
    ["9999-12-31T23:59:59.999999+23:59", "9999-12-31T00:00:59.999999Z"],
    ["2026-11-24", "2026-11-24T00:00:00Z"],
    ["2024-02-29T00:00:00Z", "2024-02-29T00:00:00Z"],
    ["2000-02-29", "2000-02-29T00:00:00Z"],
    ["0001-01-01T00:00:00Z", "0001-01-01T00:00:00Z"],
    ["9999-12-31T23:59:59.999999Z", "9999-12-31T23:59:59.999999Z"],
  ])("reads %s as %s", (text, expected) => {
    expect(parseTimestamp(text)).toBe(expected)
  })

  it.each([
    ["a day that does not exist", "2026-11-31T00:00:00Z"],
    ["30 February", "2026-02-30"],
    ["29 February of a common year", "2026-02-29"],
    ["29 February of 1900", "1900-02-29"],
    ["month 13", "2026-13-01"],
    ["day 0", "2026-01-00"],
    ["hour 24", "2026-11-24T24:00:00Z"],
    ["minute 60", "2026-11-24T06:60:00Z"],
    ["a leap second", "2026-12-31T23:59:60Z"],
    ["no offset (local time)", "2026-11-24T06:07:03.999"],
    ["seven decimals", "2026-11-24T06:07:03.1234567Z"],
    ["year 0", "0000-01-01"],
    ["a bad offset", "2026-11-24T06:07:03+24:00"],
    ["a compact offset", "2026-11-24T06:07:03+0100"],
    ["a space for T", "2026-11-24 06:07:03Z"],
    ["two spaces before the offset", "2026-11-24T07:07:03  01:00"],
    ["a space after the offset's sign", "2026-11-24T07:07:03+ 01:00"],
    ["minutes only", "2026-11-24T06:07Z"],
    ["unix seconds", "1764000000"],
    ["a month name", "Nov 24 2026"],
    ["empty", ""],
    ["before year 1 in UTC", "0001-01-01T00:00:00+00:01"],
    ["after year 9999 in UTC", "9999-12-31T23:59:59.999999-23:59"],
  ])("refuses %s (%s)", (_, text) => {
    expect(parseTimestamp(text)).toBeUndefined()
  })
})
