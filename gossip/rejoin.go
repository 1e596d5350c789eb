package gossip

// Re-resolving the join list: a name such as a Kubernetes headless
// Service's resolves to the addresses of the pods that exist when it is
// asked. Pods started together may each see only some of the others (or
// only themselves) at first, and the join loop stops at the first answer,
// so without asking again they would stay split in several clusters. Every
// RejoinInterval the names are resolved again and any address that is not
// a current member is joined: a cluster split that way heals within one
// interval once DNS lists every pod, and a partitioned cluster heals by
// this path too when its members' addresses are in the name.

import (
	"context"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultRejoinInterval is how often the join list is re-resolved.
const DefaultRejoinInterval = 30 * time.Second

// rejoinLookupTimeout bounds one name's lookup.
const rejoinLookupTimeout = 5 * time.Second

// rejoinParallel is how many addresses a rejoin round joins at once.
const rejoinParallel = 8

// rejoin joins every address the join list now resolves to that is not a
// member this node knows alive.
func (s *Syncer) rejoin() {
	ml := s.list()
	if s.leaving.Load() || ml == nil {
		return
	}
	// The members as the syncer copied them under memberlist's lock:
	// memberlist's own Members() hands out nodes it goes on writing to.
	known := map[string]bool{s.Addr(): true}
	s.mu.Lock()
	for _, n := range s.peers {
		known[n.Address()] = true
	}
	s.mu.Unlock()
	_, defPort, err := net.SplitHostPort(s.Addr()) // peers listen where this node does, unless told
	if err != nil {
		return
	}
	var fresh []string
	for _, peer := range s.cfg.Join {
		for _, addr := range s.resolvePeer(peer, defPort) {
			if !known[addr] {
				known[addr] = true
				fresh = append(fresh, addr)
			}
		}
	}
	if len(fresh) == 0 {
		return
	}
	// Each address on its own, at once (a few at a time): one that does
	// not answer -- a pod gone but still listed -- costs memberlist's TCP
	// timeout (10 s) and must not hold up the others.
	var wg sync.WaitGroup
	var answered atomic.Int64
	var errs []error
	var mu sync.Mutex
	slots := make(chan struct{}, rejoinParallel)
	for _, addr := range fresh {
		slots <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-slots; wg.Done() }()
			n, err := ml.Join([]string{addr})
			answered.Add(int64(n))
			if err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if n := answered.Load(); n > 0 {
		s.log.Info("joined peers found by resolving the join list again", "answered", n, "addresses", fresh)
	} else {
		s.log.Debug("peers found by resolving the join list again did not answer", "addresses", fresh, "error", errors.Join(errs...))
	}
}

// resolvePeer is a join entry (HOST[:PORT], a name or an address) as the
// host:port addresses it resolves to now; none when it does not resolve.
func (s *Syncer) resolvePeer(peer, defPort string) []string {
	host, port, err := net.SplitHostPort(peer)
	if err != nil {
		host, port = peer, defPort
	}
	if ip := net.ParseIP(host); ip != nil {
		return []string{net.JoinHostPort(ip.String(), port)}
	}
	ctx, cancel := context.WithTimeout(context.Background(), rejoinLookupTimeout)
	defer cancel()
	ips, err := net.DefaultResolver.LookupIPAddr(ctx, host)
	if err != nil {
		s.log.Debug("join list: resolve", "name", host, "error", err)
		return nil
	}
	out := make([]string, 0, len(ips))
	for _, ip := range ips {
		out = append(out, net.JoinHostPort(ip.IP.String(), port))
	}
	return out
}
