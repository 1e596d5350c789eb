// Package backoff says how long to wait before retrying something that
// failed: exponentially longer after each failure, capped, with a random
// part so that many processes failing together do not retry in step.
//
// It is the one place Sluice computes a retry delay: the client's reconnects,
// the HTTP Transport's retries, the daemon's rules-service polls, gossip's
// joins and the accept loops of the socket and gossip listeners all use it.
// It holds no state and reads no clock and no random source: the caller
// counts its failures and passes the random number in, so tests choose it.
// It imports the standard library only (clientlib may use it).
package backoff

import "time"

// Policy is exponential backoff with jitter. The zero Policy waits 0.
type Policy struct {
	// Min is the delay before the first retry, before jitter.
	Min time.Duration
	// Max caps the delay, before jitter: the delay doubles from Min after
	// each failure until it reaches Max.
	Max time.Duration
	// Spread is the fraction of the delay that is random, in [0, 1]: the
	// wait is uniform in [d×(1−Spread), d). 1 is "full jitter", [0, d);
	// 0.5 spreads over the upper half, [d/2, d); 0 waits d exactly.
	// Values outside [0, 1] are clamped.
	Spread float64
}

// Accept is the policy of a listener whose Accept fails (out of file
// descriptors, say): 5 ms doubling to 1 s, no jitter (one listener, nothing
// to spread). The socket server and the gossip transport both use it.
func Accept() Policy { return Policy{Min: 5 * time.Millisecond, Max: time.Second} }

// Delay returns the wait before retry number attempt (1 for the retry after
// the first failure). r is a random number in [0, 1), such as rand.Float64();
// it is clamped into that range. An attempt below 1 counts as 1.
func (p Policy) Delay(attempt int, r float64) time.Duration {
	d := max(p.Min, 0)
	for i := 1; i < attempt && d < p.Max; i++ {
		if d > p.Max/2 {
			d = p.Max
			break
		}
		d *= 2
	}
	d = min(d, max(p.Max, 0))
	spread := time.Duration(min(max(p.Spread, 0), 1) * float64(d))
	r = min(max(r, 0), 1)
	return d - spread + time.Duration(r*float64(spread))
}
