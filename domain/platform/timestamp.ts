/**
 * Times a client sends as list filters: RFC 3339 (the ISO 8601 profile the API answers in), read
 * exactly. `new Date(text)` is not: it rolls 2026-02-30 over to 2 March, reads a time without an
 * offset in the server's own time zone, and keeps milliseconds only, so a bound of
 * 06:07:03.9999Z compared as 06:07:03.999Z.
 */

/** Years PostgreSQL's timestamptz can compare with (it has no year 0). */
const year_min = 1
const year_max = 9999

const rfc3339 =
  /^(\d{4})-(\d{2})-(\d{2})(?:[Tt](\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,6}))?([Zz]|([+-])(\d{2}):(\d{2})))?$/

/**
 * The time `text` names, as text PostgreSQL reads as exactly that instant (microseconds kept), or
 * undefined when `text` is not an RFC 3339 date-time with an offset (`Z` or `±hh:mm`, at most six
 * decimals of a second) or a date (`YYYY-MM-DD`, midnight UTC), or names no real day or time.
 * @example parseTimestamp("2026-11-24T06:07:03.9999Z") // "2026-11-24T06:07:03.9999Z"
 * @example parseTimestamp("2026-11-24") // "2026-11-24T00:00:00Z"
 * @example parseTimestamp("2026-02-30T00:00:00Z") // undefined
 */
export function parseTimestamp(text: string): string | undefined {
  const match = rfc3339.exec(text)
  if (match === null) return undefined
  const [, year, month, day, hour = "00", minute = "00", second = "00", , , , zone_h = "00", zone_m = "00"] =
    match
  const y = Number(year)
  const mo = Number(month)
  const d = Number(day)
  if (y < year_min || y > year_max || mo < 1 || mo > 12 || d < 1) return undefined
  // The month's last day, from the first of the next month (UTC: no daylight saving gaps).
  const days_in_month = new Date(Date.UTC(2000, mo, 0)).getUTCDate()
  const leap = y % 4 === 0 && (y % 100 !== 0 || y % 400 === 0)
  if (d > (mo === 2 ? (leap ? 29 : 28) : days_in_month)) return undefined
  if (Number(hour) > 23 || Number(minute) > 59 || Number(second) > 59) return undefined
  if (Number(zone_h) > 23 || Number(zone_m) > 59) return undefined
  return match[4] === undefined ? `${year}-${month}-${day}T00:00:00Z` : text.toUpperCase()
}
