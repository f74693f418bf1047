/**
 * Webhook signing secrets at rest. The platform must read a secret back to sign with it, so it is
 * encrypted rather than hashed: AES-256-GCM under a key derived from the platform's KEK (HKDF-SHA256,
 * info "webhook-secrets v1"), bound to its endpoint's id, so `platform.webhooks` alone (a backup, a
 * read-only leak) neither shows a secret nor lets anyone forge a signature. A keyed fingerprint
 * (HMAC-SHA256 under another derived key) tells whether a new secret equals the current one without
 * opening it; the API shows only the last four characters, kept beside it.
 *
 * Sealed text: `sealed:v1:<key id>:<iv, base64>:<ciphertext and tag, base64>`. Rows written before
 * sealing existed hold the secret itself until the platform's next start seals them
 * (`sealStoredSecrets`); `open` still reads them.
 */
import { createHmac, hash } from "node:crypto"
import type pg from "pg"
import { aead_iv_bytes, aeadOpen, aeadSeal, derivedKey, splitCiphertextAndTag } from "../custody/aead.ts"

const sealed_prefix = "sealed:v1:"
const sealing_key_info = "webhook-secrets v1"
const fingerprint_key_info = "webhook-secret-fingerprints v1"

/** A sealed secret that the configured key does not open; the message names key ids, never a key. */
export class WebhookSecretUnreadable extends Error {
  override readonly name = "WebhookSecretUnreadable"
}

export interface WebhookSecretBox {
  /** The text stored for `secret` of endpoint `webhook_id`. */
  readonly seal: (webhook_id: string, secret: string) => string
  /** The secret `seal` was given; throws `WebhookSecretUnreadable` for another key, endpoint or a change. */
  readonly open: (webhook_id: string, stored: string) => string
  /** HMAC-SHA256 of a secret, hex: equal secrets have equal fingerprints. */
  readonly fingerprint: (secret: string) => string
}

/** Whether a stored secret is sealed (rows from before sealing hold the secret itself). */
export const isSealedSecret = (stored: string): boolean => stored.startsWith(sealed_prefix)

/** The last four characters the API shows of a secret. */
export const secretLast4 = (secret: string): string => [...secret].slice(-4).join("")

/** Binds a ciphertext to its table, format and endpoint: a sealed secret moved to another row fails. */
const associatedData = (webhook_id: string): Buffer =>
  Buffer.from(`platform.webhooks/v1\n${webhook_id}`, "utf8")

/**
 * Seals, opens and fingerprints webhook secrets with keys derived from `kek`: never the KEK itself,
 * so a webhook secret, a stored response and a custody seed are encrypted under different keys.
 * @example const box = makeWebhookSecretBox(kek); box.open(id, box.seal(id, "whsec_...")) // "whsec_..."
 */
export const makeWebhookSecretBox = (kek: Uint8Array): WebhookSecretBox => {
  const key = derivedKey(kek, sealing_key_info)
  const fingerprint_key = derivedKey(kek, fingerprint_key_info)
  const key_id = hash("sha256", Buffer.concat([Buffer.from("webhook secret key id/v1\n"), key]), "hex").slice(
    0,
    16,
  )
  return {
    seal: (webhook_id, secret) => {
      const { iv, ciphertext, tag } = aeadSeal(key, associatedData(webhook_id), secret)
      return `${sealed_prefix}${key_id}:${iv.toString("base64")}:${Buffer.concat([ciphertext, tag]).toString("base64")}`
    },
    open: (webhook_id, stored) => {
      if (!isSealedSecret(stored)) return stored
      const [sealed_key_id = "", iv_text = "", data_text = ""] = stored.slice(sealed_prefix.length).split(":")
      const sealed = splitCiphertextAndTag(Buffer.from(iv_text, "base64"), Buffer.from(data_text, "base64"))
      if (sealed === undefined || sealed.iv.length !== aead_iv_bytes) {
        throw new WebhookSecretUnreadable(`the sealed secret of ${webhook_id} is truncated`)
      }
      const secret = aeadOpen(key, associatedData(webhook_id), sealed)
      if (secret === undefined) {
        throw new WebhookSecretUnreadable(
          sealed_key_id === key_id
            ? `the sealed secret of ${webhook_id} was altered or moved from another endpoint`
            : `the secret of ${webhook_id} was sealed under key ${sealed_key_id}, the configured key is ${key_id} (was CUSTODY_KEK changed?)`,
        )
      }
      return secret.toString("utf8")
    },
    fingerprint: (secret) => createHmac("sha256", fingerprint_key).update(secret, "utf8").digest("hex"),
  }
}

/**
 * Seals every secret still stored as itself (rows written before sealing existed), with its
 * fingerprint and last four characters; returns how many endpoints it sealed. Run at startup,
 * before deliveries: idempotent, and each row is sealed in its own statement, guarded by its old
 * value, so concurrent starts cannot seal a row twice or lose a rotation made meanwhile.
 * @example await sealStoredSecrets(pool, box) // 0 once every secret is sealed
 */
export async function sealStoredSecrets(pool: pg.Pool, box: WebhookSecretBox): Promise<number> {
  const found = await pool.query<{ webhook_id: string; secret: string; previous_secret: string | null }>(
    `select webhook_id, secret, previous_secret from platform.webhooks
     where secret not like 'sealed:%' or previous_secret not like 'sealed:%'`,
  )
  let sealed = 0
  for (const row of found.rows) {
    const secret = box.open(row.webhook_id, row.secret)
    const updated = await pool.query(
      `update platform.webhooks
       set secret = $2, previous_secret = $3, secret_fingerprint = $4, secret_last4 = $5
       where webhook_id = $1 and secret = $6 and previous_secret is not distinct from $7`,
      [
        row.webhook_id,
        isSealedSecret(row.secret) ? row.secret : box.seal(row.webhook_id, secret),
        row.previous_secret === null || isSealedSecret(row.previous_secret)
          ? row.previous_secret
          : box.seal(row.webhook_id, row.previous_secret),
        box.fingerprint(secret),
        secretLast4(secret),
        row.secret,
        row.previous_secret,
      ],
    )
    sealed += updated.rowCount ?? 0
  }
  return sealed
}
