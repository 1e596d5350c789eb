package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/sluicelabs/sluice/daemon/adminapi"
)

// commands are sluice's subcommands.
func commands() []*cli.Command {
	return []*cli.Command{
		checkCommand(),
		doctorCommand(),
		adminCommand(&cli.Command{
			Name:  "members",
			Usage: "list the cluster's members and flag rules drift: exit 0, 3 on drift, 2 error",
			Description: "Shows each member's address, state, version and rules hash as this node sees them.\n" +
				"An alive member whose rules hash differs from this node's is marked DRIFT: it decides the\n" +
				"same keys under other limits. Exit 0 when there is no drift, 3 when there is (so a cron job\n" +
				"or a probe can alert on it; --json exits 3 too), 2 on error.",
		}, members),
		rulesCommand(),
		adminCommand(&cli.Command{
			Name:      "inspect",
			Usage:     "show one key's bucket without charging it: balance, debt, limit, per-origin counts",
			ArgsUsage: "RULE KEY",
			Description: "Exit 0, or 2 on error, including a rule the daemon does not have.\n" +
				"A key the daemon holds no bucket for is full (held: no).",
		}, inspect),
		adminCommand(&cli.Command{
			Name:  "reload",
			Usage: "make the daemon re-read its rules file now: exit 0 reloaded, 1 refused, 2 error",
			Description: "Prints the new rules hash. When the new file is invalid the daemon keeps the rules in\n" +
				"force; sluice prints the daemon's error (file:line:column: field: problem) and exits 1.",
		}, reload),
		watchCommand(),
		resetCommand(),
		versionCommand(),
		lintCommand(),
	}
}

// rulesCommand is `sluice rules`: the daemon's rules in force; its
// subcommands talk to a sluice-rules service (see rulessvc.go).
func rulesCommand() *cli.Command {
	cmd := adminCommand(&cli.Command{
		Name:        "rules",
		Usage:       "list the rules in force: rate, burst, overrides, mode; push, diff, pull... a team's rules to a rules service",
		UsageText:   "sluice rules [--admin URL] [--json]            (the local daemon's rules)\nsluice rules SUBCOMMAND [flags] [ARGS]        (a sluice-rules service: push, diff, pull, history, rollback, ...)",
		Description: "Without a subcommand: the rules the daemon (--admin) enforces now.\n" + rulesServiceDescription,
	}, rules)
	cmd.Subcommands = rulesServiceCommands()
	return cmd
}

// adminFlags say how to reach the daemon's admin endpoint; every command that
// talks to it takes them.
func adminFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "admin", Value: defaultAdmin, EnvVars: []string{"SLUICE_ADMIN"}, Usage: "the daemon's admin endpoint, URL or HOST:PORT"},
		&cli.DurationFlag{Name: "timeout", Value: 2 * time.Second, Usage: "how long to wait for each answer"},
		&cli.BoolFlag{Name: "json", Usage: "print the daemon's JSON instead of a table"},
	}
}

// adminAction is a command talking to the admin endpoint. It returns its exit
// code, or an error (exit 2) that adminCommand prints.
type adminAction func(c *cli.Context, a *adminClient) (int, error)

// adminCommand gives cmd the admin flags and an Action that builds the
// client, runs act and reports its error as "sluice NAME: ...".
func adminCommand(cmd *cli.Command, act adminAction) *cli.Command {
	cmd.Flags = append(adminFlags(), cmd.Flags...)
	cmd.Action = func(c *cli.Context) error {
		a, err := newAdminClient(c.String("admin"), c.Duration("timeout"))
		code := exitError
		if err == nil {
			code, err = act(c, a)
		}
		if err != nil {
			fmt.Fprintf(c.App.ErrWriter, "sluice %s: %v\n", cmd.Name, err)
			return exitCode(exitError)
		}
		return status(code)
	}
	return cmd
}

// wantArgs checks a command's positional arguments.
func wantArgs(c *cli.Context, names ...string) error {
	if c.NArg() == len(names) {
		return nil
	}
	want := strings.Join(names, " ")
	for _, a := range c.Args().Slice() {
		if strings.HasPrefix(a, "-") {
			return fmt.Errorf("want %s; flags go before the arguments (%q came after)", want, a)
		}
	}
	return fmt.Errorf("want %s, got %d argument(s)", want, c.NArg())
}

func members(c *cli.Context, a *adminClient) (int, error) {
	if err := wantArgs(c); err != nil {
		return exitError, err
	}
	var v adminapi.MembersView
	raw, err := a.get(c.Context, "/v1/members", &v)
	if err != nil {
		return exitError, err
	}
	code := exitOK
	if v.Drift {
		code = exitDrift
	}
	w := c.App.Writer
	if c.Bool("json") {
		return code, printJSON(w, raw)
	}
	tw := table(w)
	fmt.Fprintln(tw, "NAME\tADDR\tSTATE\tVERSION\tRULES\tDRIFT\tGOSSIP")
	alive, drifting := 0, 0
	for _, m := range v.Members {
		name, state, drift := m.Name, m.State, "-"
		if m.Self {
			name += " (self)"
		}
		if m.Since != "" {
			state += " since " + m.Since
		}
		if m.State == "alive" {
			alive++
		}
		if m.Drift {
			drift = "DRIFT"
			drifting++
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", name, orDash(m.Addr), state, orDash(m.Version), shortHash(m.RulesHash), drift, gossipCell(m, v.Clustered))
	}
	tw.Flush()
	switch {
	case v.Drift:
		fmt.Fprintf(w, "rules DRIFT: %d of %d alive members run rules other than this node's (%s); they decide the same keys under other limits\n",
			drifting, alive, shortHash(v.RulesHash))
	case !v.Clustered:
		fmt.Fprintf(w, "no rules drift: not clustered; this node runs rules %s\n", shortHash(v.RulesHash))
	default:
		fmt.Fprintf(w, "no rules drift: every alive member (%d) runs rules %s\n", alive, shortHash(v.RulesHash))
	}
	unencryptedLine(w, v.Unencrypted, alive)
	return code, nil
}

func rules(c *cli.Context, a *adminClient) (int, error) {
	if c.NArg() > 0 && !strings.HasPrefix(c.Args().First(), "-") {
		return exitError, fmt.Errorf("no subcommand %q (sluice rules --help lists them)", c.Args().First())
	}
	if err := wantArgs(c); err != nil {
		return exitError, err
	}
	var v adminapi.RulesView
	raw, err := a.get(c.Context, "/v1/rules", &v)
	if err != nil {
		return exitError, err
	}
	w := c.App.Writer
	if c.Bool("json") {
		return exitOK, printJSON(w, raw)
	}
	fmt.Fprintf(w, "rules from %s, hash %s; checks naming an unknown rule: %s\n", orDash(v.Source), shortHash(v.Hash), orDash(v.UnknownRule))
	tw := table(w)
	fmt.Fprintln(tw, "NAME\tRATE\tBURST\tALGORITHM\tOVERRIDES\tMODE")
	for _, r := range v.Rules {
		limits := r.Limits
		if len(limits) == 0 {
			limits = []adminapi.LimitView{{Algorithm: r.Algorithm, Limit: r.Limit, Period: r.Period, Burst: r.Burst}}
		}
		// A rule with several limits takes a line per limit; the name,
		// overrides and mode go on the first.
		for i, l := range limits {
			name, overrides, m := r.Name, strconv.Itoa(r.Overrides), mode(r)
			if i > 0 {
				name, overrides, m = "  +", "", ""
			}
			fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\n", name, rate(l.Limit, l.Period), l.Burst, orDash(l.Algorithm), overrides, m)
		}
	}
	return exitOK, tw.Flush()
}

// mode says how a rule enforces: enforce, shadow (never denies), soft N%
// (admits that share of the burst beyond the limit).
func mode(r adminapi.RuleView) string {
	var m []string
	if r.Shadow {
		m = append(m, "shadow")
	}
	if r.SoftPercent > 0 {
		m = append(m, fmt.Sprintf("soft %s%%", num(r.SoftPercent)))
	}
	if len(m) == 0 {
		return "enforce"
	}
	return strings.Join(m, ", ")
}

func inspect(c *cli.Context, a *adminClient) (int, error) {
	if err := wantArgs(c, "RULE", "KEY"); err != nil {
		return exitError, err
	}
	rule, key := c.Args().Get(0), c.Args().Get(1)
	var v adminapi.KeyView
	raw, err := a.get(c.Context, keyPath(rule, key), &v)
	if err != nil {
		return exitError, noSuchRule(rule, err)
	}
	w := c.App.Writer
	if c.Bool("json") {
		return exitOK, printJSON(w, raw)
	}
	held := "yes"
	if !v.Held {
		held = "no (the daemon holds no bucket for it: it is full)"
	}
	tw := table(w)
	fmt.Fprintf(tw, "rule\t%s\nkey\t%s\n", v.Rule, v.Key)
	fmt.Fprintf(tw, "balance\t%s\ndebt\t%s\n", num(v.Balance), num(v.Debt))
	fmt.Fprintf(tw, "limit\t%s %s\nburst\t%d\nheld\t%s\n", rate(v.Limit, v.Period), v.Algorithm, v.Burst, held)
	for i, l := range v.Limits {
		if i > 0 {
			fmt.Fprintf(tw, "also\t%s %s: balance %s\n", rate(l.Limit, l.Period), l.Algorithm, num(l.Balance))
		}
	}
	if len(v.Origins) == 0 {
		fmt.Fprintln(tw, "origins\tnone counted (no admissions in the current bucket, or not clustered)")
		return exitOK, tw.Flush()
	}
	fmt.Fprintln(tw, "origins\tORIGIN\tEPOCH\tUSED")
	for _, o := range v.Origins {
		fmt.Fprintf(tw, "\t%s\t%d\t%d\n", o.Origin, o.Epoch, o.Used)
	}
	return exitOK, tw.Flush()
}

// keyPath is the admin path of one key; both parts may hold any bytes.
func keyPath(rule, key string) string {
	return "/v1/keys/" + url.PathEscape(rule) + "/" + url.PathEscape(key)
}

// noSuchRule words the daemon's 404 for a rule it does not have; other
// errors pass through.
func noSuchRule(rule string, err error) error {
	var se *statusError
	if errors.As(err, &se) && se.Code == http.StatusNotFound && se.JSON {
		return fmt.Errorf("the daemon has no rule %q (sluice rules lists those in force)", rule)
	}
	return err
}

// reloadAnswer is what POST /v1/reload returns, refused or not.
type reloadAnswer struct {
	OK     bool   `json:"ok"`
	Hash   string `json:"rules_hash"`
	Source string `json:"rules_source"`
	Error  string `json:"error"`
}

func reload(c *cli.Context, a *adminClient) (int, error) {
	if err := wantArgs(c); err != nil {
		return exitError, err
	}
	var v reloadAnswer
	raw, err := a.post(c.Context, "/v1/reload", &v)
	var se *statusError
	refused := errors.As(err, &se) && se.Code == http.StatusUnprocessableEntity && se.JSON
	if refused {
		if jerr := json.Unmarshal(se.Body, &v); jerr != nil {
			return exitError, err
		}
	} else if err != nil {
		return exitError, err
	}
	if c.Bool("json") {
		if refused {
			return exitRefused, printJSON(c.App.Writer, se.Body)
		}
		return exitOK, printJSON(c.App.Writer, raw)
	}
	if refused {
		fmt.Fprintf(c.App.ErrWriter, "sluice reload: the daemon refused the new rules and keeps those in force (hash %s):\n", v.Hash)
		for line := range strings.Lines(v.Error) {
			fmt.Fprintf(c.App.ErrWriter, "  %s", strings.TrimRight(line, "\n")+"\n")
		}
		return exitRefused, nil
	}
	fmt.Fprintf(c.App.Writer, "rules reloaded from %s: hash %s\n", orDash(v.Source), v.Hash)
	return exitOK, nil
}
