package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/sluicelabs/sluice/clientlib"
	"github.com/sluicelabs/sluice/ipc"
)

// Exit codes of sluice check, in its own words.
const (
	exitAdmitted  = exitOK
	exitThrottled = exitRefused
)

func checkCommand() *cli.Command {
	return &cli.Command{
		Name:      "check",
		Usage:     "ask for a decision: exit 0 admitted, 1 throttled, 2 error",
		ArgsUsage: "RULE KEY",
		Flags: append(daemonFlags(),
			&cli.Int64Flag{Name: "cost", Value: 1, Usage: "tokens the request costs"},
			&cli.BoolFlag{Name: "json", Usage: "print the decision as JSON"},
		),
		Action: func(c *cli.Context) error { return status(check(c)) },
	}
}

// daemonFlags say how to reach the daemon's socket; every command that talks to it takes them.
func daemonFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "socket", Value: ipc.DefaultSocketPath(), EnvVars: []string{"SLUICE_SOCKET"}, Usage: "the daemon's Unix socket"},
		&cli.DurationFlag{Name: "timeout", Value: 2 * time.Second, Usage: "how long to wait for the daemon"},
		&cli.StringFlag{Name: "daemon-uids", EnvVars: []string{clientlib.DaemonUIDsEnv}, Usage: "uids the daemon may run as, comma-separated; a socket served by another user is refused (default: root and your own uid)"},
	}
}

// daemonUIDs returns --daemon-uids, or nil for clientlib's default.
func daemonUIDs(c *cli.Context) ([]uint32, error) {
	s := c.String("daemon-uids")
	if s == "" {
		return nil, nil
	}
	uids, err := clientlib.ParseUIDs(s)
	if err != nil {
		return nil, fmt.Errorf("--daemon-uids: %w", err)
	}
	return uids, nil
}

// checkOutput is what --json prints.
type checkOutput struct {
	Allowed      bool    `json:"allowed"`
	Status       string  `json:"status"`
	Limit        int64   `json:"limit"`
	Remaining    int64   `json:"remaining"`
	RetryAfterMs float64 `json:"retry_after_ms"`
	ResetAfterMs float64 `json:"reset_after_ms"`
	Error        string  `json:"error,omitempty"`
}

func check(c *cli.Context) int {
	if c.NArg() != 2 {
		fmt.Fprintln(c.App.ErrWriter, "sluice check: want RULE KEY")
		return exitError
	}
	rule, key := c.Args().Get(0), c.Args().Get(1)
	timeout := c.Duration("timeout")
	ctx, cancel := context.WithTimeout(c.Context, timeout)
	defer cancel()
	// Fail closed: an operator asking by hand wants to hear that the daemon is
	// unreachable, not a made-up yes.
	uids, err := daemonUIDs(c)
	if err != nil {
		return report(c, checkOutput{Status: "error", Error: err.Error()}, exitError)
	}
	cl, err := clientlib.Dial(ctx, clientlib.Options{SocketPath: c.String("socket"), Timeout: timeout, FailClosed: true, Conns: 1, Name: "sluice-cli",
		DaemonUIDs: uids, Log: func(string, ...any) {}})
	if err != nil {
		return report(c, checkOutput{Status: "error", Error: err.Error()}, exitError)
	}
	defer cl.Close()
	d := cl.AllowN(ctx, rule, key, c.Int64("cost"))
	out := checkOutput{
		Allowed: d.Allowed, Status: d.Status.String(), Limit: d.Limit, Remaining: d.Remaining,
		RetryAfterMs: float64(d.RetryAfter) / float64(time.Millisecond),
		ResetAfterMs: float64(d.ResetAfter) / float64(time.Millisecond),
	}
	switch {
	case d.Err != nil:
		out.Status, out.Error = "error", d.Err.Error()
		var e *ipc.Error
		if errors.As(d.Err, &e) {
			out.Error = e.Message
		}
		return report(c, out, exitError)
	case d.Allowed:
		return report(c, out, exitAdmitted)
	default:
		return report(c, out, exitThrottled)
	}
}

func report(c *cli.Context, out checkOutput, code int) int {
	w := c.App.Writer
	if code == exitError {
		w = c.App.ErrWriter
	}
	if c.Bool("json") {
		json.NewEncoder(c.App.Writer).Encode(out)
		return code
	}
	switch code {
	case exitAdmitted:
		fmt.Fprintf(w, "admitted (%s): limit %d, remaining %d, full in %s\n", out.Status, out.Limit, out.Remaining, ms(out.ResetAfterMs))
	case exitThrottled:
		fmt.Fprintf(w, "throttled (%s): limit %d, retry after %s\n", out.Status, out.Limit, ms(out.RetryAfterMs))
	default:
		fmt.Fprintf(w, "error: %s\n", out.Error)
		if strings.Contains(out.Error, "cannot reach sluiced") {
			fmt.Fprintln(w, "(sluice doctor explains how this process reaches the socket)")
		}
	}
	return code
}

func ms(v float64) time.Duration {
	return time.Duration(v * float64(time.Millisecond)).Round(time.Millisecond)
}
