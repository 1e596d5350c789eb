package main

import (
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluicelabs/sluice/daemon/adminapi"
	"github.com/sluicelabs/sluice/internal/dnstest"
	"github.com/sluicelabs/sluice/internal/netnstest"
)

// Discovery through a name, as a Kubernetes headless Service gives it:
// sluiced processes, each in a network namespace of its own (a pod), run
// with --join NAME:PORT and nothing else about their peers, and NAME is
// served by a DNS server the test runs and changes (internal/dnstest, on
// a namespace of its own at 10.213.0.1:53). Each pod's namespace has its
// own /etc/resolv.conf naming that server and an /etc/nsswitch.conf of
// "files dns", as a container image has (`ip netns exec` mounts them over
// /etc's), so sluiced's real resolvers ask it: memberlist's TCP lookup at
// join, and Go's resolver when the join list is resolved again every
// --rejoin-interval (1s here; 30s by default). Needs root, iproute2 and
// (for the partition) iptables; SLUICE_REQUIRE_NETNS=1 fails instead of
// skipping.

// dnsName is the headless Service's name in deploy/kubernetes.
const dnsName = "sluice-peers.sluice.svc.cluster.local"

// dnsRejoin is the tests' --rejoin-interval.
const dnsRejoin = time.Second

// dnsHeal bounds how long a split may take to heal once the name lists
// every pod and they can reach each other: one rejoin interval, a
// push-pull, memberlist's gossip of the new members, on a loaded machine.
const dnsHeal = 30 * time.Second

// dnsLab is a lab with the DNS server on its first host.
type dnsLab struct {
	lab    *netnstest.Lab
	dns    *dnstest.Server
	server *netnstest.Host
	dir    string
	flags  []string // the gossip key and --rejoin-interval, for every pod
}

// newDNSLab makes the lab and serves the name (NXDOMAIN until Set).
func newDNSLab(t *testing.T) *dnsLab {
	t.Helper()
	d := &dnsLab{lab: netnsLab(t), dns: dnstest.New(), dir: tempDir(t)}
	d.server = d.lab.Add()
	var pc net.PacketConn
	var l net.Listener
	if err := d.server.Do(func() error {
		var err error
		if l, err = net.Listen("tcp", net.JoinHostPort(d.server.IP, "53")); err != nil {
			return err
		}
		pc, err = net.ListenPacket("udp", net.JoinHostPort(d.server.IP, "53"))
		return err
	}); err != nil {
		t.Fatalf("listen for DNS in %s: %v", d.server.Name, err)
	}
	if err := d.dns.Serve(pc, l); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := d.dns.Close(); err != nil {
			t.Error(err)
		}
	})
	d.flags = []string{"--gossip-key-file", secureKeyFile(t, d.dir, secureKey), "--rejoin-interval", dnsRejoin.String()}
	return d
}

// pod adds a host whose resolver asks the lab's DNS server.
func (d *dnsLab) pod(t *testing.T) *netnstest.Host {
	t.Helper()
	h := d.lab.Add()
	if err := h.SetEtc("resolv.conf", []byte(dnstest.ResolvConf(netip.MustParseAddr(d.server.IP)))); err != nil {
		t.Fatal(err)
	}
	// A container's: no mDNS module between the name and DNS (the
	// machine's may send *.local names to one).
	if err := h.SetEtc("nsswitch.conf", []byte("hosts: files dns\n")); err != nil {
		t.Fatal(err)
	}
	return h
}

// start starts sluiced named name in h, joining through the name only.
func (d *dnsLab) start(t *testing.T, h *netnstest.Host, name string) *netnsNode {
	t.Helper()
	return netnsStartNode(t, h, d.dir, name, d.flags, net.JoinHostPort(dnsName, netnsGossipPort))
}

// set makes the name resolve to the hosts' addresses (none: NXDOMAIN).
func (d *dnsLab) set(hosts ...*netnstest.Host) {
	var addrs []netip.Addr
	for _, h := range hosts {
		addrs = append(addrs, netip.MustParseAddr(h.IP))
	}
	d.dns.Set(dnsName, addrs...)
}

// members is the node's view of the cluster: each alive member's name and
// address, sorted by name; nil if it does not answer.
func (n *netnsNode) members(t *testing.T) []string {
	t.Helper()
	code, body := n.get("/v1/members")
	var m adminapi.MembersView
	if code != 200 || json.Unmarshal([]byte(body), &m) != nil {
		return nil
	}
	var out []string
	for _, mv := range m.Members {
		if mv.State == "alive" {
			out = append(out, mv.Name+"@"+mv.Addr)
		}
	}
	slices.Sort(out)
	return out
}

// want is the view every node of nodes should have: all of them alive.
func wantMembers(nodes []*netnsNode) []string {
	var out []string
	for _, n := range nodes {
		out = append(out, n.name+"@"+n.gossip)
	}
	slices.Sort(out)
	return out
}

// awaitOneCluster waits (at most d) until every node sees exactly nodes
// alive, at their addresses, and returns how long that took.
func awaitOneCluster(t *testing.T, d time.Duration, what string, nodes []*netnsNode) time.Duration {
	t.Helper()
	start := time.Now()
	want := wantMembers(nodes)
	for _, n := range nodes {
		netnsWithin(t, d, fmt.Sprintf("%s: %s sees %v", what, n.name, want), func() bool {
			n.assertAlive(t, what)
			return slices.Equal(n.members(t), want)
		})
	}
	return time.Since(start)
}

// assertGossips checks the cluster is one for its limits too: a spend on
// each node reaches every other (its counters are taken from its address).
func assertGossips(t *testing.T, what string, nodes []*netnsNode) {
	t.Helper()
	key := fmt.Sprintf("dns-%d", time.Now().UnixNano())
	for i, n := range nodes {
		if got := netnsSpend(n, "slow", key, 1); got != 1 {
			t.Fatalf("%s: %s refused a fresh key", what, n.name)
		}
		for _, m := range nodes {
			heard := func() bool {
				b, _ := m.key(t, "slow", key)
				return b < 100-float64(i+1)+0.1 // this spend and the ones before
			}
			deadline := time.Now().Add(dnsHeal)
			for !heard() && time.Now().Before(deadline) {
				<-time.After(20 * time.Millisecond) // a poll, bounded by the deadline
			}
			if !heard() { // seen once under load: say what each node holds
				for _, o := range nodes {
					_, kv := o.get("/v1/keys/slow/" + key)
					_, mv := o.get("/v1/members")
					t.Logf("%s: key %s\nmembers %s\nlog:\n%s", o.name, kv, mv, tail(o.p.stderr.String(), 2000))
				}
				t.Fatalf("%s: %s did not hear of %s's spend within %s", what, m.name, n.name, dnsHeal)
			}
		}
	}
}

// assertLogged fails unless some node's log has line.
func assertLogged(t *testing.T, line string, nodes ...*netnsNode) {
	t.Helper()
	for _, n := range nodes {
		if strings.Contains(n.p.stderr.String(), line) {
			return
		}
	}
	for _, n := range nodes {
		t.Logf("%s's log:\n%s", n.name, tail(n.p.stderr.String(), 3000))
	}
	t.Errorf("no node logged %q", line)
}

// Pods that start one after another, each listed by the name once it
// exists (a headless Service with publishNotReadyAddresses), in an order
// that is not their names': each joins those started before it, and all
// three end in one cluster.
func TestDNSPodsStartedInAnyOrderFormOneCluster(t *testing.T) {
	d := newDNSLab(t)
	var started []*netnstest.Host
	var nodes []*netnsNode
	for _, name := range []string{"pod-c", "pod-a", "pod-b"} {
		h := d.pod(t)
		started = append(started, h)
		d.set(started...)
		nodes = append(nodes, d.start(t, h, name))
	}
	took := awaitOneCluster(t, dnsHeal, "started one by one", nodes)
	t.Logf("one cluster %s after the last pod served", took.Round(time.Millisecond))
	assertGossips(t, "started one by one", nodes)
	if d.dns.Queries(dnsName) < 3 {
		t.Errorf("the DNS server was asked %d times about %s: the pods did not resolve it", d.dns.Queries(dnsName), dnsName)
	}
}

// A split cluster heals by resolving the name again, and by nothing else:
// the pods never knew each other, so no member is remembered as failed
// (that is how any partition ends up once memberlist has forgotten the
// dead, 30 s after they are declared so, and sluiced's reconnect has given
// up, 10 min after): only the rejoin loop, finding addresses in the name
// that are not members, brings them together.
//   - resolvers disagree: all three start together and each is told the
//     name lists only itself (DNS not caught up yet); each forms a cluster
//     of one. Then the name lists all three.
//   - a partition from the start: {a, b} and {c} cannot reach each other
//     (iptables REJECT with ICMP let through, so that joins fail at once
//     instead of after memberlist's 10 s TCP timeout); the name lists all three from the
//     start, so a and b join each other and c is alone. Then the
//     partition ends.
func TestDNSSplitClusterHealsByResolvingTheNameAgain(t *testing.T) {
	t.Run("resolvers disagree", func(t *testing.T) {
		d := newDNSLab(t)
		var hosts []*netnstest.Host
		for range 3 {
			h := d.pod(t)
			hosts = append(hosts, h)
			d.dns.SetFor(netip.MustParseAddr(h.IP), dnsName, netip.MustParseAddr(h.IP))
		}
		var nodes []*netnsNode
		for i, h := range hosts {
			nodes = append(nodes, d.start(t, h, fmt.Sprintf("pod-%c", 'a'+i)))
		}
		for _, n := range nodes {
			netnsWithin(t, dnsHeal, n.name+" joins the one address it is told", func() bool {
				return strings.Contains(n.p.stderr.String(), "peers_answered=1")
			})
			if got := n.members(t); len(got) != 1 {
				t.Fatalf("%s is in a cluster of %v before the name lists the others", n.name, got)
			}
		}
		for _, h := range hosts {
			d.dns.Forget(netip.MustParseAddr(h.IP))
		}
		d.set(hosts...)
		took := awaitOneCluster(t, dnsHeal, "the name lists all three", nodes)
		t.Logf("three clusters of one became one %s after the name listed all three (--rejoin-interval %s)", took.Round(time.Millisecond), dnsRejoin)
		assertLogged(t, "joined peers found by resolving the join list again", nodes...)
		assertGossips(t, "healed", nodes)
	})
	t.Run("a partition from the start", func(t *testing.T) {
		netnsRequireIptables(t)
		d := newDNSLab(t)
		a, b, c := d.pod(t), d.pod(t), d.pod(t)
		refuse := func(h *netnstest.Host, from ...*netnstest.Host) {
			// ICMP passes, so that the refusals arrive and joins
			// fail at once.
			if _, err := h.Exec("iptables", "-A", "INPUT", "-p", "icmp", "-j", "ACCEPT"); err != nil {
				t.Fatal(err)
			}
			for _, f := range from {
				if _, err := h.Exec("iptables", "-A", "INPUT", "-s", f.IP, "-j", "REJECT"); err != nil {
					t.Fatal(err)
				}
			}
		}
		refuse(a, c)
		refuse(b, c)
		refuse(c, a, b)
		d.set(a, b, c)
		na, nb, nc := d.start(t, a, "pod-a"), d.start(t, b, "pod-b"), d.start(t, c, "pod-c")
		awaitOneCluster(t, dnsHeal, "the majority side", []*netnsNode{na, nb})
		netnsWithin(t, dnsHeal, "pod-c joins itself, the one address it reaches", func() bool {
			return strings.Contains(nc.p.stderr.String(), "joined cluster")
		})
		if got := nc.members(t); len(got) != 1 {
			t.Fatalf("pod-c, cut off, is in a cluster of %v", got)
		}
		for _, h := range []*netnstest.Host{a, b, c} {
			netnsHeal(t, h)
		}
		took := awaitOneCluster(t, dnsHeal, "the partition ended", []*netnsNode{na, nb, nc})
		t.Logf("the sides became one cluster %s after the partition ended (--rejoin-interval %s)", took.Round(time.Millisecond), dnsRejoin)
		assertLogged(t, "joined peers found by resolving the join list again", na, nb, nc)
		assertGossips(t, "healed", []*netnsNode{na, nb, nc})
	})
}

// The name resolves to nothing at first (the Service has no endpoints
// yet): each pod serves decisions on its own, retrying the join; once the
// name lists them, they form one cluster.
func TestDNSNameEmptyAtFirstThenListingThePods(t *testing.T) {
	d := newDNSLab(t)
	var hosts []*netnstest.Host
	var nodes []*netnsNode
	for i := range 3 {
		h := d.pod(t)
		hosts = append(hosts, h)
		nodes = append(nodes, d.start(t, h, fmt.Sprintf("pod-%c", 'a'+i)))
	}
	for _, n := range nodes {
		netnsWithin(t, dnsHeal, n.name+" says its join failed", func() bool {
			return strings.Contains(n.p.stderr.String(), "join failed; retrying")
		})
		n.assertUp(t, "while the name resolves to nothing")
		if got := n.members(t); len(got) != 1 {
			t.Fatalf("%s is in a cluster of %v while the name resolves to nothing", n.name, got)
		}
	}
	d.set(hosts...)
	took := awaitOneCluster(t, dnsHeal, "the name lists the pods", nodes)
	t.Logf("one cluster %s after the name listed the pods", took.Round(time.Millisecond))
	assertGossips(t, "joined late", nodes)
}

// A member restarted on a new address, the name's answer following it
// (the old address gone, the new one listed), is a member again at its new
// address on every node:
//   - rescheduled: killed (-9, no leave) and replaced by a pod of a new
//     name on a new address, as a Deployment does;
//   - moved, same name, after a clean stop (SIGTERM: it leaves) or a
//     crash: started again with its name on a new address, as a
//     StatefulSet's pod rescheduled or a VM given a new address. After a
//     crash the others hold the name at the old address until they
//     declare it dead (memberlist's failure detection, ~5-8 s here); the
//     name then moves at once (gossip's deadNameReclaim). Before that,
//     memberlist refused the new address as a name conflict until the
//     dead member was forgotten (the case timed out after 30 s).
//
// Each time, the new member's spend reaches the others (its counters are
// accepted from its new address).
func TestDNSMemberRestartedOnANewAddressIsFoundAgain(t *testing.T) {
	for _, tt := range []struct {
		name    string
		kill    bool   // -9 instead of SIGTERM
		renamed string // the replacement's name
	}{
		{"rescheduled under a new name after a crash", true, "pod-d"},
		{"moved with its name after a clean stop", false, "pod-c"},
		{"moved with its name after a crash", true, "pod-c"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			d := newDNSLab(t)
			a, b, c := d.pod(t), d.pod(t), d.pod(t)
			d.set(a, b, c)
			na, nb, nc := d.start(t, a, "pod-a"), d.start(t, b, "pod-b"), d.start(t, c, "pod-c")
			awaitOneCluster(t, dnsHeal, "at the start", []*netnsNode{na, nb, nc})

			if tt.kill {
				nc.p.cmd.Process.Kill()
			} else {
				nc.p.cmd.Process.Signal(syscall.SIGTERM)
			}
			select {
			case <-nc.p.exited:
				nc.p.exited <- nil // for the cleanup
			case <-time.After(dnsHeal):
				t.Fatal("pod-c did not exit")
			}
			moved := d.pod(t) // a new address
			d.set(a, b, moved)
			nd := d.start(t, moved, tt.renamed)
			took := awaitOneCluster(t, dnsHeal, "after the move", []*netnsNode{na, nb, nd})
			t.Logf("%s at %s a member on every node %s after it served", nd.name, nd.gossip, took.Round(time.Millisecond))
			assertGossips(t, "after the move", []*netnsNode{na, nb, nd})
		})
	}
}
