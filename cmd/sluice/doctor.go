package main

import (
	"context"
	"fmt"
	"os"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/sluicelabs/sluice/clientlib"
)

func doctorCommand() *cli.Command {
	return &cli.Command{
		Name:  "doctor",
		Usage: "explain whether and how this process reaches the daemon's socket: exit 0 reachable, 2 not",
		Description: "Shows the socket path and why it was chosen, each directory on the way and whether this\n" +
			"process may search it, the socket's owner and mode, whether this process may connect, who serves\n" +
			"the socket (SO_PEERCRED) and whether that uid is trusted, and the handshake; for every problem\n" +
			"it prints how to fix it. Run it as the user your service runs as (sudo -u USER sluice doctor).",
		Flags:  daemonFlags(),
		Action: func(c *cli.Context) error { return status(doctor(c)) },
	}
}

// socketOrigin says where --socket's value came from.
func socketOrigin(c *cli.Context) (path, why string) {
	path = c.String("socket")
	switch {
	case os.Getenv("SLUICE_SOCKET") != "" && path == os.Getenv("SLUICE_SOCKET"):
		return path, "$SLUICE_SOCKET is set"
	case c.IsSet("socket"):
		return path, "set by --socket"
	}
	_, why = clientlib.SocketPathChoice()
	return path, why
}

func doctor(c *cli.Context) int {
	if err := wantArgs(c); err != nil {
		fmt.Fprintf(c.App.ErrWriter, "sluice doctor: %v\n", err)
		return exitError
	}
	opts := clientlib.Options{Name: "sluice-doctor", DialTimeout: c.Duration("timeout")}
	var why string
	opts.SocketPath, why = socketOrigin(c)
	uids, err := daemonUIDs(c)
	if err != nil {
		fmt.Fprintf(c.App.ErrWriter, "sluice doctor: %v\n", err)
		return exitError
	}
	opts.DaemonUIDs = uids
	ctx, cancel := context.WithTimeout(c.Context, c.Duration("timeout"))
	defer cancel()
	d := clientlib.Diagnose(ctx, opts, why)
	w := c.App.Writer
	fmt.Fprintf(w, "this process: %s\n", d.Self)
	for _, s := range d.Steps {
		mark := "ok  "
		if !s.OK {
			mark = "FAIL"
		}
		fmt.Fprintf(w, "[%s] %s: %s\n", mark, s.Name, s.Found)
		if s.Fix != "" {
			fmt.Fprintf(w, "       fix: %s\n", s.Fix)
		}
	}
	if d.Problem != nil {
		fmt.Fprintf(w, "\nNOT REACHABLE: %s\n", strings.TrimPrefix(d.Problem.Error(), "sluice: "))
		return exitError
	}
	fmt.Fprintf(w, "\nreachable: sluiced at %s answers this process\n", d.Path)
	return exitOK
}
