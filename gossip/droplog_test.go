package gossip

import (
	"bytes"
	"log"
	"net/netip"
	"strings"
	"testing"
	"time"
)

// A flood of refusals logs one line per cause per interval, with the count.
func TestDropLogIsRateLimitedPerCause(t *testing.T) {
	var out bytes.Buffer
	d := newDropLog(log.New(&out, "", 0))
	now := time.Unix(1000, 0)
	d.now = func() time.Time { return now }
	from := netip.MustParseAddrPort("192.0.2.1:7946")
	for range 1000 {
		d.drop("refused a gossip packet: label", from, nil)
		d.drop("refused a gossip stream: length", from, nil)
	}
	if n := strings.Count(out.String(), "\n"); n != 2 {
		t.Fatalf("%d lines for 2000 refusals of 2 causes within one interval:\n%s", n, out.String())
	}
	now = now.Add(dropLogInterval)
	d.drop("refused a gossip packet: label", from, nil)
	if !strings.Contains(out.String(), "label: 1000 since the last such line") {
		t.Fatalf("the next interval's line does not count the suppressed ones:\n%s", out.String())
	}
}
