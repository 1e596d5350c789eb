// Package config holds the daemon's settings and its rules: their defaults,
// the YAML rules file format, and validation with errors that name the file,
// line and field at fault.
//
// It parses and validates; it does not watch files, hold locks or apply rules
// to buckets. The daemon decides when to load and what a change means for
// balances.
package config
