/**
 * The PostgreSQL connection pool, shared by the event store, projections and (later) pg-boss, so
 * that a caller can put several of them in one transaction.
 */
import { Context } from "effect"
import type pg from "pg"

export class Database extends Context.Service<Database, { readonly pool: pg.Pool }>()(
  "platform/ports/Database",
) {}
