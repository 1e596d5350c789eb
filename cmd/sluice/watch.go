package main

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/sluicelabs/sluice/daemon/adminapi"
)

func watchCommand() *cli.Command {
	return adminCommand(&cli.Command{
		Name:      "watch",
		Usage:     "poll one key's bucket and print a line per poll until Ctrl-C or --count polls",
		ArgsUsage: "RULE KEY",
		Description: "Each line: time, balance, debt and a bar of the balance against the burst (# left, . spent).\n" +
			"With --json, one JSON object per line: the daemon's /v1/keys answer plus \"time\".\n" +
			"An error on the first poll exits 2 at once (unreachable daemon, unknown rule); later errors are\n" +
			"printed to stderr and polling goes on. Exit 0 when the last poll succeeded, else 2.",
		Flags: []cli.Flag{
			&cli.DurationFlag{Name: "interval", Value: time.Second, Usage: "time between polls"},
			&cli.IntFlag{Name: "count", Value: 0, Usage: "stop after this many polls; 0: until interrupted"},
		},
	}, watch)
}

// watchLine is one --json line of watch.
type watchLine struct {
	Time time.Time `json:"time"`
	adminapi.KeyView
}

func watch(c *cli.Context, a *adminClient) (int, error) {
	if err := wantArgs(c, "RULE", "KEY"); err != nil {
		return exitError, err
	}
	interval, count := c.Duration("interval"), c.Int("count")
	switch {
	case interval <= 0:
		return exitError, fmt.Errorf("--interval %s must be positive", interval)
	case count < 0:
		return exitError, fmt.Errorf("--count %d must be 0 (forever) or more", count)
	}
	rule, key := c.Args().Get(0), c.Args().Get(1)
	path := keyPath(rule, key)
	ctx, w := c.Context, c.App.Writer
	tick := time.NewTicker(interval)
	defer tick.Stop()
	code := exitOK
	for i := 0; count == 0 || i < count; i++ {
		if i > 0 {
			select {
			case <-ctx.Done():
				return code, nil
			case <-tick.C:
			}
		}
		var v adminapi.KeyView
		_, err := a.get(ctx, path, &v)
		at := time.Now()
		if ctx.Err() != nil {
			return code, nil // interrupted mid-poll: the last finished poll stands
		}
		if err != nil {
			err = noSuchRule(rule, err)
			if i == 0 {
				return exitError, err
			}
			fmt.Fprintf(c.App.ErrWriter, "sluice watch: %s %v\n", at.Format(watchTime), err)
			code = exitError
			continue
		}
		code = exitOK
		if c.Bool("json") {
			line, err := json.Marshal(watchLine{Time: at, KeyView: v})
			if err != nil {
				return exitError, fmt.Errorf("encoding a poll: %w", err)
			}
			if _, err := w.Write(append(line, '\n')); err != nil {
				return exitError, err
			}
			continue
		}
		if _, err := fmt.Fprintf(w, "%s  balance %8s  debt %8s  %s of %d\n",
			at.Format(watchTime), num(v.Balance), num(v.Debt), bar(v.Balance, v.Burst), v.Burst); err != nil {
			return exitError, err
		}
	}
	return code, nil
}

// watchTime is how watch stamps its lines.
const watchTime = "15:04:05.000"
