package layers

import (
	"bufio"
	"bytes"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/sluicelabs/sluice"

// allowed is DESIGN.md's package table: for each package of the module, the
// packages of the module and the third-party packages (by path prefix) its
// non-test files may import. The standard library is always allowed. Test
// files are not checked: a test may wire a package to what is above it (a
// middleware's test runs a real daemon) without that reaching any binary.
var allowed = map[string][]string{
	// Leaves: the standard library and, for the codec, msgpack's codes.
	"bucket":               {},
	"internal/backoff":     {},
	"internal/buildinfo":   {},
	"internal/routecheck":  {},
	"internal/msgpackwire": {"github.com/vmihailenco/msgpack/v5/msgpcode"},
	"internal/localsocket": {},
	"internal/stallwatch":  {},
	"daemon/adminapi":      {},
	// The wire protocol and the settings.
	"ipc":    {"internal/msgpackwire", "internal/backoff", "internal/localsocket"},
	"config": {"bucket", "internal/localsocket", "internal/routecheck", "gopkg.in/yaml.v3"},
	// What services embed: the standard library and msgpack only (see
	// TestClientlibCarriesOnlyStdAndMsgpack).
	"clientlib":           {"ipc", "internal/backoff"},
	"clientlib/httplimit": {"clientlib", "ipc", "bucket", "internal/backoff", "internal/routecheck"},
	// Gossip knows buckets only through its Ledger interface.
	"gossip": {"internal/msgpackwire", "internal/backoff", "golang.org/x/net",
		"github.com/hashicorp/memberlist", "github.com/hashicorp/go-hclog", "github.com/hashicorp/go-metrics",
		"github.com/hashicorp/go-msgpack/v2", "github.com/hashicorp/go-sockaddr"},
	// The composition root.
	"daemon": {"bucket", "config", "ipc", "clientlib", "gossip", "daemon/adminapi", "internal/backoff", "internal/buildinfo",
		"github.com/hashicorp/memberlist", "github.com/hashicorp/go-hclog", "github.com/prometheus/client_golang",
		"github.com/prometheus/client_model", "github.com/fsnotify/fsnotify", "golang.org/x/sys"},
	"daemon/daemontest": {"daemon", "config"},
	// Envoy's rate limit service, deciding through the daemon's narrow
	// Decider interface (the daemon does not import it).
	"daemon/envoyrls": {"clientlib", "config", "ipc", "golang.org/x/sys",
		"github.com/envoyproxy/go-control-plane", "google.golang.org/grpc", "google.golang.org/protobuf"},
	// Network namespaces for tests of real processes (a test helper, used
	// only by tests, std and x/sys).
	"internal/netnstest": {"golang.org/x/sys"},
	// A DNS server whose answers a test sets (a headless Service's name),
	// used only by tests.
	"internal/dnstest": {"github.com/miekg/dns"},
	// The HTTP decision API: decisions in JSON, and forward-auth through the
	// proxy's routes mapping; it sits above daemon (which it never imports)
	// beside proxy, and cmd/sluiced wires it to the daemon.
	"daemon/httpapi": {"bucket", "clientlib", "clientlib/httplimit", "config", "ipc", "proxy",
		"github.com/hashicorp/go-hclog"},
	// Test helpers of the packages running gossip: memberlist's known
	// leftovers, for goleak.
	"gossip/gossiptest": {"go.uber.org/goleak"},
	// The HTTP proxy: a routes file made into httplimit's middleware.
	"proxy": {"clientlib", "clientlib/httplimit", "config",
		"github.com/hashicorp/go-hclog", "github.com/prometheus/client_golang"},
	// The in-process cluster harness: daemons, plus a fault-injecting
	// memberlist transport it hands the daemon through gossip.Config.
	"testcluster": {"daemon", "clientlib", "config", "gossip", "bucket", "internal/stallwatch",
		"github.com/hashicorp/memberlist", "github.com/hashicorp/go-hclog"},
	// The simulator: real syncers and stores over a simulated membership
	// and network on a virtual clock (gossip.Syncer.Simulate).
	"testcluster/sim": {"gossip", "bucket", "github.com/hashicorp/memberlist"},
	// Thin commands: flags, then a library call.
	"cmd/sluiced": {"daemon", "daemon/envoyrls", "daemon/httpapi", "proxy", "config", "gossip", "clientlib", "clientlib/httplimit", "ipc", "internal/buildinfo",
		"github.com/urfave/cli/v2", "github.com/hashicorp/go-metrics", "github.com/hashicorp/go-hclog", "github.com/prometheus/client_golang"},
	"cmd/sluice":      {"clientlib", "daemon/adminapi", "ipc", "config", "internal/buildinfo", "internal/rulesapi", "github.com/urfave/cli/v2"},
	"internal/layers": {},
	// The rules service's wire types and std-only client, shared by
	// cmd/sluice-rules (its own module) and `sluice rules`.
	"internal/rulesapi": {},
}

// forbiddenModules must not be in the main module's requirement graph:
// the report tools' plotting stack lives in the scripts module.
var forbiddenModules = []string{"gonum.org/v1/plot", "codeberg.org/go-latex/", "codeberg.org/go-pdf/", "codeberg.org/go-fonts/", "git.sr.ht/~sbinet/", "github.com/ajstarks/svgo", "github.com/golang/freetype"}

// goCmd runs the go command in the module's root and returns its output.
func goCmd(t *testing.T, args ...string) []byte {
	t.Helper()
	statInputs(t)
	cmd := exec.Command("go", args...)
	cmd.Dir = filepath.Join("..", "..")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, stderr.Bytes())
	}
	return out
}

// statInputs stats every Go file and go.mod of the module, so that go
// test's cache, which sees only the files this process opens (not what a go
// command it runs reads), keys the result on them: a changed import reruns
// the test instead of replaying a stale pass.
func statInputs(t *testing.T) {
	t.Helper()
	root := filepath.Join("..", "..")
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != root && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if !d.IsDir() && (strings.HasSuffix(path, ".go") || d.Name() == "go.mod") {
			_, err = os.Stat(path)
		}
		return err
	})
	if err != nil {
		t.Fatalf("stat the module's files: %v", err)
	}
}

// standard reports whether an import path is in the standard library (its
// first element has no dot).
func standard(path string) bool {
	first, _, _ := strings.Cut(path, "/")
	return !strings.Contains(first, ".")
}

// permits reports whether an import is on a package's list: a package of the
// module by its exact path, a third-party package by path prefix.
func permits(list []string, imp string) bool {
	if rel, ok := strings.CutPrefix(imp, module+"/"); ok {
		return slices.Contains(list, rel)
	}
	for _, p := range list {
		if imp == p || strings.HasPrefix(imp, p+"/") {
			return true
		}
	}
	return false
}

// imports lists each package of the module with what its non-test files import.
func imports(t *testing.T) map[string][]string {
	out := goCmd(t, "list", "-e", "-f", "{{.ImportPath}}{{range .Imports}} {{.}}{{end}}", "./...")
	graph := map[string][]string{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 {
			continue
		}
		pkg := strings.TrimPrefix(strings.TrimPrefix(f[0], module), "/")
		graph[pkg] = f[1:]
	}
	if len(graph) == 0 {
		t.Fatal("go list found no packages")
	}
	return graph
}

// TestImportsFollowTheTable fails if any package imports what DESIGN.md's
// table does not let it import, or is missing from the table.
func TestImportsFollowTheTable(t *testing.T) {
	for pkg, imps := range imports(t) {
		list, ok := allowed[pkg]
		if !ok {
			t.Errorf("package %s is not in the layering table: add it to DESIGN.md and to allowed", pkg)
			continue
		}
		for _, imp := range imps {
			if !standard(imp) && !permits(list, imp) {
				t.Errorf("%s imports %s, which the layering table does not allow (DESIGN.md: arrows point down)", pkg, imp)
			}
		}
	}
}

// TestClientlibCarriesOnlyStdAndMsgpack: what a service links when it embeds
// the client (or its HTTP middleware) is the standard library, msgpack's
// codes and Sluice's own packages, nothing else.
func TestClientlibCarriesOnlyStdAndMsgpack(t *testing.T) {
	out := goCmd(t, "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", "./clientlib", "./clientlib/httplimit")
	for _, dep := range strings.Fields(string(out)) {
		if !strings.HasPrefix(dep, module+"/") && !strings.HasPrefix(dep, "github.com/vmihailenco/msgpack/v5/") {
			t.Errorf("clientlib depends on %s: it must stay standard library and msgpack only", dep)
		}
	}
}

// TestNoPlottingInTheModule: the report tools' plotting, font, LaTeX and
// PDF packages are the scripts module's, never the main module's.
func TestNoPlottingInTheModule(t *testing.T) {
	out := goCmd(t, "mod", "graph")
	for _, line := range strings.Split(string(out), "\n") {
		for _, bad := range forbiddenModules {
			if strings.Contains(line, " "+bad) || strings.HasPrefix(line, bad) {
				t.Errorf("go mod graph: %s (belongs in scripts/go.mod)", line)
			}
		}
	}
}
