package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/sluicelabs/sluice/config"
	"github.com/sluicelabs/sluice/internal/rulesapi"
)

// pushCommand is `sluice rules push FILE`: replace the team's rules on the
// service with the file's, as CI does after a merge.
func pushCommand() *cli.Command {
	return serviceCommand(&cli.Command{
		Name:      "push",
		Usage:     "replace the team's rules on the service with FILE's: exit 0 pushed (or nothing to change), 1 refused, 2 error",
		ArgsUsage: "FILE",
		Description: "FILE (\"-\": standard input) is a rules file with the team's own rule names (what pull writes): \"rules:\" and under it\n" +
			"rules as sluiced reads them; the service serves them to daemons as TEAM.RULE. It is first\n" +
			"validated here with the daemon's own parser (problems print as sluice lint prints them, exit 1),\n" +
			"then sent with If-Match: the team's rules as read just before (or --if-version), so a change made\n" +
			"meanwhile is never overwritten (exit 1: look at diff and push again). A change that removes or\n" +
			"loosens limits beyond the service's factor is refused (exit 1) unless --confirm. Prints what\n" +
			"changed, rule by rule, and the new version.",
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "confirm", Usage: "allow removing or loosening limits"},
			&cli.BoolFlag{Name: "dry-run", Usage: "validate and show the changes without storing them (as diff, but exit 0 on changes)"},
			versionFlag(),
		},
	}, push)
}

// diffCommand is `sluice rules diff FILE`: what push would change.
func diffCommand() *cli.Command {
	return serviceCommand(&cli.Command{
		Name:      "diff",
		Usage:     "show what pushing FILE would change: exit 0 no difference, 3 differences, 1 invalid, 2 error",
		ArgsUsage: "FILE",
		Description: "Validates FILE (\"-\": standard input) as push does, then asks the service for a dry run of pushing it: the service\n" +
			"validates it too and says, rule by rule, what would be created, changed or deleted, and which\n" +
			"changes would need --confirm. Nothing is stored. Exit 0 when the service holds exactly these\n" +
			"rules, 3 when a push would change something (a CI check can require 0 after a deploy), 1 when\n" +
			"FILE is invalid, 2 on error.",
	}, diff)
}

// pullCommand is `sluice rules pull [FILE]`: the team's rules, as a file.
func pullCommand() *cli.Command {
	return serviceCommand(&cli.Command{
		Name:      "pull",
		Usage:     "write the team's rules as a rules file (to FILE, or stdout): exit 0, 2 error",
		ArgsUsage: "[FILE]",
		Description: "The file has the team's own rule names and is what push takes back. FILE is replaced\n" +
			"atomically; the version pulled is printed on stderr.",
	}, pull)
}

// readTeamFile reads and validates a team's rules file ("-": standard
// input, named "stdin" in problems) with the daemon's parser. Problems print
// on stderr as sluice lint prints them, and make it return a refusal; a file
// that cannot be read is an error.
func readTeamFile(c *cli.Context, path string) (string, error) {
	stderr := c.App.ErrWriter
	var (
		data []byte
		err  error
	)
	if path == "-" {
		path = shownPath(path)
		data, err = io.ReadAll(io.LimitReader(c.App.Reader, rulesapi.MaxBodyBytes+1))
		if err == nil && len(data) > rulesapi.MaxBodyBytes {
			err = fmt.Errorf("more than the service's cap of %d bytes", rulesapi.MaxBodyBytes)
		}
		if err != nil {
			return "", fmt.Errorf("read the rules from standard input: %w", err)
		}
	} else if data, err = config.ReadRulesFile(path); err != nil {
		return "", err
	}
	rules, err := config.ParseRules(path, data)
	if err != nil {
		fes := fieldErrors(err)
		if len(fes) == 0 {
			return "", err
		}
		for _, fe := range fes {
			fmt.Fprintln(stderr, fe)
		}
		return "", refusal{fmt.Sprintf("%s: %d problem(s); nothing sent", path, len(fes))}
	}
	bad := 0
	for _, name := range rules.Names() {
		if !rulesapi.ValidName(name) {
			fmt.Fprintf(stderr, "%s: rules.%s: a team's rule name must be lower-case letters, digits and inner dashes, at most %d bytes (the service serves it as TEAM.%s)\n",
				path, name, rulesapi.MaxNameLen, name)
			bad++
		}
	}
	if bad > 0 {
		return "", refusal{fmt.Sprintf("%s: %d problem(s); nothing sent", path, bad)}
	}
	return string(data), nil
}

// fileProblems words the service's refusal of a file's rules as sluice lint
// words the parser's: FILE:LINE:COLUMN: rules.RULE.FIELD: problem.
func fileProblems(path string, err error) error {
	var ae *rulesapi.APIError
	if !errors.As(err, &ae) || ae.Code != rulesapi.CodeInvalidRules || len(ae.Problems) == 0 {
		return err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "the service refused the rules (%s):", ae.Message)
	for _, p := range ae.Problems {
		field := p.Field // outside any rule: a top-level field
		if p.Rule != "" {
			field = "rules." + p.Rule
			if p.Field != "" {
				field += "." + p.Field
			}
		}
		if field == "" {
			field = "-"
		}
		fmt.Fprintf(&b, "\n%s:%d:%d: %s: %s", path, max(p.Line, 1), max(p.Column, 1), field, p.Message)
	}
	return &wordedError{msg: b.String(), err: err}
}

// wordedError is err with another wording; errors.As still finds err.
type wordedError struct {
	msg string
	err error
}

func (e *wordedError) Error() string { return e.msg }
func (e *wordedError) Unwrap() error { return e.err }

// shownPath is how a file argument is named in messages.
func shownPath(path string) string {
	if path == "-" {
		return "stdin"
	}
	return path
}

// teamFileArg reads the command's FILE argument as a team document and
// resolves the team it is for; path is the file as messages name it.
func (s *service) teamFileArg(c *cli.Context) (doc, path, team string, err error) {
	if err := wantArgs(c, "FILE"); err != nil {
		return "", "", "", err
	}
	path = shownPath(c.Args().Get(0))
	if doc, err = readTeamFile(c, c.Args().Get(0)); err != nil {
		return "", "", "", err
	}
	if team, err = s.team(c); err != nil {
		return "", "", "", err
	}
	return doc, path, team, nil
}

func push(c *cli.Context, s *service) (int, error) {
	doc, path, team, err := s.teamFileArg(c)
	if err != nil {
		return exitError, err
	}
	_, etag, err := s.client.TeamRules(c.Context, team)
	if err != nil {
		return exitError, fmt.Errorf("read team %s's rules: %w", team, err)
	}
	match, err := ifMatch(c, etag)
	if err != nil {
		return exitError, err
	}
	res, err := s.client.PutTeamRules(c.Context, team, doc, rulesapi.ChangeOptions{IfMatch: match, Confirm: c.Bool("confirm"), DryRun: c.Bool("dry-run")})
	if err != nil {
		return exitError, fileProblems(path, err)
	}
	if c.Bool("json") {
		return exitOK, writeJSON(c.App.Writer, res)
	}
	printChanges(c.App.Writer, res)
	switch {
	case res.DryRun:
		fmt.Fprintf(c.App.Writer, "dry run: nothing stored; team %s's rules are at version %s\n", team, etagVersion(res.ETag))
	case !res.Changed:
		fmt.Fprintf(c.App.Writer, "no change: team %s's rules already are %s's (version %s)\n", team, path, etagVersion(res.ETag))
	default:
		fmt.Fprintf(c.App.Writer, "pushed %s to team %s: version %d\n", path, team, res.Version)
	}
	return exitOK, nil
}

func diff(c *cli.Context, s *service) (int, error) {
	doc, path, team, err := s.teamFileArg(c)
	if err != nil {
		return exitError, err
	}
	res, err := s.client.PutTeamRules(c.Context, team, doc, rulesapi.ChangeOptions{DryRun: true})
	if err != nil {
		return exitError, fileProblems(path, err)
	}
	code := exitOK
	if res.Changed {
		code = exitDrift
	}
	if c.Bool("json") {
		return code, writeJSON(c.App.Writer, res)
	}
	printChanges(c.App.Writer, res)
	if res.Changed {
		fmt.Fprintf(c.App.Writer, "%s differs from team %s's rules (version %s) in %d rule(s)\n", path, team, etagVersion(res.ETag), len(res.Changes))
	} else {
		fmt.Fprintf(c.App.Writer, "no difference: team %s's rules (version %s) are %s's\n", team, etagVersion(res.ETag), path)
	}
	return code, nil
}

func pull(c *cli.Context, s *service) (int, error) {
	if c.NArg() > 1 {
		return exitError, wantArgs(c, "[FILE]")
	}
	team, err := s.team(c)
	if err != nil {
		return exitError, err
	}
	tr, _, err := s.client.TeamRules(c.Context, team)
	if err != nil {
		return exitError, err
	}
	if c.Bool("json") {
		return exitOK, writeJSON(c.App.Writer, tr)
	}
	path := c.Args().Get(0)
	if path == "" || path == "-" {
		_, err := io.WriteString(c.App.Writer, tr.Document)
		return exitOK, err
	}
	if err := writeFileAtomic(path, []byte(tr.Document)); err != nil {
		return exitError, err
	}
	fmt.Fprintf(c.App.ErrWriter, "wrote team %s's %d rule(s), version %d, to %s\n", team, len(tr.Rules), tr.Version, path)
	return exitOK, nil
}

// writeFileAtomic replaces path with data: a temporary file beside it,
// synced, renamed over it.
func writeFileAtomic(path string, data []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	defer os.Remove(f.Name()) // after the rename, a no-op
	if _, err := f.Write(data); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := f.Chmod(0o644); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(f.Name(), path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// printChanges shows a change rule by rule: a sign and the rule, then the
// service's unified diff of its spec, indented; then what loosens limits.
func printChanges(w io.Writer, res rulesapi.ChangeResult) {
	signs := map[string]string{rulesapi.ActionCreate: "+", rulesapi.ActionUpdate: "~", rulesapi.ActionDelete: "-"}
	for _, ch := range res.Changes {
		sign := signs[ch.Action]
		if sign == "" {
			sign = "*"
		}
		fmt.Fprintf(w, "%s %s %s\n", sign, ch.Action, ch.Rule)
		text := ch.Diff
		if text == "" {
			text = specDiff(ch.Before, ch.After)
		}
		for line := range strings.Lines(text) {
			fmt.Fprintf(w, "    %s\n", strings.TrimRight(line, "\n"))
		}
	}
	for _, l := range res.Loosenings {
		key := ""
		if l.Key != "" {
			key = fmt.Sprintf(" (override %q)", l.Key)
		}
		fmt.Fprintf(w, "! loosens %s%s: %s\n", l.Rule, key, l.Reason)
	}
}

// specDiff shows a change without a diff from the service: the old lines
// with "-", the new with "+".
func specDiff(before, after string) string {
	var b strings.Builder
	for line := range strings.Lines(before) {
		b.WriteString("-" + line)
	}
	for line := range strings.Lines(after) {
		b.WriteString("+" + line)
	}
	return b.String()
}

// etagVersion shows an ETag as the version it names ("v7" -> "7").
func etagVersion(etag string) string {
	if v, ok := rulesapi.ParseVersionETag(etag); ok {
		return fmt.Sprint(v)
	}
	return orDash(etag)
}

// writeJSON prints v as one line of JSON.
func writeJSON(w io.Writer, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode the answer: %w", err)
	}
	_, err = w.Write(append(data, '\n'))
	return err
}
