package bucket

import (
	"math"
	"testing"
	"time"
)

func TestResetRefillsAndForgivesUndrainedConsumption(t *testing.T) {
	s := NewStore(StoreConfig{TrackConsumption: true, EpochBase: 100})
	lim, err := NewLimit(4, time.Second, 4)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(0, 0)
	for range 4 {
		if r, _ := s.Take(1, []byte("k"), lim, 1, now); !r.Allowed {
			t.Fatal("refused within the burst")
		}
	}
	before, _ := s.Local(1, []byte("k"))
	if s.Reset(1, []byte("k"), 100) { // the bucket's epoch is 101
		t.Fatal("Reset cleared a bucket newer than its bound")
	}
	if !s.Reset(1, []byte("k"), math.MaxUint64) || s.Reset(1, []byte("k"), math.MaxUint64) || s.Reset(1, []byte("absent"), math.MaxUint64) {
		t.Fatal("Reset reports holding a bucket wrongly")
	}
	if b, held := s.Balance(1, []byte("k"), lim, now); b != 4 || held {
		t.Fatalf("after reset: balance %v held %v, want 4, false", b, held)
	}
	s.DrainDirty(func(c Consumption) {
		if c.Used != c.Prev {
			t.Errorf("drained %+v: consumption before the reset is reported", c)
		}
	})
	s.RaiseEpochs(1000)
	s.RaiseEpochs(500) // never lowers
	if r, _ := s.Take(1, []byte("k"), lim, 1, now); !r.Allowed {
		t.Fatal("refused after the reset")
	}
	after, _ := s.Local(1, []byte("k"))
	if after.Epoch <= 1000 || after.Epoch <= before.Epoch || after.Used != 1 {
		t.Fatalf("bucket after the reset: %+v (before: %+v), want epoch above 1000 and used 1", after, before)
	}
}
