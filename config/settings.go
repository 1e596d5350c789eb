package config

import (
	"fmt"
	"io/fs"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sluicelabs/sluice/bucket"
	"github.com/sluicelabs/sluice/internal/localsocket"
)

// Settings configures a daemon. DefaultSettings gives every field a working
// value, so a daemon started with no flags and no files runs.
type Settings struct {
	// SocketPath is the Unix socket the daemon serves. Default: localsocket.DefaultPath().
	SocketPath string
	// SocketMode is the socket file's permission bits. Default 0660: the
	// daemon's user and group may connect, nobody else.
	SocketMode fs.FileMode
	// SocketSharedVolume says the socket directory's parent is a volume only
	// one pod's containers mount (a Kubernetes emptyDir): it may be
	// world-writable without the sticky bit (see ipc.ListenOptions).
	SocketSharedVolume bool
	// AllowUIDs and AllowGIDs, when either is non-empty, admit only clients
	// whose uid is in AllowUIDs or whose primary gid is in AllowGIDs, as the
	// kernel reports them (SO_PEERCRED; Linux only). Root is not implicitly
	// allowed. Default: both empty, the socket's permissions alone decide.
	AllowUIDs []uint32
	AllowGIDs []uint32
	// RulesPath is the rules file; empty means the embedded default rules.
	RulesPath string
	// RulesURL, if set, is an HTTP(S) rules service polled for the rules
	// (conditional GET: ETag / If-None-Match, Last-Modified). Exclusive with
	// RulesPath.
	RulesURL string
	// RulesCache, with RulesURL, is a file where every good rules document
	// the service serves is kept (written atomically, mode 0600), and from
	// which the daemon takes its rules when the service is down at start.
	// Empty: no cache; a daemon started with the service down holds no rules
	// and admits every check until it answers.
	RulesCache string
	// RulesPollInterval is how often RulesURL is polled. Default 30s.
	RulesPollInterval time.Duration
	// RulesWait, when positive, long-polls RulesURL: each conditional
	// request asks the service (with "Prefer: wait=N") to hold it up to
	// this long until the rules change, and the next is sent as soon as it
	// is answered, so a change arrives within a round trip. A service that
	// does not hold requests is polled every RulesPollInterval as usual.
	// At most MaxRulesWait. Default 0: plain polling.
	RulesWait time.Duration
	// EnvoyConfig is an envoyproxy/ratelimit configuration (a YAML file, or
	// a directory of them, one domain each) translated into rules alongside
	// the rules file's and reloaded with them. Empty: none.
	EnvoyConfig string
	// GRPCListen are where Envoy's rate limit service (gRPC) is served:
	// "unix:/path" or "host:port" each. Empty: not served.
	GRPCListen []string
	// EnvoyResponseHeaders adds the IETF RateLimit and RateLimit-Policy
	// headers to the rate limit service's answers (response_headers_to_add),
	// as ratelimit's RESPONSE_HEADERS_ENABLED does.
	EnvoyResponseHeaders bool
	// AdminAddr is where the admin HTTP endpoint (/healthz, /readyz,
	// /metrics, /v1/...) listens; empty: not served. sluiced's flag defaults
	// to 127.0.0.1:9464 (loopback only).
	AdminAddr string
	// Pprof serves Go's profiles under /debug/pprof/ on the admin endpoint.
	Pprof bool
	// AdminAllowedHosts are further names (HOST or HOST:PORT) the admin
	// endpoint answers to in the Host header, besides its bound address (and
	// localhost when bound to loopback); any other Host is refused, so a web
	// page cannot reach it by DNS rebinding. Default: none.
	AdminAllowedHosts []string
	// AdminShowKeys shows client keys raw in the admin endpoint's listings
	// (/v1/top and the status page); by default they are redacted.
	AdminShowKeys bool
	// AdminMaxConns caps the admin endpoint's open connections; beyond it new
	// ones are answered 503 and closed. Default 64.
	AdminMaxConns int
	// MetricsAddr, if set, also serves /metrics, /healthz and /readyz (and
	// nothing else) there, for scraping from a network the admin API must
	// not be reachable from. Default: empty, not served.
	MetricsAddr string
	// HTTPAddr is where the HTTP decision API (POST /v1/check and the
	// forward-auth endpoint /v1/auth, package daemon/httpapi) listens; empty:
	// not served. It is a listener of its own, never the admin endpoint's:
	// it answers decisions to services and proxies, and nothing else.
	HTTPAddr string
	// HTTPRoutes is the routes file (the proxy's format) the forward-auth
	// endpoint maps requests to limits with; empty: every request limited
	// by client address under the rule "default", trusting loopback proxies.
	HTTPRoutes string
	// HTTPAllowedHosts are names, besides IP literals and localhost, the
	// decision API answers to in the Host header (DNS rebinding guard).
	HTTPAllowedHosts []string
	// HTTPMaxConns caps the decision API's open connections; beyond it new
	// ones are closed at once. Default 1024.
	HTTPMaxConns int
	// NoWatch turns off reloading the rules file when it changes (SIGHUP
	// still reloads).
	NoWatch bool
	// NodeName names this daemon in logs and in the cluster; it must be
	// unique in the cluster. Default: the hostname and a random suffix.
	NodeName string

	// MaxKeys caps buckets held in memory. Default 1,048,576.
	MaxKeys int
	// MaxKeyLen caps a key's length in bytes. Default 256.
	MaxKeyLen int
	// MaxLogBytes caps the bytes sliding logs hold beyond each log's first
	// entry (see bucket.StoreConfig.MaxLogBytes). Default 64 MiB.
	MaxLogBytes int64
	// MaxFrameBytes caps one IPC frame. Default 64 KiB.
	MaxFrameBytes int
	// MaxBatch caps the checks in one request. Default 16.
	MaxBatch int
	// MaxConns caps concurrent client connections. Default 4096.
	MaxConns int
	// SweepInterval is how often buckets that refilled to full are evicted. Default 10s.
	SweepInterval time.Duration
	// WriteTimeout bounds how long a reply may wait on a client that does not
	// read; the connection is closed after it. Default 5s.
	WriteTimeout time.Duration
	// ShutdownTimeout bounds how long shutdown waits for in-flight requests. Default 5s.
	ShutdownTimeout time.Duration

	// Cluster holds the gossip settings; the cluster is off unless
	// Cluster.Bind or Cluster.Join is set.
	Cluster ClusterSettings
}

// ClusterSettings configure membership and gossip (see package gossip).
type ClusterSettings struct {
	Bind           string   // ADDR:PORT memberlist listens on (UDP and TCP); default 0.0.0.0:7946 when only Join is set
	Advertise      string   // ADDR[:PORT] peers are told; default: the bound address
	Join           []string // peers to join, HOST:PORT; retried until one answers
	GossipInterval time.Duration
	GossipNodes    int
	FanoutLimit    int
	// GossipMode is auto (default), direct, relay or owner (see gossip.Config).
	GossipMode       string
	PushPullInterval time.Duration
	// FirstContact is how a daemon counts its share of a key's burst while
	// it holds a bucket it has just created (bucket.FirstContact): the
	// share of the crowd its rule's keys meet (auto, the default), at least
	// one token, or the share of the members rounded at random.
	FirstContact bucket.FirstContact
	// AggregateAbove is, in owner mode, how many users of one key its owner
	// counts at once before they go through aggregators (gossip.Config; 0:
	// gossip's default, 64; negative: never).
	AggregateAbove int
	// RejoinInterval is how often the Join names are resolved again to find
	// peers that were not there before (0: gossip's default, 30s).
	RejoinInterval time.Duration
	Key            []byte // 16, 24 or 32 bytes: encrypt gossip
	KeyringFile    string // JSON list of base64 keys, the first one primary
	Label          string // cluster label checked on every packet and stream; required with a key
	// Insecure lets a cluster that gossips beyond loopback (any Join, or a
	// Bind that is not a loopback address) run without a key: every host
	// that can reach it can then join, read and forge consumption. Without
	// it such a cluster needs Key or KeyringFile (see Validate).
	Insecure bool
}

// Enabled reports whether the daemon joins a cluster.
func (c ClusterSettings) Enabled() bool { return c.Bind != "" || len(c.Join) > 0 }

// Defaults for the daemon's limits.
const (
	DefaultSocketMode        fs.FileMode = 0o660
	DefaultMaxFrameBytes                 = 64 << 10
	DefaultMaxBatch                      = 16
	DefaultMaxConns                      = 4096
	DefaultSweepInterval                 = 10 * time.Second
	DefaultRulesPollInterval             = 30 * time.Second
	DefaultWriteTimeout                  = 5 * time.Second
	DefaultShutdownTimeout               = 5 * time.Second
	DefaultAdminMaxConns                 = 64
	DefaultHTTPMaxConns                  = 1024
)

// MaxRulesWait bounds Settings.RulesWait (a rules service may cap it lower).
const MaxRulesWait = 5 * time.Minute

// noID is (uid_t)-1, which the kernel uses for "no id"; no process has it.
const noID = math.MaxUint32

// DefaultSettings returns settings that run a single daemon with the embedded rules.
func DefaultSettings() Settings {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "sluiced"
	}
	// Unique even for several daemons on one host (tests, testcluster).
	host += "-" + strconv.FormatUint(rand.Uint64()&0xffff, 16)
	return Settings{
		SocketPath:        localsocket.DefaultPath(),
		SocketMode:        DefaultSocketMode,
		RulesPollInterval: DefaultRulesPollInterval,
		NodeName:          host,
		MaxKeys:           bucket.DefaultMaxKeys,
		MaxKeyLen:         bucket.DefaultMaxKeyLen,
		MaxLogBytes:       bucket.DefaultMaxLogBytes,
		MaxFrameBytes:     DefaultMaxFrameBytes,
		MaxBatch:          DefaultMaxBatch,
		MaxConns:          DefaultMaxConns,
		SweepInterval:     DefaultSweepInterval,
		WriteTimeout:      DefaultWriteTimeout,
		ShutdownTimeout:   DefaultShutdownTimeout,
		AdminMaxConns:     DefaultAdminMaxConns,
		HTTPMaxConns:      DefaultHTTPMaxConns,
	}
}

// Validate reports the first setting that cannot work.
func (s Settings) Validate() error {
	switch {
	case s.SocketPath == "":
		return fmt.Errorf("settings: socket path is empty")
	case s.SocketMode&^0o777 != 0:
		return fmt.Errorf("settings: socket mode %o has bits beyond 0777", s.SocketMode)
	case (len(s.AllowUIDs) > 0 || len(s.AllowGIDs) > 0) && !localsocket.PeerCredSupported:
		return fmt.Errorf("settings: allowed uids and gids: %w", localsocket.ErrPeerCredUnsupported)
	case slices.Contains(s.AllowUIDs, noID):
		return fmt.Errorf("settings: allowed uid %d is not a user id (it means \"none\")", noID)
	case slices.Contains(s.AllowGIDs, noID):
		return fmt.Errorf("settings: allowed gid %d is not a group id (it means \"none\")", noID)
	case s.RulesPath != "" && s.RulesURL != "":
		return fmt.Errorf("settings: a rules file and a rules URL are exclusive; give one")
	case s.RulesURL != "" && !strings.HasPrefix(s.RulesURL, "http://") && !strings.HasPrefix(s.RulesURL, "https://"):
		return fmt.Errorf("settings: rules URL %q: want http:// or https://", s.RulesURL)
	case s.RulesCache != "" && s.RulesURL == "":
		return fmt.Errorf("settings: a rules cache keeps a rules URL's rules; give a rules URL with it")
	case s.RulesURL != "" && s.RulesPollInterval <= 0:
		return fmt.Errorf("settings: rules poll interval must be positive")
	case s.RulesWait < 0 || s.RulesWait > MaxRulesWait:
		return fmt.Errorf("settings: rules wait %s must be in [0, %s]", s.RulesWait, MaxRulesWait)
	case s.RulesWait > 0 && s.RulesWait < time.Second:
		return fmt.Errorf("settings: rules wait %s: long-polls wait whole seconds; give at least 1s (or 0 for plain polling)", s.RulesWait)
	case s.MaxKeys < 1:
		return fmt.Errorf("settings: max keys %d must be at least 1", s.MaxKeys)
	case s.MaxKeyLen < 1 || s.MaxKeyLen > 64<<10:
		return fmt.Errorf("settings: max key length %d must be in [1, 65536]", s.MaxKeyLen)
	case s.MaxLogBytes < 0:
		return fmt.Errorf("settings: max log bytes %d must not be negative (0 takes the default)", s.MaxLogBytes)
	case s.MaxFrameBytes < 256 || s.MaxFrameBytes > 16<<20:
		return fmt.Errorf("settings: max frame bytes %d must be in [256, 16 MiB]", s.MaxFrameBytes)
	case s.MaxBatch < 1 || s.MaxBatch > 1024:
		return fmt.Errorf("settings: max batch %d must be in [1, 1024]", s.MaxBatch)
	case s.MaxConns < 1:
		return fmt.Errorf("settings: max connections %d must be at least 1", s.MaxConns)
	case s.AdminMaxConns < 1:
		return fmt.Errorf("settings: admin max connections %d must be at least 1", s.AdminMaxConns)
	case s.AdminAddr != "" && s.AdminAddr == s.MetricsAddr:
		return fmt.Errorf("settings: admin and metrics addresses are both %s; give them different ports", s.AdminAddr)
	case s.HTTPMaxConns < 1:
		return fmt.Errorf("settings: http api max connections %d must be at least 1", s.HTTPMaxConns)
	case s.HTTPAddr != "" && (s.HTTPAddr == s.AdminAddr || s.HTTPAddr == s.MetricsAddr):
		return fmt.Errorf("settings: the http decision api's address %s is also the admin or metrics address; give it a port of its own", s.HTTPAddr)
	case s.HTTPRoutes != "" && s.HTTPAddr == "":
		return fmt.Errorf("settings: http routes are the decision api's forward-auth routes; give an http listen address with them")
	case s.SweepInterval <= 0, s.WriteTimeout <= 0, s.ShutdownTimeout <= 0:
		return fmt.Errorf("settings: sweep interval, write timeout and shutdown timeout must be positive")
	}
	return s.Cluster.Validate()
}
