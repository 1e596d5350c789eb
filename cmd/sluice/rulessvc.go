package main

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/sluicelabs/sluice/internal/rulesapi"
)

// The `sluice rules SUBCOMMAND` commands talk to a sluice-rules service (not
// to a daemon): teams keep their rules in Git and apply them from CI with
// push, review them with diff, and undo with rollback. Their exit codes:
//
//	0  done (diff: no difference)
//	1  refused: invalid rules, a loosening without --confirm, a stale
//	   --if-version or a concurrent change, nothing to roll back
//	2  error: service unreachable, bad token, forbidden, bad usage
//	3  diff: the file and the service differ (push would change something)

// defaultRulesServer is where sluice-rules listens unless told otherwise.
const defaultRulesServer = "http://127.0.0.1:9470"

// rulesServiceDescription is appended to `sluice rules`'s own description.
const rulesServiceDescription = "Its subcommands manage rules on a sluice-rules service (--server, $SLUICE_RULES_SERVER) with a\n" +
	"team's token ($SLUICE_RULES_TOKEN or --token-file): push, diff, pull, history, rollback, audit;\n" +
	"an admin token manages teams and tokens. Their exit codes: 0 done (diff: no difference), 1 refused\n" +
	"(invalid rules, a loosening without --confirm, a concurrent change), 2 error, 3 diff: differences."

// rulesServiceCommands are the subcommands of `sluice rules`.
func rulesServiceCommands() []*cli.Command {
	return []*cli.Command{
		pushCommand(),
		diffCommand(),
		pullCommand(),
		historyCommand(),
		rollbackCommand(),
		auditCommand(),
		teamsCommand(),
		tokensCommand(),
		serviceCommand(&cli.Command{
			Name:  "whoami",
			Usage: "show what the token is: admin, or which team's",
		}, whoami),
		serviceCommand(&cli.Command{
			Name:  "status",
			Usage: "show the version the service serves to daemons, and how many teams and rules it has",
		}, serviceStatus),
	}
}

// serviceFlags say how to reach the rules service and who is asking; every
// subcommand takes them.
func serviceFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "server", Value: defaultRulesServer, EnvVars: []string{"SLUICE_RULES_SERVER"}, Usage: "the sluice-rules service, URL or HOST:PORT"},
		&cli.StringFlag{Name: "token", EnvVars: []string{"SLUICE_RULES_TOKEN"}, Usage: "API token (prefer the variable or --token-file: a flag shows in ps)"},
		&cli.StringFlag{Name: "token-file", EnvVars: []string{"SLUICE_RULES_TOKEN_FILE"}, Usage: "read the API token from this file"},
		&cli.StringFlag{Name: "team", EnvVars: []string{"SLUICE_RULES_TEAM"}, Usage: "the team (default: the token's own; an admin token must name one)"},
		&cli.DurationFlag{Name: "timeout", Value: 30 * time.Second, Usage: "how long to wait for each answer"},
		&cli.BoolFlag{Name: "json", Usage: "print the service's answer as JSON"},
	}
}

// service is what a subcommand needs: a client, and the team when it
// works on one.
type service struct {
	client *rulesapi.Client
	base   string
	flag   string // --team as given
}

// serviceAction is a subcommand's work. It returns its exit code, or an
// error: an *rulesapi.APIError maps to an exit code (see serviceExit), any
// other error is exit 2.
type serviceAction func(c *cli.Context, s *service) (int, error)

// serviceCommand gives cmd the service flags and an Action that builds the
// client, runs act and reports its error as "sluice rules NAME: ...".
func serviceCommand(cmd *cli.Command, act serviceAction) *cli.Command {
	cmd.Flags = append(serviceFlags(), cmd.Flags...)
	cmd.Action = func(c *cli.Context) error {
		s, err := newService(c)
		code := exitError
		if err == nil {
			code, err = act(c, s)
		}
		if err != nil {
			code = serviceExit(err)
			fmt.Fprintf(c.App.ErrWriter, "sluice rules %s: %v\n", cmd.Name, explain(err))
		}
		return status(code)
	}
	return cmd
}

// newService reads the flags.
func newService(c *cli.Context) (*service, error) {
	base, err := serverURL(c.String("server"))
	if err != nil {
		return nil, err
	}
	if c.Duration("timeout") <= 0 {
		return nil, fmt.Errorf("--timeout %s must be positive", c.Duration("timeout"))
	}
	token, err := readToken(c.String("token"), c.String("token-file"))
	if err != nil {
		return nil, err
	}
	client := rulesapi.NewClient(base, token)
	client.HTTP.Timeout = c.Duration("timeout")
	return &service{client: client, base: base, flag: c.String("team")}, nil
}

// serverURL accepts a URL or a bare HOST:PORT (http).
func serverURL(addr string) (string, error) {
	addr = strings.TrimSpace(addr)
	if addr == "" {
		return "", errors.New("--server is empty: give the rules service's address, e.g. 127.0.0.1:9470")
	}
	if !strings.Contains(addr, "://") {
		addr = "http://" + addr
	}
	u, err := url.Parse(addr)
	if err != nil {
		return "", fmt.Errorf("--server %q: %w", addr, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" || u.Host == "" || u.User != nil || u.RawQuery != "" {
		return "", fmt.Errorf("--server %q: want http(s)://HOST:PORT[/PREFIX] or HOST:PORT", addr)
	}
	return u.Scheme + "://" + u.Host + strings.TrimSuffix(u.EscapedPath(), "/"), nil
}

// readToken returns the token from the flag (or its variable), or from the
// file; giving both is an error, so that which one is used is never a guess.
func readToken(token, file string) (string, error) {
	switch {
	case token != "" && file != "":
		return "", errors.New("both a token (--token or $SLUICE_RULES_TOKEN) and a token file (--token-file or $SLUICE_RULES_TOKEN_FILE) are set: give one")
	case file != "":
		data, err := os.ReadFile(file)
		if err != nil {
			return "", fmt.Errorf("read the token file: %w", err)
		}
		token = strings.TrimSpace(string(data))
		if token == "" {
			return "", fmt.Errorf("the token file %s is empty", file)
		}
	}
	if strings.ContainsAny(token, " \t\r\n") {
		return "", errors.New("the token holds white space: is it the whole file of something else?")
	}
	return token, nil
}

// needToken fails when no token was given, before a request is sent that
// could only answer 401.
func needToken(c *cli.Context) error {
	if c.String("token") == "" && c.String("token-file") == "" {
		return errors.New("no token: set $SLUICE_RULES_TOKEN or --token-file (a team's token, or the admin token)")
	}
	return nil
}

// team is the team a command works on: --team, or the token's own.
func (s *service) team(c *cli.Context) (string, error) {
	if err := needToken(c); err != nil {
		return "", err
	}
	if s.flag != "" {
		return s.flag, nil
	}
	who, err := s.client.WhoAmI(c.Context)
	if err != nil {
		return "", fmt.Errorf("ask the service whose token this is: %w", err)
	}
	if who.Team == "" {
		return "", errors.New("this is an admin token: name the team with --team or $SLUICE_RULES_TEAM")
	}
	return who.Team, nil
}

// serviceExit maps an error to an exit code: the service refusing a change
// for what it is (invalid, loosening, conflicting, too large) is 1, anything
// else 2.
func serviceExit(err error) int {
	var ae *rulesapi.APIError
	if errors.As(err, &ae) {
		switch ae.Code {
		case rulesapi.CodeInvalidRules, rulesapi.CodeConfirmRequired, rulesapi.CodeStale, rulesapi.CodeExists, rulesapi.CodeTooLarge:
			return exitRefused
		}
	}
	var r refusal
	if errors.As(err, &r) {
		return exitRefused
	}
	return exitError
}

// refusal is an error a command itself counts as refused (exit 1).
type refusal struct{ msg string }

func (r refusal) Error() string { return r.msg }

// explain adds what to do to the service's refusals.
func explain(err error) error {
	var ae *rulesapi.APIError
	if !errors.As(err, &ae) {
		return unreachable(err)
	}
	switch ae.Code {
	case rulesapi.CodeConfirmRequired:
		return fmt.Errorf("%w\nthis removes or loosens limits: run again with --confirm if that is meant", err)
	case rulesapi.CodeStale:
		return fmt.Errorf("%w\nthe team's rules changed since (now %s): look at `sluice rules diff` or `history` and run again", err, orDash(ae.Current))
	case rulesapi.CodeUnauthorized:
		return fmt.Errorf("%w\nthe token is unknown or revoked", err)
	case rulesapi.CodeForbidden:
		return fmt.Errorf("%w\na team's token reaches only its own team's rules; teams and tokens need the admin token", err)
	}
	return err
}

// unreachable words a transport error: which service, and how to point at
// another.
func unreachable(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		if ue.Timeout() {
			return fmt.Errorf("%w (no answer in time: --timeout)", err)
		}
		return fmt.Errorf("cannot reach the rules service (is sluice-rules running there? --server, $SLUICE_RULES_SERVER): %w", err)
	}
	return err
}

// versionFlag is --if-version: refuse the change unless the team's rules
// are still at that version.
func versionFlag() cli.Flag {
	return &cli.StringFlag{Name: "if-version", Usage: "refuse (exit 1) unless the team's rules are still at this version (N or \"vN\", as diff and history show it)"}
}

// ifMatch returns the If-Match a change is sent with: --if-version when
// given, else the ETag the team's rules had when read.
func ifMatch(c *cli.Context, current string) (string, error) {
	v := strings.TrimSpace(c.String("if-version"))
	if v == "" {
		return current, nil
	}
	if n, ok := rulesapi.ParseVersionETag(v); ok {
		return rulesapi.VersionETag(n), nil
	}
	n, err := strconv.ParseInt(strings.TrimPrefix(v, "v"), 10, 64)
	if err != nil || n < 0 {
		return "", fmt.Errorf("--if-version %q: want a version number, e.g. 7 or v7", v)
	}
	return rulesapi.VersionETag(n), nil
}

// statusCode is the HTTP status of an API error, 0 for any other error.
func statusCode(err error) int {
	var ae *rulesapi.APIError
	if errors.As(err, &ae) {
		return ae.Status
	}
	return 0
}
