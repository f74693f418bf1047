/**
 * Times a client sends as list filters: RFC 3339 (the ISO 8601 profile the API answers in), read
 * exactly. `new Date(text)` is not: it rolls 2026-02-30 over to 2 March, reads a time without an
 * offset in the server's own time zone, and keeps milliseconds only, so a bound of
 * 06:07:03.9999Z compared as 06:07:03.999Z.
 */

/** Years PostgreSQL's timestamptz can compare with (it has no year 0). */
const year_min = 1
const year_max = 9999

/**
 * A space stands for `+` before the offset: in a query string an unencoded `+` arrives as a space
 * (`?created_gte=2026-11-24T07:07:03+01:00` as typed), and no other reading of it is possible.
 */
const rfc3339 =
  /^(\d{4})-(\d{2})-(\d{2})(?:[Tt](\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,6}))?([Zz]|([+ -])(\d{2}):(\d{2})))?$/

/**
 * The time `text` names, in UTC (`...Z`, its decimals of a second kept: microseconds exact), or
 * undefined when `text` is not an RFC 3339 date-time with an offset (`Z` or `±hh:mm`, at most six
 * decimals of a second) or a date (`YYYY-MM-DD`, midnight UTC), names no real day or time, or falls
 * outside years 0001-9999 in UTC. The offset is applied here: PostgreSQL reads offsets only up to
 * ±15:59, RFC 3339 allows up to ±23:59.
 * @example parseTimestamp("2026-11-24T06:07:03.9999Z") // "2026-11-24T06:07:03.9999Z"
 * @example parseTimestamp("2026-11-24T07:07:03+01:00") // "2026-11-24T06:07:03Z"
 * @example parseTimestamp("2026-11-24T07:07:03 01:00") // "2026-11-24T06:07:03Z" (a `+` decoded as a space)
 * @example parseTimestamp("2026-11-24") // "2026-11-24T00:00:00Z"
 * @example parseTimestamp("2026-02-30T00:00:00Z") // undefined
 */
export function parseTimestamp(text: string): string | undefined {
  const match = rfc3339.exec(text)
  if (match === null) return undefined
  const [
    ,
    year,
    month,
    day,
    hour = "00",
    minute = "00",
    second = "00",
    fraction,
    ,
    sign,
    zone_h = "00",
    zone_m = "00",
  ] = match
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
  // Whole minutes of offset move the instant, never its fraction of a second.
  const local = new Date(0)
  local.setUTCFullYear(y, mo - 1, d) // not Date.UTC, which reads years 0-99 as 1900-1999
  local.setUTCHours(Number(hour), Number(minute), Number(second), 0)
  const offset_minutes = (sign === "-" ? -1 : 1) * (Number(zone_h) * 60 + Number(zone_m))
  const utc = new Date(local.getTime() - offset_minutes * 60_000)
  const utc_year = utc.getUTCFullYear()
  if (utc_year < year_min || utc_year > year_max) return undefined
  const two = (n: number) => String(n).padStart(2, "0")
  return (
    `${String(utc_year).padStart(4, "0")}-${two(utc.getUTCMonth() + 1)}-${two(utc.getUTCDate())}` +
    `T${two(utc.getUTCHours())}:${two(utc.getUTCMinutes())}:${two(utc.getUTCSeconds())}` +
    `${fraction === undefined ? "" : `.${fraction}`}Z`
  )
}
