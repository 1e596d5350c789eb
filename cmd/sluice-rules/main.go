// Command sluice-rules is the rules service: it keeps every team's
// rate-limit rules in a database (SQLite by default, PostgreSQL for
// production) and serves them to sluiced daemons as one rules document
// (sluiced --rules-url http://HOST:PORT/rules.yaml), with a JSON API under
// /v1 for teams to change their own rules. See the README section
// "Managing rules for many teams".
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "sluice-rules:", err)
		os.Exit(1)
	}
}
