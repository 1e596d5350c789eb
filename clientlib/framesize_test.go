package clientlib

import (
	"strings"
	"testing"
	"time"

	"github.com/sluicelabs/sluice/ipc"
)

// The size computed before queueing is the size of the frame then encoded.
func TestFrameSizeIsKnownBeforeEncoding(t *testing.T) {
	long := func(n int) string { return strings.Repeat("x", n) }
	tests := []struct {
		name   string
		id     uint64
		maxKey int
		checks []Check
	}{
		{"one small", 1, 256, []Check{{Rule: "api", Key: "k", Cost: 1}}},
		{"shaped, big id", 1 << 40, 256, []Check{{Rule: "api", Key: "k", Cost: 300, MaxDelay: time.Second}}},
		{"string size classes", 200, 0, []Check{{Rule: long(31), Key: long(32), Cost: 1}, {Rule: long(255), Key: long(256), Cost: 1 << 20}, {Rule: long(70000), Key: "k", Cost: 1}}},
		{"bounded key", 70000, 64, []Check{{Rule: "r", Key: long(1000), Cost: 1}}},
		{"sixteen checks", 3, 256, make16()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, start := ipc.BeginRequest(nil, tt.id, len(tt.checks))
			for _, ch := range tt.checks {
				key := ch.Key
				if tt.maxKey > 0 && len(key) > tt.maxKey {
					key = BoundedKey(key, tt.maxKey)
				}
				b = ipc.AppendShapedCheck(b, ch.Rule, key, uint64(ch.Cost), ch.MaxDelay)
			}
			b = ipc.FinishFrame(b, start)
			if got, want := checksSize(tt.checks, tt.maxKey)+uintSize(tt.id), len(b)-4; got != want {
				t.Fatalf("computed %d bytes, encoded %d", got, want)
			}
		})
	}
	in := ipc.AppendInspect(nil, 1<<33, "rule", long(300))
	if got, want := inspectSize("rule", long(300))+uintSize(1<<33), len(in)-4; got != want {
		t.Fatalf("inspect: computed %d bytes, encoded %d", got, want)
	}
}

func make16() []Check {
	cs := make([]Check, 16)
	for i := range cs {
		cs[i] = Check{Rule: "r", Key: strings.Repeat("k", i*10), Cost: int64(i + 1)}
	}
	return cs
}
