package gossip

import (
	"bytes"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/hashicorp/go-hclog"
)

func TestMemberlistLogLevels(t *testing.T) {
	tests := []struct {
		line    string
		leaving bool
		want    string // hclog's level tag
	}{
		{"[ERR] memberlist: Decrypt packet failed: cipher: message authentication failed from=1.2.3.4:7946", false, "[ERROR]"},
		{"[ERR] memberlist: Push/Pull with b failed: EOF", false, "[WARN]"},
		{"[ERR] memberlist: Failed fallback TCP ping: dial tcp 127.0.0.1:7946: connect: connection refused", false, "[WARN]"},
		{`[ERR] memberlist: discarding stream with unacceptable label "": from=127.0.0.1:34480`, false, "[WARN]"},
		{"[ERR] memberlist: Failed to send gossip to 127.0.0.1:7946: write udp: use of closed network connection", true, "[DEBUG]"},
		{"[ERR] memberlist: Decrypt packet failed: cipher: message authentication failed", true, "[DEBUG]"},
		{"[WARN] memberlist: Was able to connect to b over TCP but UDP probes failed", false, "[WARN]"},
		{"[DEBUG] memberlist: Stream connection from=127.0.0.1:1234", false, "[DEBUG]"},
		{"[INFO] memberlist: Suspect b has failed, no acks received", false, "[INFO]"},
		{"no tag at all", false, "[INFO]"},
	}
	for _, tt := range tests {
		var out bytes.Buffer
		var leaving atomic.Bool
		leaving.Store(tt.leaving)
		l := memberlistLog(hclog.New(&hclog.LoggerOptions{Output: &out, Level: hclog.Trace}), &leaving)
		l.Println(tt.line)
		got := out.String()
		if !strings.Contains(got, tt.want+" ") || strings.Count(got, "\n") != 1 {
			t.Errorf("%q (leaving %v) logged as %q, want level %s", tt.line, tt.leaving, got, tt.want)
		}
	}
}

// memberlist logs a line per bad packet; a stranger's flood of them yields
// one line per kind per interval, with the count.
func TestMemberlistBadPacketLinesAreRateLimited(t *testing.T) {
	var out bytes.Buffer
	var leaving atomic.Bool
	l := memberlistLog(hclog.New(&hclog.LoggerOptions{Output: &out, Level: hclog.Trace}), &leaving)
	for range 500 {
		l.Println("[ERR] memberlist: Decrypt packet failed: cipher: message authentication failed from=192.0.2.1:7946")
		l.Println("[ERR] memberlist: discarding packet with unacceptable label \"x\": from=192.0.2.1:7946")
		l.Println("[INFO] memberlist: Suspect b has failed, no acks received")
	}
	if n := strings.Count(out.String(), "Decrypt packet failed"); n != 1 {
		t.Fatalf("%d lines for 500 undecryptable packets", n)
	}
	if n := strings.Count(out.String(), "unacceptable label"); n != 1 {
		t.Fatalf("%d lines for 500 packets of another cluster", n)
	}
	if n := strings.Count(out.String(), "Suspect b"); n != 500 {
		t.Fatalf("%d of 500 other lines kept", n)
	}
}
