package main

import "github.com/urfave/cli/v2"

// commands are sluice's subcommands.
func commands() []*cli.Command {
	return []*cli.Command{checkCommand()}
}
