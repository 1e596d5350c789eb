package daemon

import (
	"testing"
	"time"
)

func TestFirstShareHoldIsOnePropagationDelay(t *testing.T) {
	tests := []struct {
		name     string
		n        int
		interval time.Duration
		fanout   int
		nodes    int
		want     time.Duration
	}{
		{"direct fan-out", 10, 200 * time.Millisecond, 64, 4, 400*time.Millisecond + networkSlack},
		{"defaults", 3, 0, 0, 0, 40*time.Millisecond + networkSlack},
		{"above the fan-out limit: a round per hop and per 512 members", 1000, 20 * time.Millisecond, 64, 4, (2+5+2)*20*time.Millisecond + networkSlack},
		{"3,000 members", 3000, 20 * time.Millisecond, 64, 4, (2+6+6)*20*time.Millisecond + networkSlack},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := firstShareHold(tt.n, tt.interval, tt.fanout, tt.nodes); got != tt.want {
				t.Fatalf("hold %s, want %s", got, tt.want)
			}
		})
	}
}
