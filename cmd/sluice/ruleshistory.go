package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/sluicelabs/sluice/internal/rulesapi"
)

// historyCommand is `sluice rules history`: the team's versions.
func historyCommand() *cli.Command {
	return serviceCommand(&cli.Command{
		Name:  "history",
		Usage: "list the versions of the team's rules, newest first: exit 0, 2 error",
		Description: "Each line is a version: when, by whom (admin or team:NAME, and the token's id), what was done\n" +
			"(create, update, delete: one rule; replace: a push; rollback). --show N prints the team's rules\n" +
			"file as it was at version N.",
		Flags: []cli.Flag{
			&cli.IntFlag{Name: "limit", Value: 20, Usage: "show at most this many versions"},
			&cli.Int64Flag{Name: "show", Usage: "print the team's rules file as of this version instead of the list"},
		},
	}, history)
}

// rollbackCommand is `sluice rules rollback`: undo the team's latest change.
func rollbackCommand() *cli.Command {
	return serviceCommand(&cli.Command{
		Name:  "rollback",
		Usage: "undo the team's latest change (or go back to --to-version): exit 0 done, 1 refused, 2 error",
		Description: "Puts the team's rules back as they were before their latest change, as a new version (so a\n" +
			"second rollback undoes the first). It is sent with If-Match (the team's version as read, or\n" +
			"--if-version), so it never undoes a change it was not shown: exit 1 if one came meanwhile.\n" +
			"Going back to looser limits needs --confirm (exit 1 without). Exit 1 too when the team has no\n" +
			"earlier version.",
		Flags: []cli.Flag{
			&cli.Int64Flag{Name: "to-version", Usage: "go back to the team's rules as of this global version instead of one step"},
			&cli.BoolFlag{Name: "confirm", Usage: "allow removing or loosening limits"},
			&cli.BoolFlag{Name: "dry-run", Usage: "show what the rollback would change without doing it"},
			versionFlag(),
		},
	}, rollback)
}

// auditCommand is `sluice rules audit`: who changed what.
func auditCommand() *cli.Command {
	return serviceCommand(&cli.Command{
		Name:  "audit",
		Usage: "read the audit log, newest first: exit 0, 2 error",
		Description: "Every change: when, who (admin or team:NAME and the token's id), what (rule changes, pushes,\n" +
			"rollbacks, team and token operations), the version it made. -v prints each entry's before and\n" +
			"after. A team's token sees its own team's entries; the admin token all, or --team's.",
		Flags: []cli.Flag{
			&cli.IntFlag{Name: "limit", Value: 50, Usage: "show at most this many entries"},
			&cli.Int64Flag{Name: "before", Usage: "only entries older than this id (to page back)"},
			&cli.BoolFlag{Name: "verbose", Aliases: []string{"v"}, Usage: "print each entry's before and after"},
		},
	}, audit)
}

func history(c *cli.Context, s *service) (int, error) {
	if err := wantArgs(c); err != nil {
		return exitError, err
	}
	team, err := s.team(c)
	if err != nil {
		return exitError, err
	}
	limit := c.Int("limit")
	if c.IsSet("show") {
		limit = rulesapi.MaxRulesPerTeam // look far enough back for it
	}
	h, err := s.client.History(c.Context, team, limit)
	if err != nil {
		return exitError, err
	}
	if c.IsSet("show") {
		want := c.Int64("show")
		for _, e := range h.Entries {
			if e.Version == want {
				_, err := fmt.Fprint(c.App.Writer, e.Document)
				return exitOK, err
			}
		}
		return exitError, fmt.Errorf("team %s has no version %d in its last %d (history lists them)", team, want, len(h.Entries))
	}
	if c.Bool("json") {
		return exitOK, writeJSON(c.App.Writer, h)
	}
	if len(h.Entries) == 0 {
		fmt.Fprintf(c.App.Writer, "team %s has no versions yet\n", team)
		return exitOK, nil
	}
	tw := table(c.App.Writer)
	fmt.Fprintln(tw, "VERSION\tAT\tBY\tTOKEN\tACTION\tRULE")
	for _, e := range h.Entries {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\n", e.Version, stamp(e.At), e.Actor, orDash(e.TokenID), e.Action, orDash(e.Rule))
	}
	return exitOK, tw.Flush()
}

func rollback(c *cli.Context, s *service) (int, error) {
	if err := wantArgs(c); err != nil {
		return exitError, err
	}
	team, err := s.team(c)
	if err != nil {
		return exitError, err
	}
	tr, etag, err := s.client.TeamRules(c.Context, team)
	if err != nil {
		return exitError, fmt.Errorf("read team %s's rules: %w", team, err)
	}
	match, err := ifMatch(c, etag)
	if err != nil {
		return exitError, err
	}
	res, err := s.client.Rollback(c.Context, team, c.Int64("to-version"), rulesapi.ChangeOptions{IfMatch: match, Confirm: c.Bool("confirm"), DryRun: c.Bool("dry-run")})
	if err != nil {
		if statusCode(err) == 404 {
			return exitError, refusal{fmt.Sprintf("nothing to roll back: team %s has no earlier version (%v)", team, err)}
		}
		return exitError, err
	}
	if c.Bool("json") {
		return exitOK, writeJSON(c.App.Writer, res)
	}
	printChanges(c.App.Writer, res)
	switch {
	case res.DryRun:
		fmt.Fprintf(c.App.Writer, "dry run: nothing stored; team %s's rules are at version %d\n", team, tr.Version)
	case !res.Changed:
		fmt.Fprintf(c.App.Writer, "no change: team %s's rules already are what the rollback restores (version %d)\n", team, tr.Version)
	default:
		fmt.Fprintf(c.App.Writer, "rolled back team %s's rules from version %d: version %d\n", team, tr.Version, res.Version)
	}
	return exitOK, nil
}

func audit(c *cli.Context, s *service) (int, error) {
	if err := wantArgs(c); err != nil {
		return exitError, err
	}
	if err := needToken(c); err != nil {
		return exitError, err
	}
	l, err := s.client.Audit(c.Context, rulesapi.AuditQuery{Team: s.flag, Limit: c.Int("limit"), Before: c.Int64("before")})
	if err != nil {
		return exitError, err
	}
	if c.Bool("json") {
		return exitOK, writeJSON(c.App.Writer, l)
	}
	w := c.App.Writer
	tw := table(w)
	fmt.Fprintln(tw, "ID\tAT\tBY\tTOKEN\tACTION\tTEAM\tRULE\tVERSION")
	for _, e := range l.Entries {
		version := "-"
		if e.Version > 0 {
			version = fmt.Sprint(e.Version)
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", e.ID, stamp(e.At), e.Actor, orDash(e.TokenID), e.Action, orDash(e.Team), orDash(e.Rule), version)
		if c.Bool("verbose") {
			tw.Flush()
			for _, part := range []struct{ name, text string }{{"before", e.Before}, {"after", e.After}} {
				if part.text == "" {
					continue
				}
				fmt.Fprintf(w, "    %s:\n", part.name)
				for line := range strings.Lines(part.text) {
					fmt.Fprintf(w, "      %s\n", strings.TrimRight(line, "\n"))
				}
			}
		}
	}
	if err := tw.Flush(); err != nil {
		return exitError, err
	}
	if l.NextBefore > 0 {
		fmt.Fprintf(w, "older entries: --before %d\n", l.NextBefore)
	}
	return exitOK, nil
}

// stamp shows a time in UTC to the second.
func stamp(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format("2006-01-02T15:04:05Z")
}
