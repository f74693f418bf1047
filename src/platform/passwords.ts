/**
 * Password hashing with argon2id (RFC 9106) from node:crypto, stored as a PHC string
 * `$argon2id$v=19$m=19456,t=2,p=1$<salt>$<hash>` (OWASP's recommended minimum parameters).
 */
import { argon2, randomBytes, timingSafeEqual } from "node:crypto"

const memory_kib = 19_456
const passes = 2
const parallelism = 1
const tag_bytes = 32
const salt_bytes = 16

const derive = (password: string, salt: Buffer, m: number, t: number, p: number, length: number) =>
  new Promise<Buffer>((resolve, reject) =>
    argon2(
      "argon2id",
      { message: password, nonce: salt, memory: m, passes: t, parallelism: p, tagLength: length },
      (error, key) => (error ? reject(error) : resolve(key)),
    ),
  )

const b64 = (bytes: Buffer) => bytes.toString("base64").replace(/=+$/, "")

/** @example await hashPassword("correct horse battery staple") // "$argon2id$v=19$m=19456,t=2,p=1$..." */
export const hashPassword = async (password: string): Promise<string> => {
  const salt = randomBytes(salt_bytes)
  const hash = await derive(password, salt, memory_kib, passes, parallelism, tag_bytes)
  return `$argon2id$v=19$m=${memory_kib},t=${passes},p=${parallelism}$${b64(salt)}$${b64(hash)}`
}

/** Checks `password` against a PHC string from `hashPassword`, in constant time. */
export const verifyPassword = async (password: string, phc: string): Promise<boolean> => {
  const match = /^\$argon2id\$v=19\$m=(\d+),t=(\d+),p=(\d+)\$([A-Za-z0-9+/]+)\$([A-Za-z0-9+/]+)$/.exec(phc)
  if (match === null) return false
  const [, m, t, p, salt = "", hash = ""] = match
  const expected = Buffer.from(hash, "base64")
  const actual = await derive(
    password,
    Buffer.from(salt, "base64"),
    Number(m),
    Number(t),
    Number(p),
    expected.length,
  )
  return timingSafeEqual(expected, actual)
}
