// Package gossiptest holds what the tests of packages that run gossip share:
// the goroutines memberlist is known to leave behind (for goleak) and a free
// gossip port.
// It is for tests, not for production code.
package gossiptest

import "go.uber.org/goleak"

// MemberlistLeftovers are the goleak options ignoring exactly the
// goroutines memberlist v0.7.0 is known to leave running for a moment after
// its Shutdown returns, which waits for none of them (memberlist.go
// Shutdown closes shutdownCh and stopTick and returns). Each ends by itself;
// none is Sluice's, so a test using only these ignores nothing of ours.
// memberlist's other goroutines (triggerFunc, pushPullTrigger,
// packetListen, packetHandler, streamListen, checkBroadcastQueueDepth,
// handleConn) end promptly after Shutdown, within goleak's retries, and are
// not ignored. Each call returns a new slice.
func MemberlistLeftovers() []goleak.Option {
	return []goleak.Option{
		// A probe in flight (state.go probeNode) waits out ProbeTimeout for an
		// ack, then up to ProbeInterval for its TCP fallback ping, whatever
		// Shutdown did; triggerFunc, which runs it, returns after it.
		goleak.IgnoreTopFunction("github.com/hashicorp/memberlist.(*Memberlist).probeNode"),
		// The fallback TCP ping of such a probe (state.go, the goroutine in
		// probeNode) waits for its deadline, ProbeInterval at most.
		goleak.IgnoreAnyFunction("github.com/hashicorp/memberlist.(*Memberlist).sendPingAndWaitForAck"),
		// An indirect ping's nack timer (net.go handleIndirectPing) waits out
		// ProbeTimeout before it sends its nack or gives up.
		goleak.IgnoreAnyFunction("github.com/hashicorp/memberlist.(*Memberlist).handleIndirectPing.func1"),
	}
}
