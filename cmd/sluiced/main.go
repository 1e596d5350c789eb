// Command sluiced is the Sluice rate-limit daemon: one per service host,
// answering allow/deny over a Unix socket. Run with no flags it serves the
// embedded default rules on the default socket.
package main

import (
	"context"
	"fmt"
	"os"
	"sync/atomic"

	"github.com/hashicorp/go-hclog"
	"github.com/urfave/cli/v2"

	"github.com/sluicelabs/sluice/config"
	"github.com/sluicelabs/sluice/daemon"
	"github.com/sluicelabs/sluice/daemon/httpapi"
	"github.com/sluicelabs/sluice/gossip"
	"github.com/sluicelabs/sluice/internal/buildinfo"
	"github.com/sluicelabs/sluice/proxy"
)

func main() {
	if err := app().Run(os.Args); err != nil {
		fmt.Fprintln(os.Stderr, "sluiced:", err)
		os.Exit(1)
	}
}

func app() *cli.App {
	def := config.DefaultSettings()
	return &cli.App{
		Name:    "sluiced",
		Usage:   "the Sluice rate-limit daemon",
		Version: buildinfo.Get().String(), // --version (-v) prints it and exits
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "socket", Value: def.SocketPath, EnvVars: []string{"SLUICE_SOCKET"}, Usage: "Unix socket to serve"},
			&cli.StringFlag{Name: "socket-mode", Value: fmt.Sprintf("%04o", def.SocketMode), EnvVars: []string{"SLUICE_SOCKET_MODE"}, Usage: "socket file permissions (octal)"},
			&cli.BoolFlag{Name: "socket-shared-volume", EnvVars: []string{"SLUICE_SOCKET_SHARED_VOLUME"}, Usage: "the socket directory's parent is a volume only this pod's containers mount (a Kubernetes emptyDir, world-writable): accept it; the socket directory inside it is still made private"},
			&cli.StringSliceFlag{Name: "allow-uid", EnvVars: []string{"SLUICE_ALLOW_UIDS"}, Usage: "serve only clients running as these users (uids or names; comma-separated or repeated), checked with SO_PEERCRED; root is not implied"},
			&cli.StringSliceFlag{Name: "allow-gid", EnvVars: []string{"SLUICE_ALLOW_GIDS"}, Usage: "serve only clients whose primary group is one of these (gids or names); with --allow-uid, either list admits"},
			&cli.StringFlag{Name: "rules", EnvVars: []string{"SLUICE_RULES"}, Usage: "rules file (YAML); default: the embedded rules"},
			&cli.StringFlag{Name: "rules-url", EnvVars: []string{"SLUICE_RULES_URL"}, Usage: "poll the rules from this HTTP(S) rules service (conditional GET) instead of a file"},
			&cli.StringFlag{Name: "rules-cache", EnvVars: []string{"SLUICE_RULES_CACHE"}, Usage: "with --rules-url: keep the last good rules here and use them when the service is down at start (without it: no rules, every check admitted)"},
			&cli.StringFlag{Name: "envoy-config", EnvVars: []string{"SLUICE_ENVOY_CONFIG"}, Usage: "envoyproxy/ratelimit configuration (a YAML file, or a directory of them, one domain each), translated into rules beside --rules and reloaded with them", Category: "envoy"},
			&cli.StringSliceFlag{Name: "grpc-listen", EnvVars: []string{"SLUICE_GRPC_LISTEN"}, Usage: "serve Envoy's rate limit service (gRPC) here: unix:/path or HOST:PORT, comma-separated or repeated", Category: "envoy"},
			&cli.BoolFlag{Name: "envoy-response-headers", EnvVars: []string{"SLUICE_ENVOY_RESPONSE_HEADERS"}, Usage: "add the RateLimit and RateLimit-Policy headers to the rate limit service's answers (ratelimit's RESPONSE_HEADERS_ENABLED)", Category: "envoy"},
			&cli.DurationFlag{Name: "rules-poll-interval", Value: def.RulesPollInterval, EnvVars: []string{"SLUICE_RULES_POLL_INTERVAL"}, Usage: "how often --rules-url is polled (failures back off exponentially)"},
			&cli.DurationFlag{Name: "rules-wait", EnvVars: []string{"SLUICE_RULES_WAIT"}, Usage: "long-poll --rules-url: ask the service to hold each request up to this long for a change (e.g. 30s; sluice-rules does), so changes arrive in about a round trip; 0: plain polling"},
			&cli.StringFlag{Name: "admin-addr", Value: "127.0.0.1:9464", EnvVars: []string{"SLUICE_ADMIN_ADDR"}, Usage: "admin HTTP endpoint (/, /healthz, /readyz, /metrics, /v1/...); empty to turn off; an address in use is an error"},
			&cli.StringSliceFlag{Name: "admin-allowed-hosts", EnvVars: []string{"SLUICE_ADMIN_ALLOWED_HOSTS"}, Usage: "further names (HOST or HOST:PORT) the admin endpoint answers to in the Host header, besides its address (and localhost on loopback)"},
			&cli.BoolFlag{Name: "admin-show-keys", EnvVars: []string{"SLUICE_ADMIN_SHOW_KEYS"}, Usage: "show client keys raw in /v1/top and the status page (default: redacted)"},
			&cli.IntFlag{Name: "admin-max-conns", Value: def.AdminMaxConns, EnvVars: []string{"SLUICE_ADMIN_MAX_CONNS"}, Usage: "most open connections to the admin (and the metrics) endpoint; more are answered 503 and closed"},
			&cli.StringFlag{Name: "metrics-addr", EnvVars: []string{"SLUICE_METRICS_ADDR"}, Usage: "also serve /metrics, /healthz and /readyz (nothing else) here, e.g. 0.0.0.0:9465 for scraping from the pod network; default: off"},
			&cli.BoolFlag{Name: "pprof", EnvVars: []string{"SLUICE_PPROF"}, Usage: "serve Go profiles under /debug/pprof/ on the admin endpoint"},
			&cli.BoolFlag{Name: "no-watch", EnvVars: []string{"SLUICE_NO_WATCH"}, Usage: "do not reload the rules file when it changes (SIGHUP still does)"},
			&cli.StringFlag{Name: "node-name", Value: def.NodeName, EnvVars: []string{"SLUICE_NODE_NAME"}, Usage: "this daemon's name"},
			&cli.StringFlag{Name: "log-level", Value: "info", EnvVars: []string{"SLUICE_LOG_LEVEL"}, Usage: "trace, debug, info, warn or error"},
			&cli.BoolFlag{Name: "log-json", EnvVars: []string{"SLUICE_LOG_JSON"}, Usage: "log JSON lines"},
			&cli.IntFlag{Name: "max-keys", Value: def.MaxKeys, EnvVars: []string{"SLUICE_MAX_KEYS"}, Usage: "most buckets held in memory"},
			&cli.IntFlag{Name: "max-key-len", Value: def.MaxKeyLen, EnvVars: []string{"SLUICE_MAX_KEY_LEN"}, Usage: "longest key accepted, in bytes"},
			&cli.Int64Flag{Name: "max-log-bytes", Value: def.MaxLogBytes, EnvVars: []string{"SLUICE_MAX_LOG_BYTES"}, Usage: "most bytes sliding logs hold beyond each key's first entry; a log at the budget counts new requests in its newest entry"},
			&cli.IntFlag{Name: "max-frame", Value: def.MaxFrameBytes, EnvVars: []string{"SLUICE_MAX_FRAME"}, Usage: "largest IPC frame accepted, in bytes"},
			&cli.IntFlag{Name: "max-batch", Value: def.MaxBatch, EnvVars: []string{"SLUICE_MAX_BATCH"}, Usage: "most checks in one request"},
			&cli.IntFlag{Name: "max-conns", Value: def.MaxConns, EnvVars: []string{"SLUICE_MAX_CONNS"}, Usage: "most concurrent client connections"},
			&cli.DurationFlag{Name: "sweep-interval", Value: def.SweepInterval, EnvVars: []string{"SLUICE_SWEEP_INTERVAL"}, Usage: "how often idle full buckets are evicted"},
			&cli.DurationFlag{Name: "shutdown-timeout", Value: def.ShutdownTimeout, EnvVars: []string{"SLUICE_SHUTDOWN_TIMEOUT"}, Usage: "how long shutdown waits for in-flight requests"},

			&cli.StringFlag{Name: "bind", EnvVars: []string{"SLUICE_BIND"}, Usage: "ADDR:PORT for cluster gossip (UDP and TCP); setting it or --join turns the cluster on (default port 7946); beyond loopback it needs a key or --insecure-gossip", Category: "cluster"},
			&cli.StringFlag{Name: "advertise", EnvVars: []string{"SLUICE_ADVERTISE"}, Usage: "ADDR[:PORT] peers should use to reach this node (default: the bound address)", Category: "cluster"},
			&cli.StringSliceFlag{Name: "join", EnvVars: []string{"SLUICE_JOIN"}, Usage: "peers to join, HOST:PORT, comma-separated; retried in the background until one answers", Category: "cluster"},
			&cli.DurationFlag{Name: "gossip-interval", Value: gossip.DefaultGossipInterval, EnvVars: []string{"SLUICE_GOSSIP_INTERVAL"}, Usage: "how often consumption is sent to peers: the main accuracy/cost knob", Category: "cluster"},
			&cli.IntFlag{Name: "gossip-nodes", Value: gossip.DefaultGossipNodes, EnvVars: []string{"SLUICE_GOSSIP_NODES"}, Usage: "peers reached per round once the cluster outgrows --fanout-limit", Category: "cluster"},
			&cli.IntFlag{Name: "fanout-limit", Value: gossip.DefaultFanoutLimit, EnvVars: []string{"SLUICE_FANOUT_LIMIT"}, Usage: "largest cluster in which consumption goes straight to every member", Category: "cluster"},
			&cli.StringFlag{Name: "gossip-mode", Value: gossip.ModeAuto, EnvVars: []string{"SLUICE_GOSSIP_MODE"}, Usage: "how consumption travels: direct (to every member), relay (to a few, which relay), owner (to each key's owner, which answers with the cluster's view), or auto: direct up to --fanout-limit members, owner beyond once every member supports it, else relay", Category: "cluster"},
			&cli.StringFlag{Name: "first-contact", Value: "auto", EnvVars: []string{"SLUICE_FIRST_CONTACT"}, Usage: "how much of a key a daemon admits when it meets the key first (for one propagation delay it may admit only its share of the burst): auto (burst / the number of daemons the owners said use the rule's keys lately, at most a token per daemon; a rule not heard of lately: burst / members), token (at least one token per daemon; serves hosts that each call a key now and then, but a key every host meets at once may admit one token per host) or share (burst / members rounded at random: the cluster admits about one burst however many hosts meet the key at once, but hosts that call a key rarely are refused far below its limit)", Category: "cluster"},
			&cli.IntFlag{Name: "aggregate-above", EnvVars: []string{"SLUICE_AGGREGATE_ABOVE"}, Usage: "owner mode: how many daemons using one key at once make its owner have them go through aggregators (about √N members per key), so that its packets grow as √N, not N; 0: 64; negative: never", Category: "cluster"},
			&cli.DurationFlag{Name: "push-pull-interval", Value: gossip.DefaultPushPullInterval, EnvVars: []string{"SLUICE_PUSH_PULL_INTERVAL"}, Usage: "how often full state is exchanged with a random peer (repairs losses)", Category: "cluster"},
			&cli.DurationFlag{Name: "rejoin-interval", Value: gossip.DefaultRejoinInterval, EnvVars: []string{"SLUICE_REJOIN_INTERVAL"}, Usage: "how often the --join names are resolved again and peers not yet members are joined (a headless Service's name lists pods as they come)", Category: "cluster"},
			&cli.StringFlag{Name: "gossip-key-file", EnvVars: []string{"SLUICE_GOSSIP_KEY_FILE"}, Usage: "file holding the base64 gossip key (16, 24 or 32 bytes), mode 0600: encrypt gossip; or set SLUICE_GOSSIP_KEY", Category: "cluster"},
			// Refused: a key on the command line shows in ps. SLUICE_GOSSIP_KEY is read apart (see gossipKey).
			&cli.StringFlag{Name: "gossip-key", Hidden: true, Category: "cluster"},
			&cli.BoolFlag{Name: "insecure-gossip", EnvVars: []string{"SLUICE_INSECURE_GOSSIP"}, Usage: "gossip in the clear with other hosts (no key): anyone who can reach the gossip port can join, read and forge consumption", Category: "cluster"},
			&cli.StringFlag{Name: "gossip-keyring", EnvVars: []string{"SLUICE_GOSSIP_KEYRING"}, Usage: "JSON file listing base64 keys, the first used to encrypt (for key rotation), mode 0600", Category: "cluster"},
			&cli.StringFlag{Name: "proxy-listen", EnvVars: []string{"SLUICE_PROXY_LISTEN"}, Usage: "also serve the HTTP proxy here, deciding in-process (no socket hop)", Category: "proxy"},
			&cli.StringFlag{Name: "proxy-upstream", EnvVars: []string{"SLUICE_PROXY_UPSTREAM"}, Usage: "the service the built-in proxy forwards to, e.g. http://127.0.0.1:8080", Category: "proxy"},
			&cli.StringFlag{Name: "proxy-routes", EnvVars: []string{"SLUICE_PROXY_ROUTES"}, Usage: "routes file of the built-in proxy (default: limit by client IP under rule \"default\")", Category: "proxy"},
			&cli.StringFlag{Name: "http-listen", EnvVars: []string{"SLUICE_HTTP_LISTEN"}, Usage: "serve the HTTP decision API here (POST /v1/check, forward-auth /v1/auth), e.g. 127.0.0.1:9466; not the admin address; default: off", Category: "http api"},
			&cli.StringFlag{Name: "http-routes", EnvVars: []string{"SLUICE_HTTP_ROUTES"}, Usage: "routes file (the proxy's format) of the forward-auth endpoint (default: limit by client IP under rule \"default\", trusting loopback proxies)", Category: "http api"},
			&cli.StringSliceFlag{Name: "http-allowed-hosts", EnvVars: []string{"SLUICE_HTTP_ALLOWED_HOSTS"}, Usage: "names, besides IP addresses and localhost, the decision API answers to in the Host header", Category: "http api"},
			&cli.IntFlag{Name: "http-max-conns", Value: def.HTTPMaxConns, EnvVars: []string{"SLUICE_HTTP_MAX_CONNS"}, Usage: "most open connections to the decision API; more are closed at once", Category: "http api"},
			&cli.StringFlag{Name: "cluster-label", Value: gossip.DefaultLabel, EnvVars: []string{"SLUICE_CLUSTER_LABEL"}, Usage: "label on every packet: keeps clusters on one network apart", Category: "cluster"},
		},
		Action:   run,
		Commands: []*cli.Command{proxyCommand()},
	}
}

func run(c *cli.Context) error {
	s := config.DefaultSettings()
	s.SocketPath = c.String("socket")
	s.SocketSharedVolume = c.Bool("socket-shared-volume")
	if _, err := fmt.Sscanf(c.String("socket-mode"), "%o", &s.SocketMode); err != nil {
		return fmt.Errorf("--socket-mode %q: want octal permissions such as 0660", c.String("socket-mode"))
	}
	var err error
	if s.AllowUIDs, s.AllowGIDs, err = allowLists(c); err != nil {
		return err
	}
	s.RulesPath = c.String("rules")
	s.RulesURL = c.String("rules-url")
	s.RulesCache = c.String("rules-cache")
	s.RulesPollInterval = c.Duration("rules-poll-interval")
	s.RulesWait = c.Duration("rules-wait")
	s.NoWatch = c.Bool("no-watch")
	s.EnvoyConfig = c.String("envoy-config")
	s.GRPCListen = c.StringSlice("grpc-listen")
	s.EnvoyResponseHeaders = c.Bool("envoy-response-headers")
	s.Pprof = c.Bool("pprof")
	s.AdminAddr = c.String("admin-addr")
	s.AdminAllowedHosts = c.StringSlice("admin-allowed-hosts")
	s.AdminShowKeys = c.Bool("admin-show-keys")
	s.AdminMaxConns = c.Int("admin-max-conns")
	s.MetricsAddr = c.String("metrics-addr")
	s.HTTPAddr = c.String("http-listen")
	s.HTTPRoutes = c.String("http-routes")
	s.HTTPAllowedHosts = c.StringSlice("http-allowed-hosts")
	s.HTTPMaxConns = c.Int("http-max-conns")
	s.NodeName = c.String("node-name")
	s.MaxKeys = c.Int("max-keys")
	s.MaxKeyLen = c.Int("max-key-len")
	s.MaxLogBytes = c.Int64("max-log-bytes")
	s.MaxFrameBytes = c.Int("max-frame")
	s.MaxBatch = c.Int("max-batch")
	s.MaxConns = c.Int("max-conns")
	s.SweepInterval = c.Duration("sweep-interval")
	s.ShutdownTimeout = c.Duration("shutdown-timeout")
	s.Cluster = config.ClusterSettings{
		Bind:             c.String("bind"),
		Advertise:        c.String("advertise"),
		Join:             c.StringSlice("join"),
		GossipInterval:   c.Duration("gossip-interval"),
		GossipNodes:      c.Int("gossip-nodes"),
		FanoutLimit:      c.Int("fanout-limit"),
		GossipMode:       c.String("gossip-mode"),
		AggregateAbove:   c.Int("aggregate-above"),
		PushPullInterval: c.Duration("push-pull-interval"),
		RejoinInterval:   c.Duration("rejoin-interval"),
		KeyringFile:      c.String("gossip-keyring"),
		Label:            c.String("cluster-label"),
	}
	s.Cluster.Insecure = c.Bool("insecure-gossip")
	if s.Cluster.FirstContact, err = config.ParseFirstContact(c.String("first-contact")); err != nil {
		return fmt.Errorf("--first-contact: %w", err)
	}
	if s.Cluster.Key, err = gossipKey(c); err != nil {
		return err
	}

	level := hclog.LevelFromString(c.String("log-level"))
	if level == hclog.NoLevel {
		return fmt.Errorf("--log-level %q: want trace, debug, info, warn or error", c.String("log-level"))
	}
	log := hclog.New(&hclog.LoggerOptions{Name: "sluiced", Level: level, JSONFormat: c.Bool("log-json"), Output: os.Stderr})

	census, err := installCensusSink()
	if err != nil {
		return err
	}
	d, err := daemon.New(daemon.Config{Settings: s, Logger: log, Census: census})
	if err != nil {
		return err
	}
	var builtIn atomic.Pointer[proxy.Server] // the built-in proxy, once started
	var api atomic.Pointer[httpapi.Server]   // the HTTP decision API, once started
	ctx, stop := handleSignals(func() {
		_ = d.Reload() // logged by Reload; a bad file keeps the last good rules
		if p := builtIn.Load(); p != nil {
			p.Reload()
		}
		if a := api.Load(); a != nil {
			_ = a.Reload() // logged; bad routes keep the last good ones
		}
	})
	defer stop()
	if listen := c.String("proxy-listen"); listen != "" {
		p, err := startBuiltInProxy(ctx, listen, c.String("proxy-upstream"), c.String("proxy-routes"), d, log.Named("proxy"))
		if err != nil {
			return err
		}
		defer p.Shutdown()
		builtIn.Store(p)
	}
	waitRLS, err := startRLS(ctx, s, d, log.Named("envoy"))
	if err != nil {
		return err
	}
	defer waitRLS()
	if s.HTTPAddr != "" {
		a, err := startHTTPAPI(ctx, d, s, log.Named("httpapi"))
		if err != nil {
			return err
		}
		defer func() {
			sctx, cancel := context.WithTimeout(context.Background(), s.ShutdownTimeout)
			defer cancel()
			a.Shutdown(sctx)
		}()
		api.Store(a)
	}
	return d.Run(ctx)
}
