// Package pgtest starts a real PostgreSQL server (Debian's postgresql
// package: initdb and postgres) for tests, on a temporary directory and a
// loopback port, as the postgres user when the tests run as root. Each
// test gets a database of its own.
//
// Where PostgreSQL is not installed the tests that need it skip with a
// message saying so, unless SLUICE_REQUIRE_POSTGRES=1 (CI), where they fail.
// It is a test helper: nothing but tests imports it.
package pgtest

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // the driver the tests use
)

// Server is a running PostgreSQL server.
type Server struct {
	dir  string
	port int
	cmd  *exec.Cmd
	done chan struct{}
	// adminURL reaches its "postgres" database as the superuser.
	adminURL string
	n        atomic.Int64
}

var shared struct {
	once sync.Once
	srv  *Server
	err  error
}

// URL returns the URL of a new, empty database on the package's shared
// server, starting the server at the first call. It skips the test (fails
// it with SLUICE_REQUIRE_POSTGRES=1) where PostgreSQL cannot be run.
func URL(t testing.TB) string {
	t.Helper()
	shared.once.Do(func() { shared.srv, shared.err = Start() })
	if shared.err != nil {
		if os.Getenv("SLUICE_REQUIRE_POSTGRES") == "1" {
			t.Fatalf("postgresql required (SLUICE_REQUIRE_POSTGRES=1) but: %v", shared.err)
		}
		t.Skipf("skipping: postgresql cannot be run here (apt-get install postgresql): %v", shared.err)
	}
	u, err := shared.srv.NewDatabase()
	if err != nil {
		t.Fatalf("create a test database: %v", err)
	}
	return u
}

// Stop stops the shared server, if URL started one. Call it from TestMain
// after m.Run.
func Stop() {
	if shared.srv != nil {
		shared.srv.Stop()
	}
}

// binDir finds the directory of initdb and postgres.
func binDir() (string, error) {
	if p, err := exec.LookPath("initdb"); err == nil {
		if real, err := filepath.EvalSymlinks(p); err == nil {
			return filepath.Dir(real), nil
		}
		return filepath.Dir(p), nil
	}
	matches, _ := filepath.Glob("/usr/lib/postgresql/*/bin/initdb")
	if len(matches) == 0 {
		return "", errors.New("initdb not found in PATH or /usr/lib/postgresql/*/bin")
	}
	return filepath.Dir(matches[len(matches)-1]), nil
}

// Start initializes and starts a server. Stop it with Stop.
func Start() (*Server, error) {
	bin, err := binDir()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "sluice-pg-")
	if err != nil {
		return nil, fmt.Errorf("start postgres: %w", err)
	}
	var cred *syscall.Credential
	if os.Geteuid() == 0 {
		// PostgreSQL refuses to run as root.
		u, err := user.Lookup("postgres")
		if err != nil {
			os.RemoveAll(dir)
			return nil, fmt.Errorf("start postgres as root: no postgres user: %w", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		if err := os.Chown(dir, uid, gid); err != nil {
			os.RemoveAll(dir)
			return nil, fmt.Errorf("start postgres: %w", err)
		}
		cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	}
	data := filepath.Join(dir, "data")
	initdb := exec.Command(filepath.Join(bin, "initdb"), "-D", data, "-A", "trust", "-U", "sluice", "-E", "UTF8", "--no-sync", "--locale=C")
	initdb.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	initdb.Dir = dir
	if out, err := initdb.CombinedOutput(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("initdb: %w\n%s", err, out)
	}
	port, err := freePort()
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	s := &Server{dir: dir, port: port, done: make(chan struct{})}
	s.cmd = exec.Command(filepath.Join(bin, "postgres"), "-D", data, "-p", strconv.Itoa(port), "-k", dir,
		"-c", "listen_addresses=127.0.0.1", "-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off", "-c", "max_connections=200")
	// Pdeathsig: a test binary that dies without Stop (a panic, a go test
	// timeout) takes its server with it instead of leaving it running.
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Setpgid: true, Pdeathsig: syscall.SIGKILL}
	logf, err := os.Create(filepath.Join(dir, "postgres.log"))
	if err == nil {
		s.cmd.Stdout, s.cmd.Stderr = logf, logf
		defer logf.Close()
	}
	if err := s.cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("start postgres: %w", err)
	}
	go func() { s.cmd.Wait(); close(s.done) }()
	s.adminURL = fmt.Sprintf("postgres://sluice@127.0.0.1:%d/postgres?sslmode=disable", port)
	deadline := time.Now().Add(60 * time.Second)
	for {
		db, err := sql.Open("pgx", s.adminURL)
		if err == nil {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			err = db.PingContext(ctx)
			cancel()
			db.Close()
		}
		if err == nil {
			return s, nil
		}
		select {
		case <-s.done:
			log, _ := os.ReadFile(filepath.Join(dir, "postgres.log"))
			os.RemoveAll(dir)
			return nil, fmt.Errorf("postgres exited at start: %s", log)
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			s.Stop()
			return nil, fmt.Errorf("postgres did not accept connections within 60 s: %w", err)
		}
	}
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// NewDatabase creates an empty database and returns its URL.
func (s *Server) NewDatabase() (string, error) {
	name := fmt.Sprintf("t%d_%d", os.Getpid(), s.n.Add(1))
	db, err := sql.Open("pgx", s.adminURL)
	if err != nil {
		return "", err
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := db.ExecContext(ctx, "CREATE DATABASE "+name); err != nil {
		return "", fmt.Errorf("create database %s: %w", name, err)
	}
	return strings.Replace(s.adminURL, "/postgres?", "/"+name+"?", 1), nil
}

// Stop stops the server (fast shutdown) and removes its files.
func (s *Server) Stop() {
	if s.cmd.Process != nil {
		s.cmd.Process.Signal(syscall.SIGINT)
		select {
		case <-s.done:
		case <-time.After(20 * time.Second):
			s.cmd.Process.Kill()
			<-s.done
		}
	}
	os.RemoveAll(s.dir)
}
