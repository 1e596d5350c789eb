package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sluicelabs/sluice/clientlib"
	"github.com/sluicelabs/sluice/daemon/adminapi"
	"github.com/sluicelabs/sluice/gossip"
)

// Issue 20's goal 4 (churn, a node or an owner lost) and goal 3
// (convergence), with real sluiced processes on loopback: nodes replaced
// while keys are saturated, what a node admitted just before it died, and
// how long a consumption takes to show on every node that holds the key.
// The daemons are keyed, gossip every 20 ms unless a test says otherwise,
// and run either --gossip-mode owner or the default (auto: direct fan-out
// at these sizes).

// churnRules: api is the limit (100/s, burst 100); ledger refills
// so little (10 an hour) and holds so much that its balance is a count of
// every token taken, cluster-wide, for the length of a test.
const churnRules = "rules:\n  api:\n    rate: 100/1s\n    burst: 100\n  ledger:\n    rate: 10/1h\n    burst: 100000\n"

// ledgerBurst is the ledger rule's burst.
const ledgerBurst = 100000

// churnModes are the gossip modes the churn tests run: owner mode and the
// default.
var churnModes = []string{gossip.ModeOwner, gossip.ModeAuto}

// churnNode is one sluiced of a churn cluster.
type churnNode struct {
	name, admin, gossip, sock string
	p                         *proc
	c                         *clientlib.Client
	http                      *http.Client
}

// churnCluster is a keyed cluster on loopback whose members come and go:
// slot i holds the node now serving the i-th share of the load; a replaced
// node's slot gets a new process under a new name.
type churnCluster struct {
	t                   *testing.T
	dir, rules, keyFile string
	mode                string
	interval            time.Duration
	serial              int // names the next node: c<serial>
	slots               []atomic.Pointer[churnNode]
}

// startChurnCluster starts n keyed sluiced gossiping every interval in
// mode, the first a seed the others join, and waits until every one sees n
// members alive.
func startChurnCluster(t *testing.T, n int, mode string, interval time.Duration) *churnCluster {
	t.Helper()
	useShareBinary(t)
	c := &churnCluster{t: t, dir: tempDir(t), mode: mode, interval: interval, slots: make([]atomic.Pointer[churnNode], n)}
	c.rules = filepath.Join(c.dir, "rules.yaml")
	if err := os.WriteFile(c.rules, []byte(churnRules), 0o600); err != nil {
		t.Fatal(err)
	}
	c.keyFile = secureKeyFile(t, c.dir, secureKey)
	join := ""
	for i := range n {
		nd := c.start(join)
		if i == 0 {
			join = nd.gossip
		}
		c.slots[i].Store(nd)
	}
	c.waitMembers(30 * time.Second)
	return c
}

// start starts a node under a new name, joining join ("" for none), and
// waits until it serves its socket and admin endpoint.
func (c *churnCluster) start(join string) *churnNode {
	t := c.t
	t.Helper()
	nd := &churnNode{name: fmt.Sprintf("c%d", c.serial), admin: "127.0.0.1:" + freePort(t), gossip: "127.0.0.1:" + freePort(t),
		http: &http.Client{Timeout: 5 * time.Second}}
	c.serial++
	nd.sock = filepath.Join(c.dir, nd.name+".sock")
	args := []string{"--socket", nd.sock, "--rules", c.rules, "--no-watch", "--node-name", nd.name, "--bind", nd.gossip,
		"--gossip-key-file", c.keyFile, "--gossip-interval", c.interval.String(), "--gossip-mode", c.mode,
		"--admin-addr", nd.admin, "--log-level", "warn"}
	if join != "" {
		args = append(args, "--join", join)
	}
	nd.p = startDaemon(t, args...)
	netnsWithin(t, 30*time.Second, nd.name+" serves its socket and admin endpoint", func() bool {
		select {
		case err := <-nd.p.exited:
			nd.p.exited <- err
			t.Fatalf("%s exited (%v): %s", nd.name, err, tail(nd.p.stderr.String(), 3000))
		default:
		}
		if nd.c == nil {
			cl, err := clientlib.Dial(context.Background(), clientlib.Options{SocketPath: nd.sock, Timeout: 2 * time.Second,
				Log: func(string, ...any) {}}) // its node is killed on purpose
			if err != nil {
				return false
			}
			nd.c = cl
		}
		return nd.members() != nil
	})
	t.Cleanup(func() { nd.c.Close() })
	return nd
}

// node is the node now in slot i.
func (c *churnCluster) node(i int) *churnNode { return c.slots[i].Load() }

// names are the current nodes' names.
func (c *churnCluster) names() []string {
	var out []string
	for i := range c.slots {
		out = append(out, c.node(i).name)
	}
	return out
}

// waitMembers waits until every current node counts exactly the current
// nodes as its members alive or suspect (a node killed is declared dead,
// one stopped has left, and every new one has joined everyone).
func (c *churnCluster) waitMembers(within time.Duration) {
	c.t.Helper()
	want := c.names()
	slices.Sort(want)
	for i := range c.slots {
		nd := c.node(i)
		netnsWithin(c.t, within, fmt.Sprintf("%s sees exactly %v", nd.name, want), func() bool {
			return slices.Equal(nd.members(), want)
		})
	}
}

// members are the names the node counts as members (alive or suspect),
// sorted; nil when its admin endpoint does not answer.
func (nd *churnNode) members() []string {
	resp, err := nd.http.Get("http://" + nd.admin + "/v1/members")
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	var m adminapi.MembersView
	if json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&m) != nil {
		return nil
	}
	out := []string{}
	for _, mv := range m.Members {
		if mv.State == "alive" || mv.State == "suspect" {
			out = append(out, mv.Name)
		}
	}
	slices.Sort(out)
	return out
}

// balance is the node's balance of (rule, key) from its admin endpoint;
// ok is false when it did not answer.
func (nd *churnNode) balance(rule, key string) (float64, bool) {
	resp, err := nd.http.Get("http://" + nd.admin + "/v1/keys/" + rule + "/" + key)
	if err != nil {
		return 0, false
	}
	defer resp.Body.Close()
	var v adminapi.KeyView
	if resp.StatusCode != 200 || json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&v) != nil {
		return 0, false
	}
	return v.Balance, true
}

// stop ends the node: kill -9 (no leave, nothing flushed) or, if clean,
// SIGTERM and its exit (it leaves the cluster).
func (nd *churnNode) stop(t *testing.T, clean bool) {
	t.Helper()
	if !clean {
		nd.p.cmd.Process.Kill()
		err := <-nd.p.exited
		nd.p.exited <- err // for the cleanup
		return
	}
	nd.p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-nd.p.exited:
		nd.p.exited <- err
	case <-time.After(20 * time.Second):
		t.Fatalf("%s did not exit within 20 s of SIGTERM: %s", nd.name, tail(nd.p.stderr.String(), 3000))
	}
}

// replace ends slot i's node (see stop) and starts a new one under a new
// name in its place, joining the next slot's node.
func (c *churnCluster) replace(i int, clean bool) {
	c.t.Helper()
	old := c.node(i)
	old.stop(c.t, clean)
	nd := c.start(c.node((i + 1) % len(c.slots)).gossip)
	c.slots[i].Store(nd)
	old.c.Close()
}

// churnDrive offers each of keys perKey requests a second (rule api),
// spread evenly over the slots and arriving at random, for d, to whichever
// node each slot holds at the moment, and returns what was admitted per key
// and second (decided by a daemon: a call failing open while its slot's
// node is away is not counted) and how many calls were made.
func churnDrive(c *churnCluster, keys []string, perKey int, d time.Duration) (admitted [][]int, offered int) {
	secs := int((d + time.Second - 1) / time.Second)
	admitted = make([][]int, len(keys))
	for k := range keys {
		admitted[k] = make([]int, secs)
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	start := time.Now()
	per := float64(perKey) / float64(len(c.slots))
	for k, key := range keys {
		for i := range c.slots {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rnd := rand.New(rand.NewPCG(uint64(i), uint64(k)))
				next := time.NewTimer(0)
				defer next.Stop()
				for range 2 * int(per*d.Seconds()+10) {
					<-next.C
					next.Reset(time.Duration(rnd.ExpFloat64() * float64(time.Second) / per))
					at := time.Since(start)
					if at >= d {
						return
					}
					dec := c.node(i).c.Allow(context.Background(), "api", key)
					mu.Lock()
					offered++
					if dec.Allowed && !dec.FailedOpen {
						admitted[k][int(at/time.Second)]++
					}
					mu.Unlock()
				}
			}()
		}
	}
	wg.Wait()
	return admitted, offered
}

// churnKeys picks the churn test's three keys from the replacements it
// plans (replacement r kills slot r mod n and starts c<n+r> in its place):
// one whose owner is never a node started during the run, and two that
// move to one such node, and returns how often each does.
func churnKeys(t *testing.T, n, replacements int) (keys []string, moves []int) {
	t.Helper()
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprint("c", i)
	}
	count := func(key string) int {
		now := slices.Clone(names)
		owner, _ := gossip.RingOwners(now, "api", key)
		moved := 0
		for r := range replacements {
			now[r%n] = fmt.Sprint("c", n+r)
			next, _ := gossip.RingOwners(now, "api", key)
			if serial, _ := strconv.Atoi(next[1:]); next != owner && serial >= n {
				moved++
			}
			owner = next
		}
		return moved
	}
	for j := 0; j < 1000 && len(keys) < 3; j++ {
		key := fmt.Sprint("churn-", j)
		m := count(key)
		if (len(keys) == 0 && m == 0) || (len(keys) > 0 && m == 1) {
			keys, moves = append(keys, key), append(moves, m)
		}
	}
	if len(keys) < 3 {
		t.Fatalf("no keys fit the churn plan: %v", keys)
	}
	return keys, moves
}

// churnOwners are the owners of keys (rule api) on the ring of names.
func churnOwners(names, keys []string) []string {
	out := make([]string, len(keys))
	for k, key := range keys {
		out[k], _ = gossip.RingOwners(names, "api", key)
	}
	return out
}

// churnNodes is the churn tests' cluster size: 10, or SLUICE_CHURN_NODES.
func churnNodes(t *testing.T) int {
	if v := os.Getenv("SLUICE_CHURN_NODES"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 4 {
			t.Fatalf("SLUICE_CHURN_NODES=%q: want a number of at least 4", v)
		}
		return n
	}
	return 10
}

// Goal 4's churn, far faster than the goal's 1% of nodes a minute: in a
// cluster of 10 under saturating load on three keys (twice the limit each,
// spread over the nodes), one node is replaced every 1.5 s (killed -9 or
// stopped cleanly, in turn; a new process under a new name joins in its
// place and takes its share of the load) for 15 s: 9 of 10 nodes in 15 s,
// 360% of the cluster a minute. Every key is held within 5% of burst +
// rate × T in both modes: in owner mode, the key whose owner is never a new
// node and the two handed once to a new node (churnKeys) alike. Before a
// new owner learnt the key's debt from its contributors
// (gossip/ownerlearn.go), a key handed to a node that never used it cost
// up to one burst: 100.1-106.7% of the limit.
func TestProcsChurnKeepsTheLimit(t *testing.T) {
	for _, mode := range churnModes {
		t.Run(mode, func(t *testing.T) {
			n := churnNodes(t)
			c := startChurnCluster(t, n, mode, 20*time.Millisecond)
			const run, every = 15 * time.Second, 1500 * time.Millisecond
			keys, moves := churnKeys(t, n, int(run/every)-1)
			type result struct {
				admitted [][]int
				offered  int
			}
			done := make(chan result, 1)
			start, stalls := time.Now(), stallWatch()
			go func() {
				a, o := churnDrive(c, keys, 200, run)
				done <- result{a, o}
			}()
			replaced := 0
			var kinds []string
			pace := time.NewTicker(every) // pacing the churn, not waiting for an outcome
			for time.Since(start)+every < run {
				<-pace.C
				clean := replaced%2 == 1
				i := replaced % n
				old := c.node(i).name
				before := churnOwners(c.names(), keys)
				c.replace(i, clean)
				at := time.Since(start).Seconds()
				moved := ""
				for k, owner := range churnOwners(c.names(), keys) {
					if owner != before[k] {
						moved += fmt.Sprintf(" %s:%s→%s", keys[k], before[k], owner)
					}
				}
				kinds = append(kinds, fmt.Sprintf("%.1fs %s→%s%s%s", at, old, c.node(i).name, map[bool]string{true: " (clean)", false: " (-9)"}[clean], moved))
				replaced++
			}
			pace.Stop()
			r := <-done
			stalled := stalls()
			elapsed := time.Since(start).Seconds()
			want := 100 + 100*run.Seconds()
			t.Logf("%s, %d nodes, %d replaced in %.0f s (%.0f%% of the cluster a minute): %v", mode, n, replaced, run.Seconds(),
				100*float64(replaced)/float64(n)*60/run.Seconds(), kinds)
			t.Logf("offered %d calls over %.1f s; the test process went unscheduled for %s at worst", r.offered, elapsed, stalled.Round(time.Millisecond))
			got := make([]int, len(keys))
			for k, key := range keys {
				for _, v := range r.admitted[k] {
					got[k] += v
				}
				t.Logf("%s: admitted %d, burst + rate × T = %.0f (%.1f%%); per second %v", key, got[k], want, 100*float64(got[k])/want, r.admitted[k])
			}
			skipIfStarved(t, r.offered, 200*len(keys)*int(run/time.Second))
			skipIfStalled(t, stalled)
			for k, key := range keys {
				if math.Abs(float64(got[k])-want) > 0.05*want {
					t.Errorf("%s: admitted %d, want %.0f ± 5%% (%d moves to a new node)", key, got[k], want, moves[k])
				}
			}
		})
	}
}

// outliveCase is one failure of TestProcsConsumptionOutlivesItsNode.
type outliveCase struct {
	name   string
	owner  bool          // the key's owner fails, not the node that took the tokens
	clean  bool          // SIGTERM, not kill -9
	after  time.Duration // from the tokens taken to the failure
	mayDie bool          // the tokens may be lost for good: taken in the holder's last gossip interval before a kill -9
}

// outliveRepair bounds how late a survivor may show a consumption after a
// failure: one repair round (owner mode's failover to the replica after 16
// unanswered intervals, 320 ms, and its answer; measured 0.2-0.5 s) with a
// loaded machine's margin, and below memberlist's failure detection
// (about 5 s), so the repair measured is the syncer's, not a new ring.
const outliveRepair = 3 * time.Second

// outliveTokens is how many tokens the holder takes before a failure.
const outliveTokens = 5

// Goal 4's "no consumption is lost for longer than one repair round",
// measured: in a cluster of 7, every node holds a key (one token each);
// then one node (the holder) takes 5 tokens and a node fails — the holder
// itself or the key's owner, by kill -9 or SIGTERM, at once or 300 ms
// later — and each survivor takes one more token (holders keep using the
// key: in owner mode a node hears of a key only while it uses it). The
// figure is, from the failure, how long until every survivor's balance
// shows every token taken cluster-wide (the ledger rule refills nothing
// worth counting), and how many tokens never show within 10 s (lost for
// good). Only a kill -9 of the holder within a gossip interval of its
// admissions may lose them (they never left the process: at most what one
// node admits in one interval); nothing else may be lost, and what is
// shown late shows within one repair round (owner mode: the 16-interval
// failover to the key's replica and its answer).
func TestProcsConsumptionOutlivesItsNode(t *testing.T) {
	cases := []outliveCase{
		{name: "holder killed at once", mayDie: true},
		{name: "holder killed after 300ms", after: 300 * time.Millisecond}, // 15 intervals: sent, even on a loaded machine
		{name: "holder stopped at once", clean: true},
		{name: "owner killed at once", owner: true},
		{name: "owner stopped at once", owner: true, clean: true},
	}
	const n, iv = 7, 20 * time.Millisecond
	for _, mode := range churnModes {
		t.Run(mode, func(t *testing.T) {
			c := startChurnCluster(t, n, mode, iv)
			gone := map[string]bool{} // nodes failed so far (a killed one may still be a member for seconds)
			for ci, cs := range cases {
				var live []*churnNode
				for i := range c.slots {
					if nd := c.node(i); !gone[nd.name] {
						live = append(live, nd)
					}
				}
				key, owner, replica := outliveKey(c, gone, ci)
				// Every live node holds the key.
				taken := 0
				for _, nd := range live {
					if d := nd.c.Allow(context.Background(), "ledger", key); !d.Allowed || d.FailedOpen {
						t.Fatalf("%s: %s refused or failed open on the ledger: %+v", cs.name, nd.name, d)
					}
					taken++
				}
				for _, nd := range live {
					netnsWithin(t, 15*time.Second, fmt.Sprintf("%s: %s shows every node's first token", cs.name, nd.name), func() bool {
						b, ok := nd.balance("ledger", key)
						return ok && b <= ledgerBurst-float64(taken)+0.5
					})
				}
				var holder, victim *churnNode
				for _, nd := range live {
					if holder == nil && nd.name != owner && nd.name != replica {
						holder = nd
					}
					if nd.name == owner {
						victim = nd
					}
				}
				if !cs.owner {
					victim = holder
				}
				for range outliveTokens {
					if d := holder.c.Allow(context.Background(), "ledger", key); !d.Allowed || d.FailedOpen {
						t.Fatalf("%s: holder %s refused: %+v", cs.name, holder.name, d)
					}
					taken++
				}
				if cs.after > 0 {
					pace := time.NewTimer(cs.after) // the scenario's timing, not waiting for an outcome
					<-pace.C
				}
				victim.stop(t, cs.clean)
				failed := time.Now()
				gone[victim.name] = true
				var survivors []*churnNode
				for _, nd := range live {
					if nd != victim {
						survivors = append(survivors, nd)
						if d := nd.c.Allow(context.Background(), "ledger", key); !d.Allowed || d.FailedOpen {
							t.Fatalf("%s: survivor %s refused: %+v", cs.name, nd.name, d)
						}
						taken++
					}
				}
				within := 10 * time.Second
				if cs.mayDie {
					within = 3 * time.Second // what never left the holder will not show later
				}
				lags, missing := outliveWait(survivors, key, taken, failed, within)
				worst, lost := slices.Max(lags), slices.Max(missing)
				t.Logf("%s, %s: holder %s, owner %s, replica %s, failed %s: every survivor showed every token %s after the failure (%.1f intervals; per survivor %v); tokens never shown: %v",
					mode, cs.name, holder.name, owner, replica, victim.name, worst.Round(time.Millisecond), float64(worst)/float64(iv), roundAll(lags), missing)
				switch {
				case lost > outliveTokens:
					t.Errorf("%s: %d tokens never showed on a survivor: more than the holder's %d", cs.name, lost, outliveTokens)
				case lost > 0 && !cs.mayDie:
					t.Errorf("%s: %d tokens never showed on a survivor within 10 s: consumption lost", cs.name, lost)
				case !cs.mayDie && worst > outliveRepair:
					t.Errorf("%s: the survivors showed every token %s after the failure, want within %s (one repair round: owner mode fails over after 16 intervals)",
						cs.name, worst.Round(time.Millisecond), outliveRepair)
				}
			}
		})
	}
}

// outliveKey picks the ci-th case's ledger key: one whose owner and replica
// are live nodes, and the same on the ring of the live nodes and on the
// ring that still counts the nodes failed before (a node killed -9 stays a
// member until memberlist declares it dead, seconds later), so that the
// case's key does not change hands during it. It returns the key, its
// owner and its replica.
func outliveKey(c *churnCluster, gone map[string]bool, ci int) (key, owner, replica string) {
	c.t.Helper()
	all := c.names()
	for name := range gone {
		if !slices.Contains(all, name) {
			all = append(all, name)
		}
	}
	live := slices.DeleteFunc(slices.Clone(all), func(name string) bool { return gone[name] })
	for j := range 1000 {
		key = fmt.Sprintf("outlive-%d-%d", ci, j)
		owner, replica = gossip.RingOwners(live, "ledger", key)
		if o, r := gossip.RingOwners(all, "ledger", key); o == owner && r == replica {
			return key, owner, replica
		}
	}
	c.t.Fatalf("no key whose owner and replica are the same with and without %v", gone)
	return "", "", ""
}

// outliveWait polls every node's balance of (ledger, key) until it shows
// taken tokens, for at most within, and returns for each how long after
// since it did (within when it never did) and how many tokens it still
// did not show at the end.
func outliveWait(nodes []*churnNode, key string, taken int, since time.Time, within time.Duration) (lags []time.Duration, missing []int) {
	lags, missing = make([]time.Duration, len(nodes)), make([]int, len(nodes))
	want := ledgerBurst - float64(taken)
	var wg sync.WaitGroup
	for i, nd := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			poll := time.NewTicker(2 * time.Millisecond)
			defer poll.Stop()
			b := math.Inf(1)
			for time.Since(since) < within {
				if v, ok := nd.balance("ledger", key); ok {
					b = v
					if b <= want+0.5 {
						lags[i] = time.Since(since)
						return
					}
				}
				<-poll.C
			}
			lags[i], missing[i] = within, int(math.Round(b-want))
		}()
	}
	wg.Wait()
	return lags, missing
}

// roundAll rounds durations to the millisecond, for logs.
func roundAll(ds []time.Duration) []time.Duration {
	out := make([]time.Duration, len(ds))
	for i, d := range ds {
		out[i] = d.Round(time.Millisecond)
	}
	return out
}

// Goal 3 with real processes: in owner mode, once every node holds a key
// (used it within the last second or so: a node hears of a key every
// interval it changes only while it used it within 2 s, then once a second
// until 10 s), a token taken on any node shows on every other within about
// two gossip intervals (one to the owner, one for its answer) plus the
// round trips and the time a loaded machine takes to run the processes.
// The p99 over 100 probes is asserted within 8 intervals (a loaded
// machine's margin); the figures are logged. 10 nodes (SLUICE_CHURN_NODES for more), 50 ms interval (each
// node's balance is read from its admin endpoint every 2 ms, 4% of an
// interval).
func TestProcsOwnerModeConverges(t *testing.T) {
	const iv = 50 * time.Millisecond
	n := churnNodes(t)
	c := startChurnCluster(t, n, gossip.ModeOwner, iv)
	const probes, perKey = 100, 5
	var lags []float64
	var since time.Time
	stalls := stallWatch()
	lastSeen := ""
	t.Cleanup(func() {
		if t.Failed() {
			t.Log(lastSeen)
		}
	})
	for p := range probes {
		key := fmt.Sprint("conv-", p/perKey) // a new key every few probes: every node used it within a second or so
		taken := float64(p%perKey + n)
		if p%perKey == 0 {
			for i := range n { // every node holds the key
				c.node(i).c.Allow(context.Background(), "ledger", key)
			}
			since = time.Now()
			for i := range n {
				nd := c.node(i)
				netnsWithin(t, 15*time.Second, nd.name+" shows every node's first token", func() bool {
					b, ok := nd.balance("ledger", key)
					lastSeen = fmt.Sprintf("%s's last balance of %s: %.3f, %.3f of %.0f tokens shown", nd.name, key, b, ledgerBurst-b, taken)
					return ok && b <= ledgerBurst-taken+0.5
				})
			}
		}
		from := c.node(p % n)
		if d := from.c.Allow(context.Background(), "ledger", key); !d.Allowed || d.FailedOpen {
			t.Fatalf("probe %d on %s: %+v", p, from.name, d)
		}
		took := time.Now()
		var others []*churnNode
		for i := range n {
			if i != p%n {
				others = append(others, c.node(i))
			}
		}
		lag, missing := outliveWait(others, key, int(taken)+1, took, 10*time.Second)
		if slices.Max(missing) > 0 {
			t.Fatalf("probe %d from %s never showed everywhere within 10 s: missing %v", p, from.name, missing)
		}
		lags = append(lags, float64(slices.Max(lag))/float64(iv))
	}
	stalled := stalls()
	slices.Sort(lags)
	p50, p99 := lags[len(lags)/2], lags[(len(lags)*99+99)/100-1] // nearest rank
	t.Logf("%d processes, owner mode, convergence in gossip intervals of %s over %d probes (each the last of %d nodes to show it): p50 %.2f, p99 %.2f, max %.2f (the five slowest %.2f); the last key's probes ran %s after every node used it",
		n, iv, probes, n-1, p50, p99, lags[len(lags)-1], lags[len(lags)-5:], time.Since(since).Round(time.Millisecond))
	t.Logf("the test process went unscheduled for %s at worst", stalled.Round(time.Millisecond))
	skipIfStalled(t, stalled)
	if p99 > 8 {
		t.Errorf("p99 convergence %.2f intervals; want about 2 (asserted ≤ 8)", p99)
	}
}
