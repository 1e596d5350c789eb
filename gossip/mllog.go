package gossip

import (
	"bytes"
	"fmt"
	"log"
	"strings"
	"sync/atomic"

	"github.com/hashicorp/go-hclog"
)

// memberlistLog turns memberlist's log lines ("[ERR] memberlist: ...") into
// lines of the syncer's logger at the level their tag names, except that a
// peer or this node going away is not an error:
//
//   - while this node leaves or shuts down (leaving is set), [ERR] lines are
//     logged at DEBUG: they are memberlist's goroutines meeting sockets that
//     are being closed under them ("failed to send gossip ... use of closed
//     network connection");
//   - an [ERR] line whose cause only says that the other end went away
//     (EOF, connection refused or reset, broken pipe, closed connection) is
//     logged at WARN: a peer that leaves can cut a push-pull or a probe
//     short; memberlist's failure detection, not this line, decides whether
//     it died, and says so at INFO ("member left or died");
//   - an [ERR] line about traffic from outside the cluster (a stream or
//     packet with another cluster's label, or none) is logged at WARN: a
//     stranger on the network is worth knowing about, but it is not a fault
//     of this node, and a clean shutdown or leave must log no ERROR even
//     while strangers knock.
//
// Every other line keeps its level, as hclog's InferLevels would give it.
// Lines about a bad packet or stream from a peer (strangers can send any
// number) are logged at most once per kind per dropLogInterval, with how
// many there were (see mlNoisy).
func memberlistLog(l hclog.Logger, leaving *atomic.Bool) *log.Logger {
	return log.New(&mlWriter{log: l, leaving: leaving, limit: newDropLog(nil)}, "", 0)
}

type mlWriter struct {
	log     hclog.Logger
	leaving *atomic.Bool
	limit   *dropLog
}

// mlNoisy are the texts of memberlist's lines about one bad packet or stream.
var mlNoisy = []string{
	"Decrypt packet failed", "unacceptable label", "label header", "cannot decode label", "not supported",
	"Failed to decode", "invalid checksum", "handler queue full", "missing message type byte",
	"Compound request had", "failed to receive", "Failed to receive", "Failed to read remote state",
	"Failed push/pull merge", "Got ping for unexpected node", "Received invalid msgType", "Too many pending push/pull",
	"Remote node state size", "encryption is configured but", "remote state is encrypted",
}

// peerGone are error texts that say the other end of a connection went away.
var peerGone = []string{"EOF", "connection refused", "connection reset", "broken pipe", "use of closed network connection"}

// stranger are error texts that say the traffic came from outside the cluster.
var stranger = []string{"unacceptable label"}

func (w *mlWriter) Write(p []byte) (int, error) {
	line := string(bytes.TrimRight(p, "\r\n"))
	level, msg := hclog.Info, line
	for _, t := range []struct {
		tag   string
		level hclog.Level
	}{{"[ERR]", hclog.Error}, {"[ERROR]", hclog.Error}, {"[WARN]", hclog.Warn}, {"[INFO]", hclog.Info}, {"[DEBUG]", hclog.Debug}, {"[TRACE]", hclog.Trace}} {
		if rest, ok := strings.CutPrefix(line, t.tag); ok {
			level, msg = t.level, strings.TrimSpace(rest)
			break
		}
	}
	if level == hclog.Error {
		switch {
		case w.leaving.Load():
			level = hclog.Debug
		case containsAny(msg, peerGone), containsAny(msg, stranger):
			level = hclog.Warn
		}
	}
	if level >= hclog.Warn {
		for _, kind := range mlNoisy {
			if strings.Contains(msg, kind) {
				n, ok := w.limit.admit(kind)
				if !ok {
					return len(p), nil
				}
				if n > 1 {
					msg += fmt.Sprintf(" (%d like this in the last %s)", n, dropLogInterval)
				}
				break
			}
		}
	}
	w.log.Log(level, msg)
	return len(p), nil
}

func containsAny(s string, subs []string) bool {
	for _, sub := range subs {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}
