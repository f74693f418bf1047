/**
 * Identifiers. UUID v7 (RFC 9562): 48 bits of Unix milliseconds then random bits, so ids sort by
 * creation time and index well.
 */
import { randomFillSync } from "node:crypto"

const pool_bytes = 4096
const pool = Buffer.alloc(pool_bytes)
let poolOffset = pool_bytes
const hex: ReadonlyArray<string> = Array.from({ length: 256 }, (_, i) => i.toString(16).padStart(2, "0"))

const randomBytes10 = (): Buffer => {
  if (poolOffset + 10 > pool_bytes) {
    randomFillSync(pool)
    poolOffset = 0
  }
  const slice = pool.subarray(poolOffset, poolOffset + 10)
  poolOffset += 10
  return slice
}

/** A new UUID v7, e.g. `01936f0e-8a3b-7c4d-9e5f-0123456789ab`. */
export const uuidv7 = (now_ms: number = Date.now()): string => {
  const bytes = new Uint8Array(16)
  let ms = now_ms
  for (let i = 5; i >= 0; i--) {
    bytes[i] = ms % 256
    ms = Math.floor(ms / 256)
  }
  bytes.set(randomBytes10(), 6)
  bytes[6] = 0x70 | ((bytes[6] ?? 0) & 0x0f)
  bytes[8] = 0x80 | ((bytes[8] ?? 0) & 0x3f)
  let out = ""
  for (let i = 0; i < 16; i++) {
    if (i === 4 || i === 6 || i === 8 || i === 10) out += "-"
    out += hex[bytes[i] ?? 0]
  }
  return out
}
