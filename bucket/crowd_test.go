package bucket

import (
	"testing"
	"time"
)

// A rule's crowd is the largest count of users the owners said at a first
// contact, halving every crowdHalfLife, forgotten crowdTTL after its last
// note; a rule whose slot another rule took is not known.
func TestCrowdsDecayAndAreForgotten(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	tests := []struct {
		name   string
		notes  []uint64 // users, one note a second from t0
		ask    Namespace
		at     time.Duration // after the last note
		want   float64
		wantOK bool
	}{
		{name: "never heard of", ask: 1, want: 0},
		{name: "one note", notes: []uint64{40}, ask: 1, want: 40, wantOK: true},
		{name: "the largest holds", notes: []uint64{40, 3, 5}, ask: 1, want: 40 / 1.1486983549970351 /* 2 s of decay */, wantOK: true},
		{name: "half after a half-life", notes: []uint64{1000}, ask: 1, at: crowdHalfLife, want: 500, wantOK: true},
		{name: "a larger crowd replaces a decayed one", notes: []uint64{10, 1000}, ask: 1, want: 1000, wantOK: true},
		{name: "no users counts as one", notes: []uint64{0}, ask: 1, want: 1, wantOK: true},
		{name: "forgotten after its time", notes: []uint64{40}, ask: 1, at: crowdTTL + time.Second},
		{name: "another rule's slot", notes: []uint64{40}, ask: 1 + crowdSlots},
		{name: "another rule", notes: []uint64{40}, ask: 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var ct crowdTable
			last := t0
			for i, u := range tt.notes {
				last = t0.Add(time.Duration(i) * time.Second)
				ct.note(1, u, last)
			}
			got, ok := ct.crowd(tt.ask, last.Add(tt.at))
			if ok != tt.wantOK || (ok && (got < tt.want*0.999 || got > tt.want*1.001)) {
				t.Fatalf("crowd = %v, %v; want %v, %v", got, ok, tt.want, tt.wantOK)
			}
		})
	}
}

// With FirstContactAuto a new key is held to burst / members while its rule
// is not known (a herd on a new rule's key is admitted about one burst, as
// FirstContactShare), and to burst / the rule's crowd, at most a token,
// once an owner told this node of the rule's keys at a first contact.
// Only the view heard while a bucket is held counts, and only in auto.
func TestAutoFirstContactFollowsTheRulesCrowd(t *testing.T) {
	lim, err := NewLimit(100, time.Second, 100)
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Unix(1_700_000_000, 0)
	tests := []struct {
		name      string
		contact   FirstContact
		users     uint64 // said by the owner of a key of the rule the node met before, 0: none
		viewLate  bool   // that view came after the hold (not a first contact)
		low, high int    // of the thousand nodes' first calls on a new key
	}{
		{name: "auto, rule not heard of: burst / members", contact: FirstContactAuto, low: 70, high: 130},
		{name: "auto, light rule: a token", contact: FirstContactAuto, users: 30, low: 1000, high: 1000},
		{name: "auto, crowd of 500, 3 s ago (406 now): burst / 406", contact: FirstContactAuto, users: 500, low: 200, high: 300},
		{name: "auto, crowd beyond the members: burst / members", contact: FirstContactAuto, users: 5000, low: 70, high: 130},
		{name: "auto, a view after the hold does not count", contact: FirstContactAuto, users: 30, viewLate: true, low: 70, high: 130},
		{name: "share ignores crowds", contact: FirstContactShare, users: 30, low: 70, high: 130},
		{name: "token ignores crowds", contact: FirstContactToken, users: 5000, low: 1000, high: 1000},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			admitted := 0
			for node := range 1000 {
				s := NewStore(StoreConfig{TrackConsumption: true, Seed: uint64(node + 1), FirstContact: tt.contact})
				s.SetFirstShare(1000, time.Second)
				if tt.users > 0 {
					at := t0
					s.Take(1, []byte("before"), lim, 1, at)
					if tt.viewLate {
						at = at.Add(2 * time.Second)
						s.Take(1, []byte("before"), lim, 1, at) // ends the hold
					}
					s.SetOwnerView(1, []byte("before"), lim, OwnerView{Users: tt.users, Balance: 50}, at)
				}
				now := t0.Add(3 * time.Second)
				if r, _ := s.Take(1, []byte("new"), lim, 1, now); r.Allowed {
					admitted++
				}
				if r, _ := s.Take(1, []byte("new"), lim, 1, now); r.Allowed && tt.low == 1000 {
					t.Fatalf("node %d admitted a second token during its hold", node)
				}
			}
			t.Logf("%d of 1000 nodes admitted their first call", admitted)
			if admitted < tt.low || admitted > tt.high {
				t.Fatalf("the cluster admitted %d, want %d to %d", admitted, tt.low, tt.high)
			}
		})
	}
}

// The known limit of FirstContactAuto: a key of a rule this node knows as
// light (the owners said few users at its first contacts) that every node
// meets at once is admitted a token per node, as FirstContactToken; the
// owner's first answer then tells every node the crowd, and the rule's
// next new key is held to its share, more of it as the crowd decays, a
// token each again once it has fallen below the burst (log2(members /
// burst) half-lives).
func TestAutoFirstContactHerdOnALightRule(t *testing.T) {
	lim, err := NewLimit(100, time.Second, 100)
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Unix(1_700_000_000, 0)
	const nodes = 1000
	stores := make([]*Store, nodes)
	for i := range stores {
		stores[i] = NewStore(StoreConfig{TrackConsumption: true, Seed: uint64(i + 1)})
		stores[i].SetFirstShare(nodes, time.Second)
		stores[i].Take(1, []byte("light"), lim, 1, t0)
		stores[i].SetOwnerView(1, []byte("light"), lim, OwnerView{Users: 20, Balance: 90}, t0)
	}
	herd := func(key string, at time.Time) int {
		n := 0
		for _, s := range stores {
			if r, _ := s.Take(1, []byte(key), lim, 1, at); r.Allowed {
				n++
			}
		}
		for _, s := range stores { // the owner's first answer: every node uses the key
			s.SetOwnerView(1, []byte(key), lim, OwnerView{Users: nodes, Balance: -900}, at.Add(40*time.Millisecond))
		}
		return n
	}
	tests := []struct {
		key       string
		after     time.Duration
		low, high int
	}{
		{key: "herd-1", after: 10 * time.Second, low: nodes, high: nodes},                 // the light rule's crowd: a token each
		{key: "herd-2", after: 11 * time.Second, low: 70, high: 150},                      // the herd's crowd heard: burst / ~936 each
		{key: "herd-3", after: 11*time.Second + 3*crowdHalfLife, low: 700, high: 900},     // decayed to 125: burst / 125 each
		{key: "herd-4", after: 11*time.Second + 8*crowdHalfLife, low: nodes, high: nodes}, // decayed below the burst: a token each
	}
	for _, tt := range tests {
		got := herd(tt.key, t0.Add(tt.after))
		t.Logf("%s at %s: %d of %d nodes admitted", tt.key, tt.after, got, nodes)
		if got < tt.low || got > tt.high {
			t.Errorf("%s: %d admitted, want %d to %d", tt.key, got, tt.low, tt.high)
		}
	}
}
