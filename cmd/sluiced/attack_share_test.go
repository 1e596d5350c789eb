package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicelabs/sluice/clientlib"
	"github.com/sluicelabs/sluice/daemon/adminapi"
)

// Issue 20, with real processes on loopback: a key new to the cluster is
// not admitted a burst on every node (first contact), and even demand is
// shared evenly (fairness). SLUICE_SHARE_BINARY names another sluiced to
// run instead of the one TestMain built (to measure an older build with
// the same scenario), SLUICE_SHARE_MIXED one that every other node runs (a
// rolling upgrade); the assertions are for this build.

// shareNode is one sluiced of a share cluster.
type shareNode struct {
	name, admin string
	c           *clientlib.Client
	p           *proc
	cmd         []string // the binary and its arguments, to start it again
}

// shareCluster starts n keyed sluiced on loopback gossiping every
// interval, the first a seed the others join, and waits until every one
// sees all n alive.
func shareCluster(t *testing.T, n int, interval time.Duration) []*shareNode {
	t.Helper()
	bin := binary
	if b := os.Getenv("SLUICE_SHARE_BINARY"); b != "" {
		bin = b
	}
	dir := tempDir(t)
	rules := filepath.Join(dir, "rules.yaml")
	if err := os.WriteFile(rules, []byte("rules:\n  api:\n    rate: 100/1s\n    burst: 100\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	key := secureKeyFile(t, dir, secureKey)
	seed := ""
	var nodes []*shareNode
	for i := range n {
		sn := &shareNode{name: fmt.Sprintf("s%d", i), admin: "127.0.0.1:" + freePort(t)}
		sock := filepath.Join(dir, sn.name+".sock")
		gossip := "127.0.0.1:" + freePort(t)
		args := []string{"--socket", sock, "--rules", rules, "--no-watch", "--node-name", sn.name, "--bind", gossip,
			"--gossip-key-file", key, "--gossip-interval", interval.String(), "--admin-addr", sn.admin, "--log-level", "warn"}
		if seed != "" {
			args = append(args, "--join", seed)
		} else {
			seed = gossip
		}
		nodeBin := bin
		if mixed := os.Getenv("SLUICE_SHARE_MIXED"); mixed != "" && i%2 == 1 {
			nodeBin = mixed // a rolling upgrade: every other node runs that build
		}
		sn.cmd = append([]string{nodeBin}, args...)
		sn.p = startProc(t, startProcBinary(nodeBin, args...))
		eventually(t, sn.name+" serves", func() bool {
			c, err := clientlib.Dial(context.Background(), clientlib.Options{SocketPath: sock, Timeout: 5 * time.Second})
			if err != nil {
				return false
			}
			sn.c = c
			return true
		})
		t.Cleanup(func() { sn.c.Close() })
		nodes = append(nodes, sn)
	}
	for _, sn := range nodes {
		eventually(t, fmt.Sprintf("%s sees %d members alive", sn.name, n), func() bool { return sn.alive() == n })
	}
	return nodes
}

// startProcBinary is the command startDaemon runs, for another binary.
func startProcBinary(bin string, args ...string) *exec.Cmd {
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), "SLUICE_ADMIN_ADDR=")
	return cmd
}

// alive is how many members the node sees alive, -1 when it does not answer.
func (sn *shareNode) alive() int {
	cl := http.Client{Timeout: 5 * time.Second}
	resp, err := cl.Get("http://" + sn.admin + "/v1/members")
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return aliveIn(b)
}

// aliveIn counts the alive members in an admin /v1/members answer, -1 if
// it is not one.
func aliveIn(body []byte) int {
	var m adminapi.MembersView
	if json.Unmarshal(body, &m) != nil {
		return -1
	}
	alive := 0
	for _, mv := range m.Members {
		if mv.State == "alive" {
			alive++
		}
	}
	return alive
}

// shareRun is what shareDrive saw, per node: what each admitted in each
// second (by the time each call was made, from a common start), what each
// offered in all, what each offered in each second of the paced load, and
// the slowest answer its daemon gave and the calls it did not decide (the
// client failed them open) in each second of the paced load
// (attack_sharestall_test.go).
type shareRun struct {
	admitted   [][]int
	offered    []int
	offeredSec [][]int
	slowest    [][]time.Duration
	failedOpen [][]int // calls of the paced load the daemon did not decide
}

// shareDrive offers, on every node and one key, initial requests at once
// (from several callers) and then perNode requests per second at random, for secs
// seconds, and returns what happened (shareRun).
func shareDrive(nodes []*shareNode, key string, initial, perNode, secs int) shareRun {
	admitted := make([][]int, len(nodes))
	offered := make([]int, len(nodes))
	offeredSec := make([][]int, len(nodes))
	slowest := make([][]time.Duration, len(nodes))
	failedOpen := make([][]int, len(nodes))
	start := time.Now()
	var wg sync.WaitGroup
	var mu sync.Mutex
	const callers = 8
	for i, sn := range nodes {
		admitted[i] = make([]int, secs)
		offeredSec[i] = make([]int, secs)
		slowest[i] = make([]time.Duration, secs)
		failedOpen[i] = make([]int, secs)
		for range callers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range initial / callers {
					d := sn.c.Allow(context.Background(), "api", key)
					mu.Lock()
					offered[i]++
					if d.Allowed && !d.FailedOpen {
						admitted[i][min(secs-1, int(time.Since(start)/time.Second))]++
					}
					mu.Unlock()
				}
			}()
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Calls arrive at random (exponential gaps), as independent
			// clients' do: calls paced on a fixed ticker lock into phase with
			// the refill, and the node whose ticks fall just after each token
			// arrives wins it (see the notes of issue 20).
			rnd := rand.New(rand.NewPCG(uint64(i), 20))
			next := time.NewTimer(0)
			defer next.Stop()
			for range 2 * perNode * secs {
				<-next.C
				next.Reset(time.Duration(rnd.ExpFloat64() * float64(time.Second) / float64(perNode)))
				at := time.Since(start)
				if at >= time.Duration(secs)*time.Second {
					return
				}
				d := sn.c.Allow(context.Background(), "api", key)
				took := time.Since(start) - at
				mu.Lock()
				offered[i]++
				offeredSec[i][int(at/time.Second)]++
				slowest[i][int(at/time.Second)] = max(slowest[i][int(at/time.Second)], took)
				if d.FailedOpen {
					failedOpen[i][int(at/time.Second)]++
				}
				if d.Allowed && !d.FailedOpen {
					admitted[i][int(at/time.Second)]++
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return shareRun{admitted: admitted, offered: offered, offeredSec: offeredSec, slowest: slowest, failedOpen: failedOpen}
}

// shareReport logs the run in issue 20's terms: admitted against burst +
// rate × T over the first 1, 5 and 10 s, and each node's share of every 2 s
// window against 1/N. It returns the first second's total, and the worst
// share's distance from 1/N and the least share, as fractions of 1/N, over
// the windows after the first (which holds first contact) that unasserted,
// when given, has no reason to leave out (see shareRun.unasserted).
func shareReport(t *testing.T, admitted [][]int, unasserted func(w int) string) (first int, worst, least float64) {
	t.Helper()
	n, secs := len(admitted), len(admitted[0])
	least = 1
	total := func(upTo int) int {
		s := 0
		for i := range n {
			for j := range upTo {
				s += admitted[i][j]
			}
		}
		return s
	}
	var b strings.Builder
	for _, T := range []int{1, 5, 10} {
		if T <= secs {
			fmt.Fprintf(&b, "  first %2ds: admitted %5d, burst + rate×T %5d (%.0f%%)\n", T, total(T), 100+100*T, 100*float64(total(T))/float64(100+100*T))
		}
	}
	for w := 0; w+2 <= secs; w += 2 {
		all := total(w+2) - total(w)
		why := ""
		if unasserted != nil {
			why = unasserted(w)
		}
		fmt.Fprintf(&b, "  window %2d-%2ds:", w, w+2)
		for i := range n {
			own := admitted[i][w] + admitted[i][w+1]
			share := float64(own) / float64(max(all, 1)) * float64(n)
			if w > 0 && why == "" { // the first window holds first contact
				worst, least = max(worst, abs(share-1)), min(least, share)
			}
			fmt.Fprintf(&b, " %.2f", share)
		}
		if why != "" {
			fmt.Fprintf(&b, " (share × N; %s, not asserted)\n", why)
			continue
		}
		b.WriteString(" (share × N)\n")
	}
	t.Logf("%d nodes:\n%s", n, b.String())
	return total(1), worst, least
}

func abs(x float64) float64 {
	if x < 0 {
		return -x
	}
	return x
}

// A key new to the cluster, hit on every node at once (160 calls from 8
// callers, then twice the limit each), is admitted about one burst plus what the cluster admits in one
// propagation delay in the first second, not a burst per node; over 5 s
// the cluster holds burst + rate × T (within 10%). The load runs those 5 s
// and no longer: nothing after them is asserted.
func TestProcsFirstContactIsAboutOneBurst(t *testing.T) {
	for _, n := range []int{3, 10} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			nodes := shareCluster(t, n, 200*time.Millisecond)
			admitted := shareDrive(nodes, "fresh", 160, 200, 5).admitted
			first, _, _ := shareReport(t, admitted, nil)
			// One burst, the rate for the second, and the cluster's rate for
			// one propagation delay (two 200 ms intervals and the network).
			bound := 100 + 100 + float64(n)*100*0.45
			if float64(first) > bound {
				t.Errorf("first second: %d admitted, want at most %.0f (one burst, the rate, and the cluster's rate for one propagation delay)", first, bound)
			}
			five := 0
			for _, a := range admitted {
				for _, v := range a[:5] {
					five += v
				}
			}
			if float64(five) > 1.10*(100+100*5) {
				t.Errorf("first 5 s: %d admitted, want within 10%% of burst + rate × 5 s = 600", five)
			}
		})
	}
}

// Even demand on three and ten nodes is shared: each node's admitted share of every
// 2 s window after the first is within 25% of 1/N (issue 20: two nodes
// refused everything for about 13 s while the third admitted everything).
// A window in which the loaded machine stalled some nodes' callers (one
// offered less than 80% of the busiest) or some daemons (an answer later
// than stalledAnswer) is logged, not asserted; a run with fewer than
// minAssertedWindows asserted windows is run again once on a fresh key, and
// fails if the second is no better (attack_sharestall_test.go).
func TestProcsEvenDemandIsShared(t *testing.T) {
	for _, n := range []int{3, 10} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			nodes := shareCluster(t, n, 20*time.Millisecond)
			for attempt := 1; ; attempt++ {
				run := shareDrive(nodes, fmt.Sprintf("even-%d", attempt), 0, 200, 10)
				t.Logf("offered per node: %v; slowest answer per 2 s window: %v", run.offered, run.slowestPerWindow())
				_, worst, least := shareReport(t, run.admitted, run.unasserted)
				if worst > 0.25 {
					t.Errorf("a node's share of a 2 s window was %.0f%% off 1/N, want within 25%%", 100*worst)
				}
				if least < 0.5 {
					t.Errorf("a node's share of a 2 s window was %.2f of 1/N: it starved", least)
				}
				asserted := run.assertedWindows()
				if t.Failed() {
					t.Logf("balances of %q now: %v", fmt.Sprintf("even-%d", attempt), shareBalances(nodes, fmt.Sprintf("even-%d", attempt)))
					return
				}
				if asserted >= minAssertedWindows {
					return
				}
				if attempt == 2 {
					t.Fatalf("%d of %d windows asserted in each of two runs (want at least %d): the machine starved the callers or daemons, fairness not measured",
						asserted, run.windows(), minAssertedWindows)
				}
				t.Logf("%d of %d windows asserted (want at least %d): running again once on a fresh key", asserted, run.windows(), minAssertedWindows)
			}
		})
	}
}

// restart kills the node (SIGKILL: no leave) and starts it again at once
// with the same name, address and flags.
func (sn *shareNode) restart(t *testing.T) {
	t.Helper()
	sn.p.cmd.Process.Kill()
	err := <-sn.p.exited
	sn.p.exited <- err // for the cleanup
	sn.p = startProc(t, startProcBinary(sn.cmd[0], sn.cmd[1:]...))
}

// A seed restarted under its name before its peers declared it dead (no
// --join: it knows nobody) learns the cluster from the first counters its
// peers send it, and the cluster holds burst + rate × T over 20 s of even
// load with the restart at 5 s (issue 20: the seed sent none of its
// counters for 4-12 s and handed out a fresh burst nobody charged, +4.5%).
func TestProcsRestartedSeedRejoinsAtOnce(t *testing.T) {
	nodes := shareCluster(t, 3, 20*time.Millisecond)
	type result struct {
		admitted [][]int
		offered  []int
	}
	done := make(chan result, 1)
	go func() {
		r := shareDrive(nodes, "restart", 0, 150, 20)
		done <- result{r.admitted, r.offered}
	}()
	at := time.NewTimer(5 * time.Second) // pacing the scenario, not waiting for an outcome
	<-at.C
	nodes[0].restart(t)
	restarted := time.Now()
	var rejoined time.Duration
	netnsWithin(t, 14*time.Second, "the restarted seed sees three members", func() bool {
		if nodes[0].alive() == 3 {
			rejoined = time.Since(restarted)
			return true
		}
		return false
	})
	r := <-done
	admitted, offered := r.admitted, r.offered
	total := 0
	for _, a := range admitted {
		for _, v := range a {
			total += v
		}
	}
	want := 100.0 + 100*20
	t.Logf("offered %v; admitted %d over 20 s against burst + rate × T = %.0f (%.1f%%); the seed saw all members %s after its restart",
		offered, total, want, 100*float64(total)/want, rejoined.Round(time.Millisecond))
	shareReport(t, admitted, nil)
	if float64(total) > 1.03*want {
		t.Errorf("admitted %d, want within 3%% of %.0f", total, want)
	}
}
