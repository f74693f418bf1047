/**
 * The ledger's bounds, in one place. Everything a command can make the ledger hold or do has a
 * limit, so that memory, event size and work per command stay predictable.
 */

/** Transfers in one CreateTransfers command (TigerBeetle's batch size: a group fits one append). */
export const transferBatchCountMax = 8190

/**
 * Reservations one command lapses at most. Many reservations can fall due together (a burst of
 * payments with the same expiry); the writer then first records them in commands of this many each
 * (`ExpirePendingTransfers` with `max_count`), so no command's events outgrow one append.
 */
export const expiriesPerCommandMax = 1_000

/** Longest account, transfer, pending or group id: room for a UUID with a readable prefix. */
export const idLengthMax = 256

/** Longest `user_data`: a reference or a short memo; bulk metadata belongs in a read model. */
export const userDataLengthMax = 1024

/** Largest account or transfer `code` (TigerBeetle's u16). */
export const codeMax = 65_535

/** Longest pending timeout: TigerBeetle's u32 seconds, about 136 years. */
export const pendingTimeoutMsMax = 4_294_967_295_000

/**
 * Latest ledger time, 9999-12-31T23:59:59.999Z: later times have no four-digit-year ISO form, and the
 * events promise ISO 8601 strings. Keeps `now_ms + timeout_ms` a safe integer too.
 */
export const ledgerTimeMsMax = 253_402_300_799_999

/**
 * Final transfer records (nothing can change them any more) a ledger's state holds in full before
 * `compactTransfersWhenDue` compacts them: enough to spread a compaction's fixed cost, few enough
 * that the state's persistent map stays small and one compaction (two digests per record) takes
 * about a millisecond, not a pause a request would notice.
 */
export const finalRecordCountMax = 256
