/**
 * The limits of the API's text fields, in characters (Unicode code points): the handlers enforce
 * them and the OpenAPI document (src/http/openapi.ts) publishes them, from this one table.
 */

/** A field's length bounds, inclusive. */
export interface LengthBounds {
  readonly min: number
  readonly max: number
}

export const textLengths = {
  company_name: { min: 1, max: 200 },
  password: { min: 10, max: 256 },
  legal_name: { min: 2, max: 200 },
  registration_number: { min: 2, max: 64 },
  representative_name: { min: 2, max: 200 },
  verification_document: { min: 1, max: 500 },
  key_name: { min: 1, max: 100 },
  external_id: { min: 1, max: 128 },
  label: { min: 0, max: 128 },
  note: { min: 0, max: 500 },
  metadata_key: { min: 1, max: 40 },
  metadata_value: { min: 0, max: 500 },
  webhook_secret: { min: 16, max: 256 },
  webhook_description: { min: 0, max: 500 },
} as const satisfies Record<string, LengthBounds>

/** A list's page size (`limit`): default and largest. */
export const list_limit_default = 20
export const list_limit_max = 100

/** A payment's `metadata`: at most this many keys. */
export const metadata_keys_max = 50

/** A verification's `documents`: at most this many references. */
export const verification_documents_max = 20

/** The largest amount of one request, in whole token units. */
export const amount_whole_units_max = {
  payment: 1_000_000_000n,
  transfer: 1_000_000_000n,
  faucet: 1_000_000n,
} as const
