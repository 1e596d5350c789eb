package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
)

// TestShipRulesImageHoldsOnlyTheBinaryAndServes: the rules service's image
// (deploy/container/Containerfile.rules-scratch), built with podman or
// buildah, saved and unpacked, holds the static sluice-rules binary alone
// with a numeric non-root user; chrooted into it as that user with the
// image's environment, it starts with no flags, creates its SQLite
// database and admin token in /data (a volume, in a pod), and answers.
func TestShipRulesImageHoldsOnlyTheBinaryAndServes(t *testing.T) {
	t.Parallel()
	tool, tag, dir := buildImage(t, filepath.Join("..", "sluice-rules"), "sluice-rules", "Containerfile.rules-scratch")

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

	rootfs, files := saveImage(t, tool, tag, dir)
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
