package testcluster

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	"github.com/sluicelabs/sluice/clientlib"
)

// ProcsOptions describe a cluster of real sluiced processes on loopback.
type ProcsOptions struct {
	N              int
	Sluiced        string // path to the sluiced binary
	Rules          string // rules file contents
	GossipInterval time.Duration
	FanoutLimit    int
	GossipMode     string   // auto (""), direct, relay or owner
	Stderr         *os.File // where the daemons log; default: discarded
	// NodeSluiced, where not empty, is the binary of node i instead of
	// Sluiced (a rolling upgrade: older and newer daemons in one cluster).
	NodeSluiced []string
	// FirstContact, if not empty, is --first-contact (auto, token or share),
	// given to the nodes that run Sluiced (not to NodeSluiced's builds,
	// which may be older than the flag).
	FirstContact string
	// AggregateAbove, if not 0, is --aggregate-above, given as FirstContact
	// is.
	AggregateAbove int
	// LogLevel is --log-level (default warn).
	LogLevel string
}

// Procs is a cluster of sluiced processes, as they ship.
type Procs struct {
	dir     string
	label   string
	cmds    []*exec.Cmd
	done    []chan struct{} // closed when each process has exited
	clients []*clientlib.Client
}

// StartProcs starts opts.N sluiced processes on 127.0.0.1, each joining the
// first, and connects a client to each. Everything a process listens on is
// chosen for this run, so clusters started at once on one host (by other
// runs or tests) never meet: a free port per node (picked again if another
// program takes it before the node binds it), no admin address, sockets in a
// directory of the run's own, and a cluster label and gossip key of its own.
func StartProcs(opts ProcsOptions) (*Procs, error) {
	dir, err := os.MkdirTemp("", "tcp")
	if err != nil {
		return nil, err
	}
	p := &Procs{dir: dir}
	rules := filepath.Join(dir, "rules.yaml")
	if err := os.WriteFile(rules, []byte(opts.Rules), 0o600); err != nil {
		p.Close()
		return nil, err
	}
	// One random key for the cluster, given in the environment (never on the
	// command line, where every local user could read it), and a label of
	// the run's own.
	var raw [32]byte
	if _, err := rand.Read(raw[:]); err != nil {
		p.Close()
		return nil, fmt.Errorf("testcluster: gossip key: %w", err)
	}
	p.label = fmt.Sprintf("testcluster-%x", raw[:4])
	env := append(os.Environ(), "SLUICE_GOSSIP_KEY="+base64.StdEncoding.EncodeToString(raw[:]))
	first := 0
	for i := range opts.N {
		port, err := p.startNode(opts, env, rules, i, first)
		if err != nil {
			p.Close()
			return nil, err
		}
		if i == 0 {
			first = port
		}
	}
	return p, nil
}

// bindAttempts is how often a node is started again on a new port when it
// exits before serving (another program took its port in between).
const bindAttempts = 5

// startNode starts node i, joining the node at port first (unless it is
// the first), and connects a client to it. It returns the node's gossip
// port.
func (p *Procs) startNode(opts ProcsOptions, env []string, rules string, i, first int) (int, error) {
	sock := filepath.Join(p.dir, fmt.Sprintf("n%d.sock", i))
	var lastErr error
	for range bindAttempts {
		port, err := freeLoopbackPort()
		if err != nil {
			return 0, err
		}
		level := opts.LogLevel
		if level == "" {
			level = "warn"
		}
		args := []string{
			"--socket", sock, "--rules", rules, "--node-name", fmt.Sprintf("proc-%d", i),
			"--bind", fmt.Sprintf("127.0.0.1:%d", port),
			"--gossip-interval", opts.GossipInterval.String(),
			"--cluster-label", p.label, "--log-level", level,
			"--admin-addr", "", // several on one host: a taken admin address is an error
		}
		if opts.FanoutLimit > 0 {
			args = append(args, "--fanout-limit", strconv.Itoa(opts.FanoutLimit))
		}
		if opts.GossipMode != "" {
			args = append(args, "--gossip-mode", opts.GossipMode)
		}
		if i > 0 {
			args = append(args, "--join", fmt.Sprintf("127.0.0.1:%d", first))
		}
		bin := opts.Sluiced
		if i < len(opts.NodeSluiced) && opts.NodeSluiced[i] != "" {
			bin = opts.NodeSluiced[i]
		} else {
			if opts.FirstContact != "" {
				args = append(args, "--first-contact", opts.FirstContact)
			}
			if opts.AggregateAbove != 0 {
				args = append(args, "--aggregate-above", strconv.Itoa(opts.AggregateAbove))
			}
		}
		cmd := exec.Command(bin, args...)
		cmd.Env = env
		if opts.Stderr != nil {
			cmd.Stderr = opts.Stderr
		}
		if err := cmd.Start(); err != nil {
			return 0, fmt.Errorf("testcluster: start %s: %w", bin, err)
		}
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		c, err := dialNode(sock, done)
		if err == nil {
			p.cmds = append(p.cmds, cmd)
			p.done = append(p.done, done)
			p.clients = append(p.clients, c)
			return port, nil
		}
		cmd.Process.Kill()
		<-done
		lastErr = err
		if !errors.Is(err, errExited) {
			break
		}
	}
	return 0, fmt.Errorf("testcluster: sluiced %d: %w", i, lastErr)
}

// errExited is a process that exited before serving.
var errExited = errors.New("exited before serving (its port taken?)")

// dialNode connects to a starting process's socket, until it serves (20 s
// at most) or exits (done closed).
func dialNode(sock string, done <-chan struct{}) (*clientlib.Client, error) {
	deadline := time.Now().Add(20 * time.Second)
	for {
		c, err := clientlib.Dial(context.Background(), clientlib.Options{SocketPath: sock, Timeout: 2 * time.Second, DialTimeout: 15 * time.Second})
		if err == nil {
			return c, nil
		}
		select {
		case <-done:
			return nil, errExited
		default:
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("did not serve within 20s: %w", err)
		}
		time.Sleep(5 * time.Millisecond) // a process starting up; nothing to wait on but its socket
	}
}

func freeLoopbackPort() (int, error) {
	for range 50 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		if u, err := net.ListenPacket("udp", fmt.Sprintf("127.0.0.1:%d", port)); err == nil {
			u.Close()
			return port, nil
		}
	}
	return 0, fmt.Errorf("testcluster: no free loopback port")
}

// Size is the number of processes.
func (p *Procs) Size() int { return len(p.clients) }

// Allow asks process i for a decision.
func (p *Procs) Allow(i int, rule, key string, cost int64) clientlib.Decision {
	return p.clients[i].AllowN(context.Background(), rule, key, cost)
}

// Balance asks process i for a key's balance.
func (p *Procs) Balance(i int, rule, key string) (float64, bool) {
	in, err := p.clients[i].Inspect(context.Background(), rule, key)
	return in.Balance, err == nil && in.Known
}

// Close stops every process (SIGTERM, so they leave gracefully) and removes the files.
func (p *Procs) Close() error {
	for _, c := range p.clients {
		c.Close()
	}
	for _, cmd := range p.cmds {
		cmd.Process.Signal(os.Interrupt)
	}
	for i, cmd := range p.cmds {
		select {
		case <-p.done[i]:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-p.done[i]
		}
	}
	return os.RemoveAll(p.dir)
}
