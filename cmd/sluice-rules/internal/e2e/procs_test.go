package e2e

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicelabs/sluice/clientlib"
	"github.com/sluicelabs/sluice/cmd/sluice-rules/internal/pgtest"
	"github.com/sluicelabs/sluice/cmd/sluice-rules/internal/proctest"
)

// bin holds the binaries TestMain builds: sluice-rules, sluiced, sluice.
var bin struct {
	rules, sluiced, sluice string
}

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "e2e-bin")
	if err != nil {
		panic(err)
	}
	bin.rules, bin.sluiced, bin.sluice = filepath.Join(dir, "sluice-rules"), filepath.Join(dir, "sluiced"), filepath.Join(dir, "sluice")
	root := filepath.Join("..", "..", "..", "..") // the main module
	builds := []struct{ dir, out, pkg string }{
		{filepath.Join("..", ".."), bin.rules, "."},
		{root, bin.sluiced, "./cmd/sluiced"},
		{root, bin.sluice, "./cmd/sluice"},
	}
	for _, b := range builds {
		cmd := exec.Command("go", "build", "-o", b.out, b.pkg)
		cmd.Dir = b.dir
		if out, err := cmd.CombinedOutput(); err != nil {
			os.RemoveAll(dir)
			panic(fmt.Sprintf("build %s: %v\n%s", b.pkg, err, out))
		}
	}
	code := m.Run()
	pgtest.Stop()
	os.RemoveAll(dir)
	os.Exit(code)
}

// freePort returns a loopback port nothing listens on now.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// rulesService is a running sluice-rules.
type rulesService struct {
	*proctest.Proc
	url        string // http://127.0.0.1:PORT
	adminToken string
	stateDir   string
}

// servedURL is what daemons poll.
func (s *rulesService) servedURL() string { return s.url + "/rules.yaml" }

// startRulesService starts sluice-rules with no flags, as a new user would:
// its state (the SQLite database, the admin token) goes to the default data
// directory under $XDG_STATE_HOME, here a temporary one; only the listen
// address is moved off the default port (by its variable, as tests share
// the machine), and env may add variables (e.g. SLUICE_RULES_DB).
func startRulesService(t *testing.T, env ...string) *rulesService {
	t.Helper()
	home := proctest.TempDir(t, "e2e")
	addr := "127.0.0.1:" + strconv.Itoa(freePort(t))
	cmd := exec.Command(bin.rules)
	cmd.Dir = home
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + home, "XDG_STATE_HOME=" + filepath.Join(home, "state"),
		"SLUICE_RULES_LISTEN=" + addr}, env...)
	s := &rulesService{Proc: proctest.Start(t, cmd), url: "http://" + addr, stateDir: filepath.Join(home, "state", "sluice-rules")}
	proctest.Eventually(t, 60*time.Second, "sluice-rules answers /readyz", func() bool {
		resp, err := http.Get(s.url + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	tokenFile := filepath.Join(s.stateDir, "admin-token")
	data, err := os.ReadFile(tokenFile)
	if err != nil {
		t.Fatalf("the admin token: %v\n%s", err, s.Output.String())
	}
	if st, err := os.Stat(tokenFile); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("admin token file mode %v (%v), want 0600", st.Mode(), err)
	}
	if !strings.Contains(s.Output.String(), tokenFile) {
		t.Errorf("sluice-rules did not say where it wrote the admin token:\n%s", s.Output.String())
	}
	s.adminToken = strings.TrimSpace(string(data))
	return s
}

// daemon is a running sluiced taking its rules from the service.
type daemon struct {
	*proctest.Proc
	name   string
	client *clientlib.Client
}

// startDaemons starts n sluiced processes (named prefix1, prefix2, ...)
// polling rulesURL every interval, long-polling with wait when it is not
// zero. They are not clustered: each must get the rules from the service on
// its own.
func startDaemons(t *testing.T, prefix string, n int, rulesURL string, interval, wait time.Duration) []*daemon {
	t.Helper()
	dir := proctest.TempDir(t, "e2e")
	var ds []*daemon
	for i := range n {
		name := fmt.Sprintf("%s%d", prefix, i+1)
		sock := filepath.Join(dir, name+".sock")
		args := []string{"--socket", sock, "--rules-url", rulesURL, "--rules-poll-interval", interval.String(),
			"--admin-addr", "", "--node-name", name, "--log-level", "debug"}
		if wait > 0 {
			args = append(args, "--rules-wait", wait.String())
		}
		cmd := exec.Command(bin.sluiced, args...)
		cmd.Env = append(os.Environ(), "SLUICE_ADMIN_ADDR=")
		d := &daemon{Proc: proctest.Start(t, cmd), name: name}
		var c *clientlib.Client
		proctest.Eventually(t, 30*time.Second, "daemon "+name+" accepts a client", func() bool {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			var err error
			c, err = clientlib.Dial(ctx, clientlib.Options{SocketPath: sock, Timeout: 5 * time.Second})
			return err == nil
		})
		t.Cleanup(func() { c.Close() })
		d.client = c
		ds = append(ds, d)
	}
	return ds
}

// limit is the limit the daemon decides rule's checks under now (0: it has
// no such rule).
func (d *daemon) limit(t *testing.T, rule string) int64 {
	t.Helper()
	dec := d.client.Allow(context.Background(), rule, "probe")
	if dec.FailedOpen {
		t.Fatalf("daemon %s failed open: %v", d.name, dec.Err)
	}
	return dec.Limit
}

// waitLimit waits until every daemon decides rule under limit, and returns
// how long each took from start.
func waitLimit(t *testing.T, ds []*daemon, rule string, limit int64, start time.Time, within time.Duration) []time.Duration {
	t.Helper()
	took := make([]time.Duration, len(ds))
	for i, d := range ds {
		proctest.Eventually(t, within, fmt.Sprintf("daemon %s decides %s under limit %d", d.name, rule, limit), func() bool {
			if d.limit(t, rule) == limit {
				if took[i] == 0 {
					took[i] = time.Since(start)
				}
				return true
			}
			return false
		})
	}
	return took
}

// enforces checks that the daemon enforces limit on a fresh key: limit
// requests admitted (the burst is the limit), the next one refused.
func (d *daemon) enforces(t *testing.T, rule string, limit int64) {
	t.Helper()
	key := fmt.Sprintf("enforce-%d", time.Now().UnixNano())
	for i := range limit {
		if dec := d.client.Allow(context.Background(), rule, key); !dec.Allowed || dec.Limit != limit {
			t.Fatalf("daemon %s: request %d of %d on %s refused or under another limit: %+v", d.name, i+1, limit, rule, dec)
		}
	}
	if dec := d.client.Allow(context.Background(), rule, key); dec.Allowed {
		t.Fatalf("daemon %s: request %d on %s (limit %d) admitted: %+v", d.name, limit+1, rule, limit, dec)
	}
}

// cli runs the sluice CLI against the service with env (SLUICE_RULES_*)
// and returns its exit code and output.
func cli(t *testing.T, env []string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	return cliInput(t, env, "", args...)
}

// cliInput is cli with stdin on the CLI's standard input.
func cliInput(t *testing.T, env []string, stdin string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	cmd := exec.Command(bin.sluice, args...)
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.TempDir()}, env...)
	cmd.Stdin = strings.NewReader(stdin)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode(), out.String(), errOut.String()
	}
	if err != nil {
		t.Fatalf("run sluice %v: %v", args, err)
	}
	return 0, out.String(), errOut.String()
}

// mustCLI runs the CLI and fails the test unless it exits with want.
func mustCLI(t *testing.T, want int, env []string, args ...string) (stdout, stderr string) {
	t.Helper()
	code, stdout, stderr := cli(t, env, args...)
	if code != want {
		t.Fatalf("sluice %s: exit %d, want %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), code, want, stdout, stderr)
	}
	return stdout, stderr
}
