package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestShipRulesImageHoldsOnlyTheBinaryAndServes: the rules service's image
// (deploy/container/Containerfile.rules-scratch), built with podman or
// buildah, saved and unpacked, holds the static sluice-rules binary alone
// with a numeric non-root user; chrooted into it as that user with the
// image's environment, it starts with no flags, creates its SQLite
// database and admin token in /data (a volume, in a pod), and answers.
func TestShipRulesImageHoldsOnlyTheBinaryAndServes(t *testing.T) {
	build, why := imageBuilder()
	if build == nil {
		skipImage(t, why)
	}
	if os.Geteuid() != 0 {
		skipImage(t, "not root: the image is built with root's podman storage and its filesystem entered with chroot")
	}
	tool := build[0]
	dir := tempDir(t)
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	arch := runtime.GOARCH
	ctx := filepath.Join(dir, "ctx")
	if err := os.MkdirAll(filepath.Join(ctx, "dist"), 0o755); err != nil {
		t.Fatal(err)
	}
	gobuild := exec.Command("go", "build", "-trimpath", "-ldflags=-buildid=", "-o", filepath.Join(ctx, "dist", "sluice-rules-linux-"+arch), ".")
	gobuild.Dir = filepath.Join("..", "sluice-rules")
	gobuild.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := gobuild.CombinedOutput(); err != nil {
		t.Fatalf("static build of sluice-rules: %v\n%s", err, out)
	}
	tag := fmt.Sprintf("localhost/sluice-rules-imagetest:%d", os.Getpid())
	bctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(bctx, tool, append(build[1:], "--layers=false", "--build-arg", "TARGETARCH="+arch,
		"-f", filepath.Join("..", "..", "deploy", "container", "Containerfile.rules-scratch"), "-t", tag, ctx)...)
	if out, err := cmd.CombinedOutput(); err != nil {
		skipImage(t, fmt.Sprintf("%s cannot build here: %v\n%s", tool, err, out))
	}
	t.Cleanup(func() { exec.Command(tool, "rmi", "-f", tag).Run() })

	out, err := exec.Command(tool, "inspect", "--format", "{{.Config.User}} {{json .Config.Entrypoint}} {{json .Config.Env}}", tag).CombinedOutput()
	if err != nil {
		t.Fatalf("inspect: %v\n%s", err, out)
	}
	user, rest, _ := strings.Cut(strings.TrimSpace(string(out)), " ")
	entry, envJSON, _ := strings.Cut(rest, " ")
	var env []string
	if err := json.Unmarshal([]byte(envJSON), &env); err != nil {
		t.Fatalf("image env %q: %v", envJSON, err)
	}
	if user != fmt.Sprintf("%d:%d", imageUID, imageUID) || entry != `["/sluice-rules"]` || !slices.Contains(env, "SLUICE_RULES_DATA_DIR=/data") {
		t.Errorf("image config: user %q, entrypoint %q, env %q", user, entry, env)
	}

	archive := filepath.Join(dir, "image.tar")
	if out, err := exec.Command(tool, "save", "--format", "docker-archive", "-o", archive, tag).CombinedOutput(); err != nil {
		t.Fatalf("save: %v\n%s", err, out)
	}
	rootfs := filepath.Join(dir, "rootfs")
	files := unpackImage(t, archive, filepath.Join(dir, "image"), rootfs)
	if len(files) != 1 || files[0] != "sluice-rules" {
		t.Fatalf("the image holds %q; want the binary alone", files)
	}

	// /data is the volume a pod mounts there, writable by the image's user.
	data := filepath.Join(rootfs, "data")
	if err := os.Mkdir(data, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(data, imageUID, imageUID); err != nil {
		t.Fatal(err)
	}
	listen := "127.0.0.1:" + freePort(t)
	runEnv := []string{}
	for _, e := range env {
		if !strings.HasPrefix(e, "SLUICE_RULES_LISTEN=") && !strings.HasPrefix(e, "PATH=") {
			runEnv = append(runEnv, e)
		}
	}
	runEnv = append(runEnv, "SLUICE_RULES_LISTEN="+listen) // loopback here; the image's is 0.0.0.0:9470
	c := exec.Command("/sluice-rules")
	c.Dir = "/"
	c.Env = runEnv
	c.SysProcAttr = &syscall.SysProcAttr{Chroot: rootfs, Credential: &syscall.Credential{Uid: imageUID, Gid: imageUID}}
	p := &proc{cmd: c, stderr: &syncBuffer{}, exited: make(chan error, 1)}
	c.Stderr = p.stderr
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.exited <- c.Wait() }()
	t.Cleanup(func() { c.Process.Kill(); <-p.exited })
	eventually(t, "sluice-rules from the image answers /readyz", func() bool {
		select {
		case err := <-p.exited:
			p.exited <- err
			t.Fatalf("sluice-rules from the image exited: %v\n%s", err, p.stderr.String())
		default:
		}
		resp, err := http.Get("http://" + listen + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	})
	for _, f := range []string{"rules.db", "admin-token"} {
		if _, err := os.Stat(filepath.Join(data, f)); err != nil {
			t.Errorf("/data/%s: %v", f, err)
		}
	}
	tok, err := os.ReadFile(filepath.Join(data, "admin-token"))
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest(http.MethodPost, "http://"+listen+"/v1/teams", strings.NewReader(`{"name":"payments"}`))
	req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(tok)))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("create a team on the image's service: %s", resp.Status)
	}
}
