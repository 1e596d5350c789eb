// Package bucket holds Sluice's rate-limiting arithmetic: a token bucket whose
// balance may go negative, and Store, a bounded, sharded map from keys to
// buckets.
//
// Everything here is pure: every method takes the current time as an argument
// and nothing reads the clock, so callers (the daemon) read it once per request
// and tests drive time by hand. The package knows nothing about rules files,
// sockets or gossip.
//
// # Representation
//
// A bucket is a single int64: the instant at which it is (or was) full. The
// balance at time now is Burst − (full − now) × Rate, capped at Burst, so a
// bucket whose full instant lies far in the future is in debt. Admitting a
// request of cost c moves the full instant c/Rate later; refill is implicit in
// the passing of time. The zero value is a full bucket, an idle bucket is one
// whose full instant has passed, and eviction needs no knowledge of the limit.
package bucket
