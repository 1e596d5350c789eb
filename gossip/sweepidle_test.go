package gossip

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

// sweepIdle deletes exactly the entries idle for more than ttl (an entry
// idle for ttl exactly stays, as in the loops it replaced), whatever the
// map's order, and allocates nothing.
func TestSweepIdle(t *testing.T) {
	const ttl = 10 * time.Second
	for _, tc := range []struct {
		what string
		last map[string]time.Duration // each entry's last use
		now  time.Duration
		keep []string
	}{
		{"an empty map", map[string]time.Duration{}, 100 * time.Second, nil},
		{"none idle", map[string]time.Duration{"a": 95 * time.Second, "b": 100 * time.Second}, 100 * time.Second, []string{"a", "b"}},
		{"idle for the ttl exactly stays", map[string]time.Duration{"a": 90 * time.Second}, 100 * time.Second, []string{"a"}},
		{"idle a nanosecond longer goes", map[string]time.Duration{"a": 90*time.Second - 1}, 100 * time.Second, nil},
		{"some idle", map[string]time.Duration{"a": 0, "b": 50 * time.Second, "c": 91 * time.Second, "d": 99 * time.Second}, 100 * time.Second, []string{"c", "d"}},
		{"all idle", map[string]time.Duration{"a": 0, "b": time.Second}, 100 * time.Second, nil},
		{"used after now (a clock behind) stays", map[string]time.Duration{"a": 200 * time.Second}, 100 * time.Second, []string{"a"}},
	} {
		m := map[string]*chargePair{}
		for k, at := range tc.last {
			m[k] = &chargePair{lastB: at}
		}
		sweepIdle(m, tc.now, ttl, func(p *chargePair) time.Duration { return p.lastB })
		var got []string
		for k := range m {
			got = append(got, k)
		}
		slices.Sort(got)
		if fmt.Sprint(got) != fmt.Sprint(tc.keep) {
			t.Errorf("%s: kept %v, want %v", tc.what, got, tc.keep)
		}
	}
	// The replica's echo pairs (a named map type) sweep the same way.
	echo := echoPairs{{"api", "old", 0}: {last: 0}, {"api", "new", 0}: {last: 95 * time.Second}}
	sweepIdle(echo, 100*time.Second, ttl, func(p *echoPair) time.Duration { return p.last })
	if _, ok := echo[aggKey{"api", "new", 0}]; len(echo) != 1 || !ok {
		t.Errorf("echo pairs after the sweep: %v, want the one used 5 s ago", echo)
	}
	full := echoPairs{{"api", "k", 0}: {last: 99 * time.Second}}
	if allocs := testing.AllocsPerRun(100, func() {
		sweepIdle(full, 100*time.Second, ttl, func(p *echoPair) time.Duration { return p.last })
	}); allocs != 0 {
		t.Errorf("sweepIdle allocated %v times a sweep", allocs)
	}
}

// pairKeys lists the keys of m, sorted, as "rule/key".
func pairKeys[V any](m map[aggKey]V) string {
	var ks []string
	for k := range m {
		ks = append(ks, k.rule+"/"+k.key)
	}
	slices.Sort(ks)
	return strings.Join(ks, " ")
}

// The failover charge pairs (ownerchargeonce.go) are swept of pairs whose
// replica has not answered for a subscription's TTL, at most once per TTL,
// when a new pair starts; a new key finds no pair while MaxSeen are kept
// (charged whole). The sweep is sweepIdle since the bounded maps shared it;
// this holds the callers' semantics (passes before and after that change).
func TestChargePairsSweptAndCapped(t *testing.T) {
	type answer struct {
		key   string
		after time.Duration // since the first answer
	}
	tests := []struct {
		name    string
		maxSeen int
		answers []answer
		pairs   string
	}{
		{"an idle pair is swept when a new one starts", 10, []answer{{"a", 0}, {"b", ownerSubTTL + time.Second}}, "api/b"},
		{"a pair idle for the TTL exactly stays", 10, []answer{{"a", 0}, {"b", ownerSubTTL}}, "api/a api/b"},
		{"swept at most once per TTL: a pair idle since the last sweep stays", 10, []answer{{"a", 0}, {"b", ownerSubTTL - time.Second}, {"c", ownerSubTTL + time.Second}, {"d", 2 * ownerSubTTL}}, "api/b api/c api/d"},
		{"full: a new key is not paired", 1, []answer{{"a", 0}, {"b", time.Second}}, "api/a"},
		{"full, but the sweep makes room", 1, []answer{{"a", 0}, {"b", ownerSubTTL + time.Second}}, "api/b"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, _ := newOwnerSyncer("me", "o", "r", "x")
			s.mu.Lock()
			defer s.mu.Unlock()
			if s.subTTL() != ownerSubTTL {
				t.Fatalf("subscription TTL %v: the cases assume %v", s.subTTL(), ownerSubTTL)
			}
			s.cfg.MaxSeen = tt.maxSeen
			s.owner.failover = map[[2]string]failover{}
			for _, a := range tt.answers {
				s.owner.failover[[2]string{"api", a.key}] = failover{at: 1, owner: "o"}
			}
			start := time.Second
			for i, a := range tt.answers {
				now := start + a.after
				if got := s.chargeOnceLocked(aggKey{"api", a.key, 0}, "r", "o", "r", 4, now, now); got != 4 {
					t.Fatalf("answer %d (%+v): charged %d, want 4 (a replica's first answer)", i, a, got)
				}
			}
			if got := pairKeys(s.owner.pairs.m); got != tt.pairs {
				t.Errorf("pairs %q, want %q", got, tt.pairs)
			}
		})
	}
}

// A replica's echo pairs (owneraggreplica.go) are swept of pairs idle for
// an active TTL only when MaxSeen are kept; a key that still finds them
// full is charged whole and not paired.
func TestEchoPairsSweptWhenFull(t *testing.T) {
	const agg, other = "m001", "m002" // the replica's aggregator, another aggregator
	tests := []struct {
		name    string
		maxSeen int
		idle    []time.Duration // how long each other pair has been idle
		pairs   string          // "k" is the key counted
	}{
		{"not full: no sweep", 3, []time.Duration{time.Hour, 0}, "api/k api/p0 api/p1"},
		{"full, one idle: swept and paired", 2, []time.Duration{ownerActiveTTL + time.Millisecond, 0}, "api/k api/p1"},
		{"full, idle for the TTL exactly: not paired", 2, []time.Duration{ownerActiveTTL, 0}, "api/p0 api/p1"},
		{"full of fresh pairs: not paired", 2, []time.Duration{0, 0}, "api/p0 api/p1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, _ := newClockedAggSyncer(20)
			s.mu.Lock()
			defer s.mu.Unlock()
			if s.activeTTL() != ownerActiveTTL {
				t.Fatalf("active TTL %v: the cases assume %v", s.activeTTL(), ownerActiveTTL)
			}
			now := s.sinceBorn()
			k := echoedKey(t, s, agg, other, now)
			s.cfg.MaxSeen = tt.maxSeen
			s.owner.pairs.echo = echoPairs{}
			for i, idle := range tt.idle {
				s.owner.pairs.echo[aggKey{"api", fmt.Sprint("p", i), 0}] = &echoPair{last: now - idle}
			}
			if got := s.countedChargeLocked(k, other, 50, now); got != 50 {
				t.Fatalf("charged %d of another aggregator's group's 50, want all", got)
			}
			want := strings.Replace(tt.pairs, "api/k", "api/"+k.key, 1)
			if got := pairKeys(s.owner.pairs.echo); got != want {
				t.Errorf("pairs %q, want %q", got, want)
			}
		})
	}
}
