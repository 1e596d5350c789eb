package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/sluicelabs/sluice/cmd/sluice-rules/internal/server"
	"github.com/sluicelabs/sluice/cmd/sluice-rules/internal/store"
	"github.com/sluicelabs/sluice/internal/buildinfo"
)

// DefaultListen is where the service listens unless told otherwise:
// loopback only.
const DefaultListen = "127.0.0.1:9470"

// options are the command's flags, each also read from an environment
// variable SLUICE_RULES_<NAME> (flag wins).
type options struct {
	listen         string
	dataDir        string
	db             string
	adminTokenFile string
	loosenFactor   float64
	logLevel       string
	shutdownWait   time.Duration
	version        bool
}

// defaultDataDir is $XDG_STATE_HOME/sluice-rules, else
// ~/.local/state/sluice-rules, else ./sluice-rules-data.
func defaultDataDir() string {
	if d := os.Getenv("XDG_STATE_HOME"); d != "" {
		return filepath.Join(d, "sluice-rules")
	}
	if h, err := os.UserHomeDir(); err == nil && h != "" {
		return filepath.Join(h, ".local", "state", "sluice-rules")
	}
	return "sluice-rules-data"
}

// env returns SLUICE_RULES_<name>, or def when it is unset or empty.
func env(name, def string) string {
	if v := os.Getenv("SLUICE_RULES_" + name); v != "" {
		return v
	}
	return def
}

func parseFlags(args []string, out io.Writer) (options, error) {
	fs := flag.NewFlagSet("sluice-rules", flag.ContinueOnError)
	fs.SetOutput(out)
	var o options
	factor, err := strconv.ParseFloat(env("LOOSEN_FACTOR", strconv.FormatFloat(server.DefaultLoosenFactor, 'g', -1, 64)), 64)
	if err != nil {
		return o, fmt.Errorf("SLUICE_RULES_LOOSEN_FACTOR: %w", err)
	}
	wait, err := time.ParseDuration(env("SHUTDOWN_WAIT", "10s"))
	if err != nil {
		return o, fmt.Errorf("SLUICE_RULES_SHUTDOWN_WAIT: %w", err)
	}
	fs.StringVar(&o.listen, "listen", env("LISTEN", DefaultListen), "address to serve the API, /rules.yaml, /healthz, /readyz and /metrics on (env SLUICE_RULES_LISTEN)")
	fs.StringVar(&o.dataDir, "data-dir", env("DATA_DIR", defaultDataDir()), "directory of the SQLite database (rules.db) and the generated admin token (admin-token) (env SLUICE_RULES_DATA_DIR)")
	fs.StringVar(&o.db, "db", env("DB", ""), "database URL: postgres://user@host/db or sqlite:///path/rules.db; default: SQLite in --data-dir (env SLUICE_RULES_DB)")
	fs.StringVar(&o.adminTokenFile, "admin-token-file", env("ADMIN_TOKEN_FILE", ""), "read the admin token from this file instead of generating one into --data-dir (env SLUICE_RULES_ADMIN_TOKEN_FILE)")
	fs.Float64Var(&o.loosenFactor, "loosen-factor", factor, "a change raising a rate or burst more than this many times, or removing limits, needs confirm=true (env SLUICE_RULES_LOOSEN_FACTOR)")
	fs.StringVar(&o.logLevel, "log-level", env("LOG_LEVEL", "info"), "debug, info, warn or error (env SLUICE_RULES_LOG_LEVEL)")
	fs.DurationVar(&o.shutdownWait, "shutdown-wait", wait, "how long a shutdown waits for requests in flight (env SLUICE_RULES_SHUTDOWN_WAIT)")
	fs.BoolVar(&o.version, "version", false, "print the version and exit")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments %q (flags only; see -h)", fs.Args())
	}
	if o.loosenFactor < 1 {
		return o, fmt.Errorf("--loosen-factor %g: want at least 1", o.loosenFactor)
	}
	return o, nil
}

// run starts the service and serves until ctx ends, then shuts down
// gracefully: long-polls answer at once, requests in flight get
// --shutdown-wait to finish, the database is closed.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o, err := parseFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	if err != nil {
		return err
	}
	if o.version {
		fmt.Fprintln(stdout, "sluice-rules version "+buildinfo.Get().String())
		return nil
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(o.logLevel)); err != nil {
		return fmt.Errorf("--log-level %q: %w", o.logLevel, err)
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))

	dbURL := o.db
	if dbURL == "" {
		dbURL = "sqlite://" + filepath.Join(o.dataDir, "rules.db")
	}
	st, err := store.Open(ctx, dbURL)
	if err != nil {
		return err
	}
	defer st.Close()

	if err := bootstrapAdmin(ctx, st, o, log); err != nil {
		return err
	}
	srv, err := server.New(ctx, server.Config{Store: st, LoosenFactor: o.loosenFactor, UI: uiHandler(), Log: log})
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", o.listen)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	hs := &http.Server{
		Handler:           srv.Handler(),
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second, // no write timeout: long-polls are held

		IdleTimeout:    2 * time.Minute,
		MaxHeaderBytes: 64 << 10,
		ErrorLog:       slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	hs.RegisterOnShutdown(srv.Drain)
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	go srv.Run(runCtx)
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	log.Info("listening", "addr", ln.Addr().String(), "db", st.Dialect(), "rules_url", "http://"+ln.Addr().String()+"/rules.yaml")
	select {
	case err := <-errc:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	log.Info("shutting down")
	sctx, scancel := context.WithTimeout(context.Background(), o.shutdownWait)
	defer scancel()
	srv.Drain()
	if err := hs.Shutdown(sctx); err != nil {
		hs.Close()
		return fmt.Errorf("shutdown: %w", err)
	}
	return nil
}

// bootstrapAdmin makes sure there is an admin token: the file's, or one
// generated at first start into <data-dir>/admin-token (0600).
func bootstrapAdmin(ctx context.Context, st *store.Store, o options, log *slog.Logger) error {
	if o.adminTokenFile != "" {
		b, err := os.ReadFile(o.adminTokenFile)
		if err != nil {
			return fmt.Errorf("read --admin-token-file: %w", err)
		}
		secret := strings.TrimSpace(string(b))
		if len(secret) < 16 {
			return fmt.Errorf("--admin-token-file %s: the token is shorter than 16 characters", o.adminTokenFile)
		}
		_, err = server.BootstrapAdmin(ctx, st, secret, time.Now())
		return err
	}
	secret, err := server.BootstrapAdmin(ctx, st, "", time.Now())
	if err != nil || secret == "" {
		return err
	}
	path := filepath.Join(o.dataDir, "admin-token")
	if err := os.MkdirAll(o.dataDir, 0o700); err != nil {
		return fmt.Errorf("write the admin token: %w", err)
	}
	if err := os.WriteFile(path, []byte(secret+"\n"), 0o600); err != nil {
		return fmt.Errorf("write the admin token: %w", err)
	}
	log.Info("admin token created and written to "+path+" (only copy; keep it secret)", "file", path)
	fmt.Fprintf(os.Stderr, "sluice-rules: admin token written to %s\n", path)
	return nil
}
