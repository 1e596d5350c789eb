package clientlib

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"
)

type lineRecorder struct {
	mu    sync.Mutex
	lines []map[string]any
}

func (r *lineRecorder) log(msg string, kv ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	m := map[string]any{"msg": msg}
	for i := 0; i+1 < len(kv); i += 2 {
		m[fmt.Sprint(kv[i])] = kv[i+1]
	}
	r.lines = append(r.lines, m)
}

func TestFailOpenLogIsRateLimitedPerCause(t *testing.T) {
	now := time.Unix(1000, 0)
	rec := &lineRecorder{}
	l := NewFailOpenLog(rec.log, 10*time.Second, false, func() time.Time { return now })
	for range 500 {
		l.Record(ErrDaemonDown)
	}
	l.Record(ErrTimeout)
	if len(rec.lines) != 2 {
		t.Fatalf("%d lines after 500 outages and 1 timeout in one interval, want 2: %v", len(rec.lines), rec.lines)
	}
	if rec.lines[0]["cause"] != "daemon_down" || rec.lines[0]["count"] != uint64(1) || rec.lines[1]["cause"] != "timeout" {
		t.Fatalf("lines %v", rec.lines)
	}
	now = now.Add(10 * time.Second)
	l.Record(fmt.Errorf("%w: read: EOF", ErrDaemonDown))
	if len(rec.lines) != 3 || rec.lines[2]["count"] != uint64(500) {
		t.Fatalf("the next interval's line must carry the 499 unlogged plus this one: %v", rec.lines)
	}
	if l.Total(CauseDaemonDown) != 501 || l.Total(CauseTimeout) != 1 {
		t.Fatalf("totals %v", l.Totals())
	}
}

func TestCauseOf(t *testing.T) {
	tests := []struct {
		err  error
		want Cause
	}{
		{ErrDaemonDown, CauseDaemonDown},
		{fmt.Errorf("%w: dial: permission denied", ErrDaemonDown), CauseDaemonDown},
		{ErrTimeout, CauseTimeout},
		{fmt.Errorf("%w: reply frame", ErrProtocol), CauseProtocol},
		{ErrClosed, CauseClosed},
		{context.Canceled, CauseCanceled},
		{fmt.Errorf("something else"), CauseInternal},
	}
	for _, tt := range tests {
		if got := CauseOf(tt.err); got != tt.want {
			t.Errorf("CauseOf(%v) = %v, want %v", tt.err, got, tt.want)
		}
	}
}
