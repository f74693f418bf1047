/**
 * Every schema migration of the platform, in one ordered list. Ranges: 100-199 event store,
 * 200-299 projections.
 */
import { eventStoreMigrations } from "../../adapters/eventstore/postgres/schema.ts"
import { projectionMigrations } from "../../projections/schema.ts"
import type { Migration } from "./migrate.ts"

export const platformMigrations: ReadonlyArray<Migration> = [...eventStoreMigrations, ...projectionMigrations]
