package gossip

import (
	"fmt"
	"log"
	"sync"
	"time"
)

// dropLogInterval is the least time between two log lines of one cause.
const dropLogInterval = 10 * time.Second

// dropLog logs what the transport refuses at most once per cause per
// interval, with how many were refused since the last line: a stranger
// flooding the gossip port must not flood the log.
type dropLog struct {
	log      *log.Logger
	interval time.Duration
	now      func() time.Time

	mu     sync.Mutex
	causes map[string]*dropCause
}

type dropCause struct {
	last  time.Time
	count int
}

func newDropLog(l *log.Logger) *dropLog {
	return &dropLog{log: l, interval: dropLogInterval, now: time.Now, causes: map[string]*dropCause{}}
}

// drop records one refusal of cause from from and logs a line if none of this
// cause was logged within the interval. The causes are a fixed set.
func (d *dropLog) drop(cause string, from fmt.Stringer, err error) {
	n, ok := d.admit(cause)
	if !ok {
		return
	}
	detail := ""
	if err != nil {
		detail = " (" + err.Error() + ")"
	}
	d.log.Printf("[WARN] gossip: %s: %d since the last such line, the latest from %v%s", cause, n, from, detail)
}

// admit counts one event of cause and says whether to log it: yes for the
// first of an interval, with how many there were since the last logged one,
// itself included.
func (d *dropLog) admit(cause string) (int, bool) {
	now := d.now()
	d.mu.Lock()
	defer d.mu.Unlock()
	c := d.causes[cause]
	if c == nil {
		c = &dropCause{}
		d.causes[cause] = c
	}
	c.count++
	if !c.last.IsZero() && now.Sub(c.last) < d.interval {
		return 0, false
	}
	n := c.count
	c.count, c.last = 0, now
	return n, true
}
