/**
 * The one authenticated cipher of the platform's secrets at rest: AES-256-GCM with a random 12-byte
 * IV and a 16-byte tag, the associated data binding each ciphertext to its place (table, format,
 * record), and HKDF-SHA256 for the keys derived from the KEK. Used by the custody vault (master
 * seeds), the stored responses that carry an API key, and the webhook signing secrets; each keeps
 * its own stored format around these bytes.
 */
import { createCipheriv, createDecipheriv, hkdfSync, randomBytes } from "node:crypto"

export const aead_iv_bytes = 12
export const aead_tag_bytes = 16

export interface AeadSealed {
  readonly iv: Buffer
  readonly ciphertext: Buffer
  readonly tag: Buffer
}

/**
 * Encrypts `plaintext` (UTF-8 when a string) under `key`, bound to `aad`.
 * @example const sealed = aeadSeal(key, Buffer.from("table/v1/row"), "secret")
 */
export const aeadSeal = (key: Uint8Array, aad: Uint8Array, plaintext: Uint8Array | string): AeadSealed => {
  const iv = randomBytes(aead_iv_bytes)
  const cipher = createCipheriv("aes-256-gcm", key, iv, { authTagLength: aead_tag_bytes })
  cipher.setAAD(aad)
  const ciphertext = Buffer.concat([
    typeof plaintext === "string" ? cipher.update(plaintext, "utf8") : cipher.update(plaintext),
    cipher.final(),
  ])
  return { iv, ciphertext, tag: cipher.getAuthTag() }
}

/**
 * The plaintext of `sealed`, or undefined when `key` and `aad` do not authenticate it (another key,
 * another place, a changed byte). A malformed IV or tag is undefined too.
 * @example aeadOpen(key, aad, aeadSeal(key, aad, "secret"))?.toString("utf8") // "secret"
 */
export const aeadOpen = (key: Uint8Array, aad: Uint8Array, sealed: AeadSealed): Buffer | undefined => {
  if (sealed.iv.length !== aead_iv_bytes || sealed.tag.length !== aead_tag_bytes) return undefined
  const decipher = createDecipheriv("aes-256-gcm", key, sealed.iv, { authTagLength: aead_tag_bytes })
  decipher.setAAD(aad)
  decipher.setAuthTag(sealed.tag)
  try {
    return Buffer.concat([decipher.update(sealed.ciphertext), decipher.final()])
  } catch {
    return undefined
  }
}

/**
 * A 32-byte key derived from `kek` for one purpose (HKDF-SHA256, empty salt, `info` naming it):
 * never the KEK itself.
 * @example derivedKey(kek, "webhook-secrets v1").length // 32
 */
export const derivedKey = (kek: Uint8Array, info: string): Buffer =>
  Buffer.from(hkdfSync("sha256", kek, Buffer.alloc(0), info, 32))

/** `ciphertext || tag` (one stored field) back into its parts; undefined when too short. */
export const splitCiphertextAndTag = (iv: Buffer, data: Buffer): AeadSealed | undefined =>
  data.length < aead_tag_bytes
    ? undefined
    : {
        iv,
        ciphertext: data.subarray(0, data.length - aead_tag_bytes),
        tag: data.subarray(data.length - aead_tag_bytes),
      }
