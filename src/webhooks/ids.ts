/**
 * The engine's identifiers and secrets. Ids are a prefix and a UUID v7 without its dashes
 * (`whk_0193...`, 32 hex digits): opaque, and time-ordered to the millisecond (ids made in the same
 * millisecond sort in random order), so listing by id lists by creation.
 */
import { randomBytes } from "node:crypto"
import { uuidv7 } from "../ids.ts"

const prefixedId = (prefix: string): string => `${prefix}_${uuidv7().replaceAll("-", "")}`

/** @example webhookId() // "whk_0193a4c2e1f87b3c9d2e4f6a8b0c1d2e" */
export const webhookId = (): string => prefixedId("whk")
/** @example eventId() // "evt_0193a4c2e1f87b3c9d2e4f6a8b0c1d2e" */
export const eventId = (): string => prefixedId("evt")
/** @example deliveryId() // "dlv_0193a4c2e1f87b3c9d2e4f6a8b0c1d2e" */
export const deliveryId = (): string => prefixedId("dlv")

/**
 * A new signing secret: 32 random bytes, hex, behind `whsec_`.
 * @example generateWebhookSecret() // "whsec_3f9c...(64 hex digits)"
 */
export const generateWebhookSecret = (): string => `whsec_${randomBytes(32).toString("hex")}`
