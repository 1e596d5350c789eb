package daemon

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"
)

// Bounds on the admin and metrics endpoints' connections, so that a local
// user cannot hold the daemon's file descriptors or memory through them.
const (
	// adminReadHeaderTimeout bounds a request's headers (slow clients).
	adminReadHeaderTimeout = 10 * time.Second
	// adminReadTimeout bounds a whole request, body included.
	adminReadTimeout = 30 * time.Second
	// adminWriteTimeout bounds an answer; /debug/pprof/profile?seconds=N
	// needs N below it.
	adminWriteTimeout = 60 * time.Second
	// adminIdleTimeout closes keep-alive connections left idle.
	adminIdleTimeout = 30 * time.Second
	// adminMaxHeaderBytes bounds a request's headers.
	adminMaxHeaderBytes = 16 << 10
)

// httpEndpoint is one HTTP listener of the daemon (admin or metrics).
type httpEndpoint struct {
	name string
	srv  *http.Server
	l    *cappedListener
}

// listenHTTP binds the admin endpoint (Settings.AdminAddr) and the metrics
// endpoint (Settings.MetricsAddr), those that are set. An address that
// cannot be bound is an error: another process answering there would
// otherwise answer the operator's CLI and scrapes in the daemon's name.
func (d *Daemon) listenHTTP() ([]*httpEndpoint, error) {
	var eps []*httpEndpoint
	fail := func(err error) ([]*httpEndpoint, error) {
		for _, ep := range eps {
			ep.l.Close()
		}
		return nil, err
	}
	if addr := d.settings.AdminAddr; addr != "" {
		l, err := net.Listen("tcp", addr)
		if err != nil {
			return fail(fmt.Errorf("admin endpoint: listen on %s: %w (is another sluiced, or another program, answering there? "+
				"choose another address with --admin-addr HOST:PORT, or serve none with --admin-addr \"\")", addr, err))
		}
		h := newHostGuard(d.AdminHandler(), l.Addr(), d.settings.AdminAllowedHosts)
		eps = append(eps, d.newEndpoint("admin", l, h))
	}
	if addr := d.settings.MetricsAddr; addr != "" {
		l, err := net.Listen("tcp", addr)
		if err != nil {
			return fail(fmt.Errorf("metrics endpoint: listen on %s: %w (choose another address with --metrics-addr HOST:PORT)", addr, err))
		}
		eps = append(eps, d.newEndpoint("metrics", l, d.MetricsHandler()))
	}
	return eps, nil
}

func (d *Daemon) newEndpoint(name string, l net.Listener, h http.Handler) *httpEndpoint {
	return &httpEndpoint{name: name, l: newCappedListener(l, d.settings.AdminMaxConns), srv: &http.Server{
		Handler:           h,
		ReadHeaderTimeout: adminReadHeaderTimeout,
		ReadTimeout:       adminReadTimeout,
		WriteTimeout:      adminWriteTimeout,
		IdleTimeout:       adminIdleTimeout,
		MaxHeaderBytes:    adminMaxHeaderBytes,
		ErrorLog:          d.log.Named(name).StandardLogger(nil),
	}}
}

// serveHTTP serves the endpoints, each in a goroutine counted in wg, until
// closeHTTP.
func (d *Daemon) serveHTTP(eps []*httpEndpoint, wg *sync.WaitGroup) {
	for _, ep := range eps {
		d.log.Info(ep.name+" endpoint serving", "addr", ep.l.Addr().String(), "max_conns", d.settings.AdminMaxConns)
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := ep.srv.Serve(ep.l); err != nil && !errors.Is(err, http.ErrServerClosed) {
				d.log.Error(ep.name+" endpoint stopped", "error", err)
			}
		}()
	}
}

// closeHTTP closes the endpoints, their listeners (served or not) and their
// connections.
func closeHTTP(eps []*httpEndpoint) {
	for _, ep := range eps {
		ep.srv.Close()
		ep.l.Close()
	}
}

// waitHTTP waits for the refusals at the connection cap still under way;
// call it once serveHTTP's goroutines have returned.
func waitHTTP(eps []*httpEndpoint) {
	for _, ep := range eps {
		ep.l.wait()
	}
}
