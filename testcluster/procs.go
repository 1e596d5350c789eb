package testcluster

import (
	"context"
	"crypto/rand"
	"encoding/base64"
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
}

// Procs is a cluster of sluiced processes, as they ship.
type Procs struct {
	dir     string
	cmds    []*exec.Cmd
	clients []*clientlib.Client
}

// StartProcs starts opts.N sluiced processes on 127.0.0.1, each joining the
// first, and connects a client to each.
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
	// command line, where every local user could read it).
	var raw [32]byte
	if _, err := rand.Read(raw[:]); err != nil {
		p.Close()
		return nil, fmt.Errorf("testcluster: gossip key: %w", err)
	}
	env := append(os.Environ(), "SLUICE_GOSSIP_KEY="+base64.StdEncoding.EncodeToString(raw[:]))
	ports := make([]int, opts.N)
	for i := range ports {
		if ports[i], err = freeLoopbackPort(); err != nil {
			p.Close()
			return nil, err
		}
	}
	for i := range opts.N {
		sock := filepath.Join(dir, fmt.Sprintf("n%d.sock", i))
		args := []string{
			"--socket", sock, "--rules", rules, "--node-name", fmt.Sprintf("proc-%d", i),
			"--bind", fmt.Sprintf("127.0.0.1:%d", ports[i]),
			"--gossip-interval", opts.GossipInterval.String(),
			"--cluster-label", "testcluster-procs", "--log-level", "warn",
			"--admin-addr", "", // several on one host: a taken admin address is an error
		}
		if opts.FanoutLimit > 0 {
			args = append(args, "--fanout-limit", strconv.Itoa(opts.FanoutLimit))
		}
		if opts.GossipMode != "" {
			args = append(args, "--gossip-mode", opts.GossipMode)
		}
		if i > 0 {
			args = append(args, "--join", fmt.Sprintf("127.0.0.1:%d", ports[0]))
		}
		cmd := exec.Command(opts.Sluiced, args...)
		cmd.Env = env
		if opts.Stderr != nil {
			cmd.Stderr = opts.Stderr
		}
		if err := cmd.Start(); err != nil {
			p.Close()
			return nil, fmt.Errorf("testcluster: start %s: %w", opts.Sluiced, err)
		}
		p.cmds = append(p.cmds, cmd)
		var c *clientlib.Client
		deadline := time.Now().Add(20 * time.Second)
		for {
			c, err = clientlib.Dial(context.Background(), clientlib.Options{SocketPath: sock, Timeout: 2 * time.Second})
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				p.Close()
				return nil, fmt.Errorf("testcluster: sluiced %d did not serve within 20s: %w", i, err)
			}
			time.Sleep(5 * time.Millisecond) // a process starting up; nothing to wait on but its socket
		}
		p.clients = append(p.clients, c)
	}
	return p, nil
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
	for _, cmd := range p.cmds {
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-done
		}
	}
	return os.RemoveAll(p.dir)
}
