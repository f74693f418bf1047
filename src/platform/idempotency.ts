/**
 * Stored responses of idempotent POSTs. A response is stored in the same transaction as the effect
 * of the request, so "a stored response exists" means "the request took effect"; a request refused
 * before it changed anything (bad input, not found) stores nothing and may be retried with the
 * same key once corrected.
 *
 * A response that carries a secret (a new API key) is stored sealed: AES-256-GCM under a key derived
 * from the platform's KEK, bound to its record's identity, so the table never holds the secret and a
 * retry still gets it back. The request of such a response is fingerprinted with a keyed hash (its
 * body may hold a password, which a plain SHA-256 would expose to guessing at hash speed).
 */
import { createHmac, hash } from "node:crypto"
import type pg from "pg"
import { aead_iv_bytes, aeadOpen, aeadSeal, derivedKey, splitCiphertextAndTag } from "../custody/aead.ts"

export interface StoredResponse {
  readonly tenant_id: string
  readonly environment: string
  readonly idempotency_key: string
  readonly fingerprint: string
  readonly response_status: number
  readonly response_body: unknown
  /** How long ago it was stored, by the database's clock (set when read back). */
  readonly age_ms?: number
}

/**
 * Stores the responses of a ledger batch in its transaction. A key stored already, by a request
 * outside the ledger (the ledger's own commands dedupe in the ledger first), fails the insert:
 * PostgreSQL aborts the transaction, so even a batch whose COMMIT was sent behind its statements
 * writes nothing, and the rejection is an `IdempotencyKeyTaken` (the writer then tries the batch's
 * commands one by one, and only the one whose key was taken fails). One request's response outside
 * the ledger goes through `storeResponse`.
 * `json` throughout, not `jsonb`: the stored text is the response as sent, its keys in their order.
 */
export const storeResponses = async (client: pg.PoolClient, rows: ReadonlyArray<StoredResponse>) => {
  if (rows.length === 0) return
  await client
    .query(
      `insert into platform.idempotency_keys
         (tenant_id, environment, idempotency_key, fingerprint, response_status, response_body)
       select tenant_id, environment, idempotency_key, fingerprint, response_status, response_body
         from json_to_recordset($1::json) as r(tenant_id text, environment text, idempotency_key text,
              fingerprint text, response_status integer, response_body json)`,
      [JSON.stringify(rows)],
    )
    .catch((error: unknown) => {
      throw isKeyConflict(error) ? new IdempotencyKeyTaken() : error
    })
}

/** The unique violation of a stored response's key. */
const isKeyConflict = (error: unknown): boolean =>
  typeof error === "object" &&
  error !== null &&
  "code" in error &&
  error.code === "23505" &&
  "constraint" in error &&
  error.constraint === "idempotency_keys_pkey"

/**
 * Thrown by `storeResponse` when another transaction holds the key already: the caller's
 * transaction rolls back with it, so its effect never lands beside another request's under one key.
 */
export class IdempotencyKeyTaken extends Error {
  constructor() {
    super("the Idempotency-Key was taken by another request meanwhile")
  }
}

/**
 * Stores one request's response in the caller's transaction, or throws `IdempotencyKeyTaken` when the
 * key is stored already. The insert waits for a transaction that holds the key uncommitted, so of
 * two requests with one key in two processes, the second to commit rolls back instead of taking
 * effect a second time (the ledger's commands dedupe in the ledger; this is for everything else).
 */
export const storeResponse = async (client: pg.PoolClient, row: StoredResponse): Promise<void> => {
  const inserted = await client.query(
    `insert into platform.idempotency_keys
       (tenant_id, environment, idempotency_key, fingerprint, response_status, response_body)
     values ($1, $2, $3, $4, $5, $6::json)
     on conflict do nothing`,
    [
      row.tenant_id,
      row.environment,
      row.idempotency_key,
      row.fingerprint,
      row.response_status,
      JSON.stringify(row.response_body),
    ],
  )
  if (inserted.rowCount === 0) throw new IdempotencyKeyTaken()
}

export const findStoredResponse = async (
  pool: pg.Pool,
  tenant_id: string,
  environment: string,
  idempotency_key: string,
): Promise<StoredResponse | undefined> =>
  (
    await pool.query<StoredResponse>(
      `select tenant_id, environment, idempotency_key, fingerprint, response_status, response_body,
              (extract(epoch from now() - created_at) * 1000)::float8 as age_ms
         from platform.idempotency_keys where tenant_id = $1 and environment = $2 and idempotency_key = $3`,
      [tenant_id, environment, idempotency_key],
    )
  ).rows[0]

/**
 * The status of a record that takes its key without a response to replay: the request's effect is
 * idempotent by itself (the faucet's credit replays in the ledger, and its answer is the balance as
 * it is now), so a retry with the key runs it again, while any other request with the key is a 409.
 */
export const rerun_status = 0

/**
 * The fingerprint of a record whose request's own fingerprint was never kept (a key copied by a
 * migration): it matches any request of `operation`, and no request of another.
 * @example anyRequestOf("transfers.create") // "any:transfers.create"
 */
export const anyRequestOf = (operation: string): string => `any:${operation}`

/** Where a stored response belongs: what a sealed body is bound to. */
export interface ResponseIdentity {
  readonly tenant_id: string
  readonly environment: string
  readonly idempotency_key: string
}

const sealed_format = "aes-256-gcm/v1"
const sealing_key_info = "idempotency-responses v1"
const fingerprint_key_info = "idempotency-fingerprints v1"

/**
 * A sealed response body as `response_body` holds it. `data` is the ciphertext followed by its
 * authentication tag; binary fields are standard base64, whose alphabet has no `_`, so no key
 * prefix (`sk_`) can appear in a sealed record by chance.
 */
export interface SealedBody {
  readonly sealed: typeof sealed_format
  /** Names the sealing key (a digest, not the key) so that a mismatch can be reported. */
  readonly key_id: string
  readonly iv: string
  readonly data: string
}

export const isSealedBody = (body: unknown): body is SealedBody =>
  typeof body === "object" &&
  body !== null &&
  "sealed" in body &&
  body.sealed === sealed_format &&
  "key_id" in body &&
  typeof body.key_id === "string" &&
  "iv" in body &&
  typeof body.iv === "string" &&
  "data" in body &&
  typeof body.data === "string"

/** A sealed body that the configured key does not open; its message names key ids, never a key. */
export class SealedBodyUnreadable extends Error {}

export interface ResponseSealer {
  readonly seal: (identity: ResponseIdentity, body: unknown) => SealedBody
  /** The body `seal` was given; throws `SealedBodyUnreadable` for another key, record or a change. */
  readonly open: (identity: ResponseIdentity, sealed: SealedBody) => unknown
  /** HMAC-SHA256 of a request's canonical text, in hex: its stored fingerprint. */
  readonly fingerprint: (request: string) => string
}

/** Binds a ciphertext to its table, format version and record. */
const associatedData = (identity: ResponseIdentity): Buffer =>
  Buffer.from(
    `platform.idempotency_keys/${sealed_format}\n${JSON.stringify([identity.tenant_id, identity.environment, identity.idempotency_key])}`,
    "utf8",
  )

/**
 * Seals and opens stored responses with a key derived from the platform's KEK (HKDF-SHA256, info
 * "idempotency-responses v1"), and fingerprints their requests with another ("idempotency-
 * fingerprints v1"): never the KEK itself, so a stored response and a custody seed are encrypted
 * under different keys.
 * @example const sealer = makeResponseSealer(kek); sealer.open(identity, sealer.seal(identity, body))
 */
export const makeResponseSealer = (kek: Uint8Array): ResponseSealer => {
  const key = derivedKey(kek, sealing_key_info)
  const fingerprint_key = derivedKey(kek, fingerprint_key_info)
  const key_id = `sha256:${hash("sha256", Buffer.concat([Buffer.from("idempotency sealing key id/v1\n"), key]), "hex").slice(0, 16)}`
  return {
    seal: (identity, body) => {
      const { iv, ciphertext, tag } = aeadSeal(key, associatedData(identity), JSON.stringify(body))
      return {
        sealed: sealed_format,
        key_id,
        iv: iv.toString("base64"),
        data: Buffer.concat([ciphertext, tag]).toString("base64"),
      }
    },
    open: (identity, sealed) => {
      const parts = splitCiphertextAndTag(
        Buffer.from(sealed.iv, "base64"),
        Buffer.from(sealed.data, "base64"),
      )
      if (parts === undefined || parts.iv.length !== aead_iv_bytes) {
        throw new SealedBodyUnreadable("the sealed response is truncated")
      }
      const text = aeadOpen(key, associatedData(identity), parts)
      if (text === undefined) {
        throw new SealedBodyUnreadable(
          sealed.key_id === key_id
            ? "the key matches the record's key_id, so the record was altered or moved to another Idempotency-Key"
            : `the record was sealed under ${sealed.key_id}, the configured key is ${key_id} (was CUSTODY_KEK changed?)`,
        )
      }
      return JSON.parse(text.toString("utf8"))
    },
    fingerprint: (request) => createHmac("sha256", fingerprint_key).update(request, "utf8").digest("hex"),
  }
}

export { inTransaction } from "../db/transaction.ts"
