/**
 * Every schema migration of the platform, in one ordered list. Ranges: 100-199 event store,
 * 200-299 projections, 300-319 platform tables, 320-339 webhooks, 400-419 custody, 500-509 chain
 * transfers, 510-519 deposits, 520-529 reconciliation.
 */
import { eventStoreMigrations } from "../../adapters/eventstore/postgres/schema.ts"
import { projectionMigrations } from "../../projections/schema.ts"
import { custodyMigrations } from "../custody/vault.ts"
import { depositMigrations } from "../deposits/schema.ts"
import { platformTableMigrations } from "../platform/schema.ts"
import { reconciliationMigrations } from "../reconciliation/schema.ts"
import { transferMigrations } from "../transfers/schema.ts"
import { webhookMigrations } from "../webhooks/schema.ts"
import type { Migration } from "./migrate.ts"

export const platformMigrations: ReadonlyArray<Migration> = [
  ...eventStoreMigrations,
  ...projectionMigrations,
  ...platformTableMigrations,
  ...webhookMigrations,
  ...custodyMigrations,
  ...transferMigrations,
  ...depositMigrations,
  ...reconciliationMigrations,
]
