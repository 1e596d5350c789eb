package main

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/hashicorp/memberlist"

	"github.com/sluicelabs/sluice/gossip"
	mp "github.com/sluicelabs/sluice/internal/msgpackwire"
)

// A keyed member's delegate protocol advertisement attacked (issue 20):
// protoChainAgg (5) keeps a key's third ring member out of its
// aggregators (gossip/ownerchainagg.go) only once every member advertises
// it; with one member of protocol 4 every member names aggregators as
// protocol 4 does, so that users and owners agree. A rogue that claims 5
// beside protocol-4 members, or 255, or a current version beyond every
// member's maximum, or a minimum above it, beside a real sluiced: the
// daemon names its aggregator of an aggregated key as the members it
// lists decide (checked on the wire: the rogue that receives the daemon's
// counters of the key as its aggregator, kind 6, is the one
// gossip.RingAggregator names), lists the members memberlist's version
// check lets in, and stays up.

// rogueProto is a delegate protocol advertisement: min, max, current.
type rogueProto struct{ min, max, cur uint8 }

func (p rogueProto) set(c *memberlist.Config) {
	c.DelegateProtocolMin, c.DelegateProtocolMax, c.DelegateProtocolVersion = p.min, p.max, p.cur
}

// noticeEntry is one key's entry in an owner's notice (kind 8): [rule,
// key, total, gen, contrib, window, ack_epoch, ack_used]; the key goes
// through aggregators from the receiver's next round.
func noticeEntry(key string, gen uint64) []byte {
	b := mp.AppendArrayHeader(nil, 8)
	b = mp.AppendStr(b, "r")
	b = mp.AppendStr(b, key)
	for _, v := range [...]uint64{0, gen, 0, 0, 0, 0} {
		b = mp.AppendUint(b, v)
	}
	return b
}

// aggregatedKey returns a key of rule r, not the daemon's to count (it is
// none of owner, replica, third), whose aggregator for the daemon differs
// as protocol-4 and protocol-5 members name it: a key that tells which
// way the daemon named it.
func aggregatedKey(t *testing.T, members []string) string {
	t.Helper()
	for i := range 10000 {
		k := fmt.Sprint("agg-", i)
		o, r, th := gossip.RingChain(members, "r", k)
		if o != "a" && r != "a" && th != "a" &&
			gossip.RingAggregator(members, "r", k, "a", false) != gossip.RingAggregator(members, "r", k, "a", true) {
			return k
		}
	}
	t.Fatalf("no key whose aggregator depends on protoChainAgg on %v", members)
	return ""
}

// Eight rogues beside the daemon (aggregation needs eight members, each
// advertising protocol 4 or more), the eighth advertising its protocol
// oddly. A claim of 5 (or 255) beside protocol-4 members changes nothing:
// the daemon names the key's third its aggregator as protocol-4 members
// do. Beside protocol-5 members a claim of 255 is a claim of 5: the third
// is out. Versions memberlist's check refuses (a current version beyond
// the daemon's maximum, a minimum above it, a maximum below its minimum)
// keep the rogue out of the membership: the daemon names aggregators as
// its other members decide. Mutation checked: with thirdOut set whatever
// the members advertise, the first and third cases fail (the daemon sent
// its counter to r4, the members it lists name r7).
func TestChainProtocolAdvertisementsKeepAggregatorsConsistent(t *testing.T) {
	v4, v5 := rogueProto{0, 4, 0}, rogueProto{0, 5, 0}
	for _, tt := range []struct {
		name   string
		honest rogueProto // r1..r7
		odd    rogueProto // r8
		listed bool       // r8 is let in
	}{
		{"a false 5 beside protocol-4 members", v4, v5, true},
		{"every member 5, one says 255", v5, rogueProto{0, 255, 0}, true},
		{"protocol 4 members, one says 255", v4, rogueProto{0, 255, 0}, true},
		{"a current version beyond every maximum", v5, rogueProto{0, 255, 255}, false},
		{"a minimum above every maximum", v5, rogueProto{200, 255, 200}, false},
		{"a maximum below its minimum", v5, rogueProto{5, 4, 5}, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			a, addr := ownerDaemon(t)
			baseHWM := a.peakKiB(t)
			rogues := map[string]*ownerRogue{}
			members := []string{"a"}
			for i := range 7 {
				name := fmt.Sprint("r", i+1)
				rogues[name] = newRogueMember(t, addr, name, tt.honest.set)
				members = append(members, name)
			}
			for _, name := range members[1:] {
				a.awaitMember(t, name)
			}
			odd, err := joinRogueMember(t, addr, "r8", tt.odd.set)
			t.Logf("r8 advertising %+v: join error %v", tt.odd, err)
			if (err == nil) != tt.listed {
				t.Fatalf("r8's join: error %v, want it let in: %v", err, tt.listed)
			}
			if tt.listed {
				a.awaitMember(t, "r8")
				rogues["r8"] = odd
				members = append(members, "r8")
			}
			eventually(t, "the daemon counts its members", func() bool {
				return ipcMetric(t, a.admin, "sluice_members_alive") == float64(len(members))
			})
			thirdOut := tt.honest.max >= 5 && (!tt.listed || tt.odd.max >= 5)

			key := aggregatedKey(t, members)
			owner, _, third := gossip.RingChain(members, "r", key)
			want := gossip.RingAggregator(members, "r", key, "a", thirdOut)
			// The owner notices a contributor only: the daemon's counter
			// reaches it first (a notice about a key the daemon never used is
			// refused, gossip/ownerunsolicited.go), and its next one goes to
			// the aggregator.
			a.spendOne(t, []string{key})
			rogues[owner].awaitCounters(t, "the daemon's counter of "+key+" reaches its owner", []string{key})
			rogues[owner].send(t, addr, rogues[owner].stamped(8, noticeEntry(key, 1)))
			if d := a.c.Allow(context.Background(), "r", key); !d.Allowed {
				t.Fatalf("a refused the second token of %s: %+v", key, d)
			}
			var got string
			eventually(t, "the daemon sends its counter of "+key+" to an aggregator", func() bool {
				for name, r := range rogues {
					r.mu.Lock()
					if r.aggUses[key] {
						got = name
					}
					r.mu.Unlock()
				}
				return got != ""
			})
			t.Logf("%s: owner %s, third %s; the daemon's aggregator %s (third out: %v, want %s)", key, owner, third, got, thirdOut, want)
			if got != want {
				t.Errorf("the daemon sent its counter of %s to %s; the members it lists (%s) name %s (third out: %v)",
					key, got, strings.Join(members, " "), want, thirdOut)
			}
			if !tt.listed && strings.Contains(a.p.stderr.String(), "member joined: name=r8") {
				t.Errorf("the daemon lists r8, which advertised %+v", tt.odd)
			}
			a.assertUpOwner(t)
			a.assertPeakGrowth(t, baseHWM, "the odd member's membership")
		})
	}
}
