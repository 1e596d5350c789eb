package testcluster

import (
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"
)

// Owner mode's shares with real processes (gossip/ownershare.go,
// bucket/share.go). SLUICE_OWNERSHARE_BINARY runs another build of sluiced
// on every node (the "before" figures); SLUICE_OWNERSHARE_MIXED runs that
// build on node 1 only, beside this one (a rolling upgrade).

// ownerShareBinaries builds this sluiced and returns the options' binaries.
func ownerShareBinaries(t *testing.T, opts *ProcsOptions) {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "sluiced")
	if out, err := exec.Command("go", "build", "-o", bin, "../cmd/sluiced").CombinedOutput(); err != nil {
		t.Fatalf("build sluiced: %v\n%s", err, out)
	}
	opts.Sluiced = bin
	if other := os.Getenv("SLUICE_OWNERSHARE_BINARY"); other != "" {
		opts.Sluiced = other
		opts.FirstContact = "" // that build may predate --first-contact
		t.Logf("every node runs %s, with its default first contact", other)
	}
	if old := os.Getenv("SLUICE_OWNERSHARE_MIXED"); old != "" {
		opts.NodeSluiced = make([]string, opts.N)
		opts.NodeSluiced[1] = old
		t.Logf("node 1 runs %s", old)
	}
}

// shareRules: rare and light are limits whose burst is below the
// cluster's size; warm a key every node uses once to see that the cluster
// has formed.
const shareRules = "rules:\n  rare:\n    rate: 1/1s\n    burst: 4\n  light:\n    rate: 16/1s\n    burst: 8\n  warm:\n    rate: 1000/1h\n"

// Twenty sluiced processes in owner mode, each asked once for a key new to
// all of them, at about the same moment, three times (a new key each
// wave). With --first-contact share the cluster admits about the burst
// (each node lends itself burst/20 of it, rounded up or down at random,
// until the key's owner answers), not one token per node: 1 to 8 of 20 a
// wave on average. With token every node admits its first request, as a
// host calling a key now and then must be: 20 of 20, or 19 when the key's
// owner heard four others' tokens before its own request came (its balance
// then refuses, as it should). With the default, auto, the first wave (a
// rule no node has heard of) is held as share's; the later waves' share
// depends on the crowd each node heard at its first answer (logged).
//
// Then light users (lightUsers): every node calls each of 20 keys of
// another rule of burst 8 once, in a shuffled order, each key offered a
// sixth of its rate, so every call is a first contact and every one should
// pass. token admits them all, share about burst/20 of them, auto all but
// those a node makes before it has heard of the rule's crowd.
func TestOwnerModeFirstContactProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("runs twenty sluiced processes")
	}
	const n, waves = 20, 3
	for _, contact := range []string{"auto", "token", "share"} {
		t.Run(contact, func(t *testing.T) {
			admitted, decided, want, light := firstContactWaves(t, n, waves, contact)
			total := 0
			for wave, got := range admitted {
				total += got
				switch {
				case contact == "token" && got < decided[wave]-1:
					t.Errorf("wave %d: %d of the %d nodes that answered admitted their first request, want every one (but perhaps the key's owner)", wave, got, decided[wave])
				case (contact == "share" || contact == "auto" && wave == 0) && float64(got) > math.Max(12, 2.5*want[wave]):
					t.Errorf("wave %d: %d admitted, want about %.1f (one per node would be %d)", wave, got, want[wave], n)
				}
			}
			if contact == "share" && (total < waves || total > 8*waves) {
				t.Errorf("%d admitted in %d waves, want 1 to 8 a wave on average (burst/20 of each node's first request)", total, waves)
			}
			got := float64(light.admitted) / float64(max(1, light.decided))
			switch {
			case light.decided < light.calls/2:
				t.Errorf("light users: only %d of %d calls decided (the others failed open)", light.decided, light.calls)
			case contact == "token" && got < 0.9, contact == "auto" && got < 0.8:
				t.Errorf("light users: %d of %d decided calls admitted (%.0f%%), want nearly all", light.admitted, light.decided, 100*got)
			case contact == "share" && got > 0.7:
				t.Errorf("light users: %d of %d decided calls admitted (%.0f%%), want about burst/20 (40%%) of them", light.admitted, light.decided, 100*got)
			}
		})
	}
}

// firstContactWaves starts n sluiced processes in owner mode with
// --first-contact contact, waits for the cluster to form, then asks every
// node once for a new key, waves times, and returns how many nodes
// admitted each wave's key, how many decided it (the others' clients failed
// open: the daemon did not answer in time on a starved machine), and burst +
// rate × the wave's spread; then what lightUsers admitted.
func firstContactWaves(t *testing.T, n, waves int, contact string) (admitted, decided []int, want []float64, light lightCalls) {
	t.Helper()
	opts := ProcsOptions{N: n, Rules: shareRules, GossipInterval: 20 * time.Millisecond, GossipMode: "owner", FirstContact: contact}
	ownerShareBinaries(t, &opts)
	p, err := StartProcs(opts)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	// The cluster has formed when every node hears every other's token on
	// a warm key within a few seconds: every node's ring names the same
	// owner (until then their counters go to different owners, and a key
	// used once is never reconciled). A new warm key each attempt.
	deadline := time.Now().Add(90 * time.Second)
	for attempt := 0; ; attempt++ {
		if time.Now().After(deadline) {
			t.Fatalf("the cluster did not form in 90 s (%d attempts)", attempt)
		}
		key := "warm-" + strconv.Itoa(attempt)
		for i := range n {
			p.Allow(i, "warm", key, 1)
		}
		if allHeard(p, n, key, time.Now().Add(3*time.Second)) {
			break
		}
	}
	for wave := range waves {
		key := "first-" + strconv.Itoa(wave)
		var wg sync.WaitGroup
		var mu sync.Mutex
		got, failedOpen := 0, 0
		start := time.Now()
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				d := p.Allow(i, "rare", key, 1)
				mu.Lock()
				defer mu.Unlock()
				switch {
				case d.FailedOpen:
					failedOpen++
				case d.Allowed:
					got++
				}
			}()
		}
		wg.Wait()
		spread := time.Since(start)
		admitted, decided, want = append(admitted, got), append(decided, n-failedOpen), append(want, 4+spread.Seconds())
		t.Logf("--first-contact %s, wave %d: %d of %d nodes admitted the new key's first request within %s (%d failed open); burst + rate × T = %.1f",
			contact, wave, got, n, spread.Round(time.Millisecond), failedOpen, want[wave])
	}
	light = lightUsers(p, n, 20)
	t.Logf("--first-contact %s, light users: %d of %d calls admitted, %d failed open", contact, light.admitted, light.calls, light.calls-light.decided)
	return admitted, decided, want, light
}

// lightCalls counts lightUsers' calls.
type lightCalls struct{ calls, decided, admitted int }

// lightUsers has each of the n nodes call each of keys keys of the light
// rule once, in a shuffled order, 50 calls a second in all: each key is
// offered a sixth of its rate, and each call is its node's first contact
// with the key.
func lightUsers(p *Procs, n, keys int) (c lightCalls) {
	order := rand.New(rand.NewPCG(1, 2)).Perm(n * keys)
	pace := time.NewTicker(20 * time.Millisecond)
	defer pace.Stop()
	for _, call := range order {
		<-pace.C
		d := p.Allow(call%n, "light", "user-"+strconv.Itoa(call/n), 1)
		c.calls++
		if !d.FailedOpen {
			c.decided++
			if d.Allowed {
				c.admitted++
			}
		}
	}
	return c
}

// allHeard reports whether every one of the n nodes' balances of the warm
// key shows the n tokens taken before the deadline.
func allHeard(p *Procs, n int, key string, deadline time.Time) bool {
	poll := time.NewTicker(20 * time.Millisecond)
	defer poll.Stop()
	for i := 0; i < n; {
		if b, ok := p.Balance(i, "warm", key); ok && b <= 1000-float64(n)+0.5 {
			i++
			continue
		}
		if time.Now().After(deadline) {
			return false
		}
		<-poll.C
	}
	return true
}
