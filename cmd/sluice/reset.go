package main

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/sluicelabs/sluice/daemon/adminapi"
)

// resetCommand is `sluice reset RULE KEY`: DELETE /v1/keys/{rule}/{key}.
func resetCommand() *cli.Command {
	return adminCommand(&cli.Command{
		Name:      "reset",
		Usage:     "clear a key's debt on the whole cluster: exit 0 reset everywhere, 1 some members not told, 2 error",
		ArgsUsage: "RULE KEY",
		Description: "Refills KEY under every limit of RULE, on the daemon asked and on every alive member of its\n" +
			"cluster (told over TCP; a member that is down or unreachable is told when it rejoins, within an\n" +
			"hour). Consumption from before the reset is never charged again; consumption after it is.\n" +
			"Exit 0 when it was delivered to every alive member, 1 when not (those are named on stderr; the key is\n" +
			"reset on the others), 2 on error, including a rule the daemon does not have.",
	}, reset)
}

func reset(c *cli.Context, a *adminClient) (int, error) {
	if err := wantArgs(c, "RULE", "KEY"); err != nil {
		return exitError, err
	}
	rule, key := c.Args().Get(0), c.Args().Get(1)
	var v adminapi.ResetView
	raw, err := a.call(c.Context, http.MethodDelete, keyPath(rule, key), &v)
	if err != nil {
		return exitError, noSuchRule(rule, err)
	}
	code := exitOK
	if len(v.Failed) > 0 {
		code = exitRefused
		fmt.Fprintf(c.App.ErrWriter, "sluice reset: %d of %d other members could not be told (%s); they keep the debt until they rejoin\n",
			len(v.Failed), v.Peers, strings.Join(v.Failed, ", "))
	}
	if c.Bool("json") {
		return code, printJSON(c.App.Writer, raw)
	}
	switch {
	case !v.Clustered:
		fmt.Fprintf(c.App.Writer, "reset %s %q on %s (not clustered)\n", v.Rule, v.Key, v.Node)
	default:
		fmt.Fprintf(c.App.Writer, "reset %s %q on %s and %d of %d other members\n", v.Rule, v.Key, v.Node, v.Told, v.Peers)
	}
	return code, nil
}
