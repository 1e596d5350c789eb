package ipcbench

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"
)

// BenchmarkDaemonMemoryLongKeys is BenchmarkDaemonMemory with keys of 256
// bytes, the longest a daemon accepts by default (--max-key-len): the
// README's memory table must hold for them too. Run it with -benchtime 1x.
func BenchmarkDaemonMemoryLongKeys(b *testing.B) {
	const keyLen = 256
	prefix := strings.Repeat("k", keyLen-10) // sendUnique appends 10 digits
	for _, n := range []int{100_000, 1_000_000} {
		b.Run(fmt.Sprintf("keys=%d/keylen=%d", n, keyLen), func(b *testing.B) {
			for range b.N {
				p := launch(b, false, "--max-keys", strconv.Itoa(2*n))
				c := p.dial(b, fillConns)
				idleRSS := p.rssBytes(b)
				idle := p.metrics(b, "go_memstats_heap_alloc_bytes")
				decided, undecided := sendUnique(c, "idle", prefix, int64(n), fillCallers, 3*time.Minute)
				if undecided > 0 || decided != int64(n) {
					b.Fatalf("sent %d of %d keys, %d undecided", decided+undecided, n, undecided)
				}
				rss := p.rssBytes(b)
				after := p.metrics(b, "go_memstats_heap_alloc_bytes", "go_memstats_heap_inuse_bytes", "sluice_active_keys")
				if int(after[2]) != n {
					b.Fatalf("daemon holds %v keys of %d", after[2], n)
				}
				c.Close()
				p.stop()
				b.ReportMetric(rss/(1<<20), "rss-MB")
				b.ReportMetric(after[0]/(1<<20), "heap-MB")
				b.ReportMetric((after[0]-idle[0])/float64(n), "bytes/key")
				b.ReportMetric((rss-idleRSS)/float64(n), "rss-bytes/key")
			}
		})
	}
}
