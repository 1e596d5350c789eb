// Command sluice is the operator's CLI for a local sluiced daemon.
//
//	sluice check   [--cost N] [--json] [--socket PATH] RULE KEY
//	sluice doctor  [--socket PATH] [--daemon-uids UIDS]
//	sluice members [--json] [--admin URL]
//	sluice rules   [--json] [--admin URL]
//	sluice rules   push|diff|pull|history|rollback|audit|teams|tokens|whoami|status [--server URL] ...
//	sluice inspect [--json] [--admin URL] RULE KEY
//	sluice reload  [--json] [--admin URL]
//	sluice reset   [--json] [--admin URL] RULE KEY
//	sluice watch   [--json] [--admin URL] [--interval D] [--count N] RULE KEY
//
// check asks for a decision over the daemon's Unix socket; doctor explains
// whether and how this process reaches that socket; the others talk to
// its admin HTTP endpoint (--admin, default http://127.0.0.1:9464 or
// $SLUICE_ADMIN; "host:port" without a scheme is accepted), except the
// subcommands of rules, which talk to a sluice-rules service (--server,
// $SLUICE_RULES_SERVER; see rulessvc.go). Flags go before the arguments.
// Exit codes are shared by every command:
//
//	0  done (check: admitted)
//	1  refused (check: throttled; reload: the daemon kept its old rules)
//	2  error: daemon unreachable, request refused, unknown rule, bad usage
//	3  members: some alive member runs different rules (drift); rules diff:
//	   the file and the service's rules differ
//
// With --json a command prints the daemon's answer as JSON on stdout (watch:
// one object per line); errors still go to stderr.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/urfave/cli/v2"

	"github.com/sluicelabs/sluice/internal/buildinfo"
)

// Exit codes, shared by every command.
const (
	exitOK      = 0
	exitRefused = 1
	exitError   = 2
	exitDrift   = 3
)

func main() {
	// Signals are handled here only: Ctrl-C cancels the context, which ends
	// a watch (exit 0) or abandons a request in flight.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := runContext(ctx, os.Args, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run is the CLI without signal handling, for tests.
func run(args []string, stdout, stderr io.Writer) int {
	return runContext(context.Background(), args, stdout, stderr)
}

func runContext(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	app := &cli.App{
		Name:           "sluice",
		Usage:          "talk to the local sluiced daemon",
		Description:    "Exit codes: 0 done, 1 refused (check: throttled; reload: new rules refused), 2 error, 3 rules drift (members; rules diff: differences).",
		Version:        buildinfo.Get().String(), // --version, as `sluice version`
		Writer:         stdout,
		ErrWriter:      stderr,
		Commands:       commands(),
		ExitErrHandler: func(*cli.Context, error) {},
	}
	err := app.RunContext(ctx, args)
	var code exitCode
	switch {
	case err == nil:
		return exitOK
	case errors.As(err, &code):
		return int(code)
	default:
		fmt.Fprintln(stderr, "sluice:", err)
		return exitError
	}
}

// exitCode ends a command with that exit status; the command has already
// said why.
type exitCode int

func (c exitCode) Error() string { return fmt.Sprintf("exit status %d", int(c)) }

// status turns a command's exit code into what an Action returns.
func status(code int) error {
	if code == exitOK {
		return nil
	}
	return exitCode(code)
}
