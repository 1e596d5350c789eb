package clientlib

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// A connect that finds the daemon's listen backlog full (a local user
// connecting faster than the daemon accepts) is retried within the dial
// timeout, not failed at once with EAGAIN.
func TestConnectRetriesAFullListenBacklog(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.sock")
	fd, err := syscall.Socket(syscall.AF_UNIX, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Bind(fd, &syscall.SockaddrUnix{Name: path}); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Listen(fd, 0); err != nil { // the smallest backlog the kernel allows
		t.Fatal(err)
	}
	ln, err := net.FileListener(os.NewFile(uintptr(fd), "listener"))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()

	// Fill the backlog: connect until the kernel answers EAGAIN.
	var held []net.Conn
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	for i := 0; ; i++ {
		if i == 64 {
			t.Fatal("the backlog never filled")
		}
		c, err := net.DialTimeout("unix", path, time.Second)
		if errors.Is(err, syscall.EAGAIN) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
	}

	done := make(chan error, 1)
	go func() {
		c, err := connectUnix(path, 10*time.Second)
		if err == nil {
			c.Close()
		}
		done <- err
	}()
	// Room comes when the daemon accepts one.
	c, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := <-done; err != nil {
		t.Fatalf("connect after the backlog freed: %v", err)
	}

	// With no room ever, the retries end at the timeout, not before.
	for {
		c, err := net.DialTimeout("unix", path, time.Second)
		if err != nil {
			break
		}
		held = append(held, c)
	}
	start := time.Now()
	if _, err := connectUnix(path, 50*time.Millisecond); err == nil {
		t.Fatal("connected to a backlog that stays full")
	}
	if took := time.Since(start); took < 40*time.Millisecond {
		t.Fatalf("gave up after %s, before its 50ms timeout", took)
	}
}
