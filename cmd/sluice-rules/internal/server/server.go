package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/sluicelabs/sluice/cmd/sluice-rules/internal/store"
	"github.com/sluicelabs/sluice/internal/rulesapi"
)

// DefaultLoosenFactor is how many times looser a limit may get without
// confirmation.
const DefaultLoosenFactor = 2.0

// Config configures a Server. Store is required.
type Config struct {
	Store *store.Store
	// LoosenFactor: a change raising a rate or burst by more than this
	// many times, or removing limits, needs ?confirm=true. At least 1;
	// 0 means DefaultLoosenFactor.
	LoosenFactor float64
	// UI, if set, is mounted at /ui/ (seeing the /ui/ prefix), and / redirects there.
	UI http.Handler
	// Log receives errors and notable events; nil discards.
	Log *slog.Logger
	// Registerer receives the metrics; nil makes a registry of the
	// server's own, served at /metrics with the Go and process collectors.
	Registerer prometheus.Registerer
	// Gatherer is served at /metrics when Registerer is set.
	Gatherer prometheus.Gatherer
	// RefreshInterval is how often the stored version is read, to pick up
	// versions another replica (sharing a PostgreSQL database) stored.
	// 0 means 1 s.
	RefreshInterval time.Duration
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// MaxHeld caps the long-polls held at once; more are answered at once.
	// 0 means DefaultMaxHeld.
	MaxHeld int64
}

// DefaultMaxHeld is the default cap on long-polls held at once: a
// goroutine and a connection each.
const DefaultMaxHeld = 10000

// Server is the rules service. Create it with New, serve Handler, run Run
// for the refresh loop, and call Drain before shutting the HTTP server
// down so long-polls answer at once.
type Server struct {
	store        *store.Store
	factor       float64
	ui           http.Handler
	log          *slog.Logger
	m            *metrics
	gatherer     prometheus.Gatherer
	refreshEvery time.Duration
	now          func() time.Time
	mux          *http.ServeMux

	mu  sync.Mutex // guards cur
	cur *current
	// held counts long-polls being held now, at most maxHeld.
	held    atomic.Int64
	maxHeld int64

	closeOnce sync.Once
	closing   chan struct{}
}

// New returns a server serving the store's current version.
func New(ctx context.Context, cfg Config) (*Server, error) {
	if cfg.Store == nil {
		return nil, errors.New("new server: no store")
	}
	if cfg.LoosenFactor == 0 {
		cfg.LoosenFactor = DefaultLoosenFactor
	}
	if cfg.LoosenFactor < 1 {
		return nil, fmt.Errorf("new server: loosen factor %g: want at least 1", cfg.LoosenFactor)
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.RefreshInterval <= 0 {
		cfg.RefreshInterval = time.Second
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.MaxHeld <= 0 {
		cfg.MaxHeld = DefaultMaxHeld
	}
	reg, gat := cfg.Registerer, cfg.Gatherer
	if reg == nil {
		r := prometheus.NewRegistry()
		r.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
		reg, gat = r, r
	}
	s := &Server{store: cfg.Store, factor: cfg.LoosenFactor, ui: cfg.UI, log: cfg.Log, m: newMetrics(reg), gatherer: gat,
		refreshEvery: cfg.RefreshInterval, now: cfg.Now, maxHeld: cfg.MaxHeld, closing: make(chan struct{})}
	if err := s.refresh(ctx); err != nil {
		return nil, fmt.Errorf("new server: load the served document: %w", err)
	}
	s.routes()
	return s, nil
}

// Handler is the service's HTTP handler.
func (s *Server) Handler() http.Handler { return s.mux }

// Run reads the stored version every RefreshInterval until ctx ends.
func (s *Server) Run(ctx context.Context) {
	t := time.NewTicker(s.refreshEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if err := s.refresh(ctx); err != nil && ctx.Err() == nil {
				s.log.Warn("read the stored version", "error", err)
			}
		}
	}
}

// Drain answers every held long-poll now (304) and every later one at
// once: call it when shutting down.
func (s *Server) Drain() { s.closeOnce.Do(func() { close(s.closing) }) }

func (s *Server) routes() {
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+rulesapi.HealthPath, func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("ok\n")) })
	mux.HandleFunc("GET "+rulesapi.ReadyPath, s.ready)
	if s.gatherer != nil {
		mux.Handle("GET "+rulesapi.MetricsPath, promhttp.HandlerFor(s.gatherer, promhttp.HandlerOpts{}))
	}
	mux.HandleFunc("GET "+rulesapi.ServedPath, s.serveDocument)
	api := func(pattern string, h func(http.ResponseWriter, *http.Request, actor) error) {
		mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
			a, err := s.authenticate(r)
			if err == nil {
				err = h(w, r, a)
			}
			if err != nil {
				s.writeError(w, r, err)
			}
		})
	}
	p := rulesapi.APIPrefix
	api("GET "+p+"/whoami", s.whoami)
	api("GET "+p+"/status", s.status)
	api("GET "+p+"/teams", s.listTeams)
	api("POST "+p+"/teams", s.createTeam)
	api("GET "+p+"/teams/{team}", s.getTeam)
	api("DELETE "+p+"/teams/{team}", s.deleteTeam)
	api("POST "+p+"/teams/{team}/tokens", s.createToken)
	api("GET "+p+"/teams/{team}/tokens", s.listTokens)
	api("DELETE "+p+"/teams/{team}/tokens/{id}", s.revokeToken)
	api("GET "+p+"/teams/{team}/rules", s.getTeamRules)
	api("PUT "+p+"/teams/{team}/rules", s.putTeamRules)
	api("GET "+p+"/teams/{team}/rules/{rule}", s.getRule)
	api("PUT "+p+"/teams/{team}/rules/{rule}", s.putRule)
	api("DELETE "+p+"/teams/{team}/rules/{rule}", s.deleteRule)
	api("GET "+p+"/teams/{team}/history", s.history)
	api("POST "+p+"/teams/{team}/rollback", s.rollback)
	api("GET "+p+"/audit", s.audit)
	api("POST "+p+"/admin/backup", s.backup)
	mux.HandleFunc(p+"/", func(w http.ResponseWriter, r *http.Request) {
		s.writeError(w, r, errorf(http.StatusNotFound, rulesapi.CodeNotFound, "no endpoint %s %s", r.Method, r.URL.Path))
	})
	if s.ui != nil {
		mux.Handle(rulesapi.UIPath, s.ui)
		mux.Handle("GET /{$}", http.RedirectHandler(rulesapi.UIPath, http.StatusFound))
	}
	s.mux = mux
}

func (s *Server) ready(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	if err := s.store.Ping(ctx); err != nil {
		http.Error(w, "database: "+err.Error(), http.StatusServiceUnavailable)
		return
	}
	w.Write([]byte("ready\n"))
}
