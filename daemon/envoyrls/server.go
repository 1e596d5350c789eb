package envoyrls

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// Bounds on what one client may make the server hold: Envoy's requests are
// a few hundred bytes, and it multiplexes calls on a few connections.
const (
	// MaxRequestBytes caps one request message; a larger one is refused
	// (ResourceExhausted) before it is decoded.
	MaxRequestBytes = 64 << 10
	// MaxStreams caps the calls in flight on one connection.
	MaxStreams = 1024
)

// Server is a gRPC server of the rate limit service on one or more
// listeners. Create it with Listen, run it with Serve, end it with Shutdown.
type Server struct {
	grpc      *grpc.Server
	health    *health.Server
	listeners []net.Listener
	wg        sync.WaitGroup
}

// ListenConfig says where and to whom the service is served.
type ListenConfig struct {
	// Addrs are "unix:/path" or "host:port" each.
	Addrs []string
	// SocketMode is applied to Unix sockets.
	SocketMode os.FileMode
	// AllowUIDs and AllowGIDs, when either is set, admit only Unix socket
	// peers whose uid or primary gid is listed (the daemon's --allow-uid and
	// --allow-gid); a TCP address is then refused (ErrPeerCheckUnsupported).
	AllowUIDs, AllowGIDs []uint32
	// Refused, if set, is told of every connection refused by the lists.
	Refused func(err error, uid, gid uint32)
}

// Listen binds every address (a stale Unix socket nobody answers on is
// replaced) and registers svc on a new gRPC server. On error, what was bound
// is closed.
func Listen(cfg ListenConfig, svc *Service) (*Server, error) {
	checks := len(cfg.AllowUIDs) > 0 || len(cfg.AllowGIDs) > 0
	if checks {
		for _, a := range cfg.Addrs {
			if !strings.HasPrefix(a, "unix:") || !peerCheckSupported {
				return nil, fmt.Errorf("envoy rate limit service: listen %s: %w", a, ErrPeerCheckUnsupported)
			}
		}
	}
	s := &Server{grpc: grpc.NewServer(
		grpc.MaxRecvMsgSize(MaxRequestBytes),
		grpc.MaxConcurrentStreams(MaxStreams),
	)}
	rlsv3.RegisterRateLimitServiceServer(s.grpc, svc)
	// The standard health service, for Envoy's grpc_health_check and
	// Kubernetes' gRPC probes: SERVING for "" and the rate limit service
	// until Shutdown.
	s.health = health.NewServer()
	s.health.SetServingStatus(rlsv3.RateLimitService_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_SERVING)
	healthpb.RegisterHealthServer(s.grpc, s.health)
	for _, a := range cfg.Addrs {
		l, err := listen(a, cfg.SocketMode)
		if err != nil {
			for _, l := range s.listeners {
				l.Close()
			}
			return nil, fmt.Errorf("envoy rate limit service: listen %s: %w", a, err)
		}
		if checks {
			l = &peerListener{Listener: l, uids: cfg.AllowUIDs, gids: cfg.AllowGIDs, refused: cfg.Refused}
		}
		s.listeners = append(s.listeners, l)
	}
	return s, nil
}

func listen(addr string, mode os.FileMode) (net.Listener, error) {
	path, unix := strings.CutPrefix(addr, "unix:")
	if !unix {
		return net.Listen("tcp", addr)
	}
	if path == "" {
		return nil, errors.New("empty socket path")
	}
	l, err := net.Listen("unix", path)
	if errors.Is(err, syscall.EADDRINUSE) {
		// In use, or left behind by a daemon that died: replace it only if
		// nobody answers and it is a socket.
		if c, derr := net.DialTimeout("unix", path, time.Second); derr == nil {
			c.Close()
			return nil, err
		}
		if fi, serr := os.Lstat(path); serr != nil || fi.Mode()&os.ModeSocket == 0 {
			return nil, err
		}
		if rerr := os.Remove(path); rerr != nil {
			return nil, fmt.Errorf("removing stale socket: %w", rerr)
		}
		l, err = net.Listen("unix", path)
	}
	if err != nil {
		return nil, err
	}
	if err := os.Chmod(path, mode); err != nil {
		l.Close()
		return nil, fmt.Errorf("chmod %s: %w", path, err)
	}
	return l, nil
}

// Addrs returns the bound addresses (a TCP port of 0 resolved).
func (s *Server) Addrs() []net.Addr {
	out := make([]net.Addr, len(s.listeners))
	for i, l := range s.listeners {
		out[i] = l.Addr()
	}
	return out
}

// Serve serves every listener in the background until Shutdown.
func (s *Server) Serve() {
	for _, l := range s.listeners {
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			_ = s.grpc.Serve(l) // returns when stopped
		}()
	}
}

// Shutdown stops accepting and lets calls in flight finish until ctx ends,
// then closes what is left. Unix socket files are removed.
func (s *Server) Shutdown(ctx context.Context) {
	s.health.Shutdown() // NOT_SERVING: health checkers move away first
	done := make(chan struct{})
	go func() { s.grpc.GracefulStop(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		s.grpc.Stop()
		<-done
	}
	s.wg.Wait()
}
