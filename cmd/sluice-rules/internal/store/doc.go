// Package store keeps the rules service's state in a SQL database: SQLite
// (embedded, pure Go, the default) or PostgreSQL.
//
// It knows tables, not rules: what a change means (validation, the served
// document, loosening) is the server's. Every change runs in one
// serialized write transaction (Store.Change): SQLite takes its write lock
// at BEGIN (BEGIN IMMEDIATE), PostgreSQL locks the one row of the state
// table, so two changes never interleave and versions are dense. Reads run
// outside transactions (Store.Read). The schema is migrated at Open, under
// the same serialization, so several replicas may start together.
//
// Times are stored as Unix microseconds (BIGINT) so both databases agree.
package store
