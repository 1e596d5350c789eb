package gossip

import (
	"slices"
	"sync/atomic"
)

// TransportStats counts what the gossip transport refused before memberlist
// saw it; read it with Syncer.Transport.
type TransportStats struct {
	// StreamsAccepted counts inbound streams handed to memberlist.
	StreamsAccepted atomic.Uint64
	// StreamsOpen is the inbound streams open now (screened or with
	// memberlist), at most maxStreams.
	StreamsOpen atomic.Int64
	// BytesRefused sums what refused streams declared they would send
	// (encrypted frame or message lengths; 0 when none was read).
	BytesRefused atomic.Uint64

	streams [9]atomic.Uint64 // by StreamRefusals index
	replies [9]atomic.Uint64 // by StreamRefusals index
	packets [6]atomic.Uint64 // by PacketRefusals index
}

// StreamsRefused returns how many inbound streams were refused for reason
// (one of StreamRefusals).
func (s *TransportStats) StreamsRefused(reason string) uint64 {
	if i := slices.Index(StreamRefusals, reason); i >= 0 {
		return s.streams[i].Load()
	}
	return 0
}

// RepliesRefused returns how many replies, on streams this node opened
// (push-pull, join, TCP ping), were refused for reason (one of
// StreamRefusals) before memberlist read them.
func (s *TransportStats) RepliesRefused(reason string) uint64 {
	if i := slices.Index(StreamRefusals, reason); i >= 0 {
		return s.replies[i].Load()
	}
	return 0
}

// PacketsRefused returns how many packets were refused for reason (one of
// PacketRefusals).
func (s *TransportStats) PacketsRefused(reason string) uint64 {
	if i := slices.Index(PacketRefusals, reason); i >= 0 {
		return s.packets[i].Load()
	}
	return 0
}

func (s *TransportStats) countStream(reason string, declared int64) {
	if i := slices.Index(StreamRefusals, reason); i >= 0 {
		s.streams[i].Add(1)
	}
	if declared > 0 {
		s.BytesRefused.Add(uint64(declared))
	}
}

func (s *TransportStats) countReply(reason string, declared int64) {
	if i := slices.Index(StreamRefusals, reason); i >= 0 {
		s.replies[i].Add(1)
	}
	if declared > 0 {
		s.BytesRefused.Add(uint64(declared))
	}
}

func (s *TransportStats) countPacket(reason string) {
	if i := slices.Index(PacketRefusals, reason); i >= 0 {
		s.packets[i].Add(1)
	}
}
