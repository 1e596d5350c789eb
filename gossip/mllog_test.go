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
