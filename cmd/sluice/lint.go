package main

import (
	"fmt"
	"io"

	"github.com/urfave/cli/v2"

	"github.com/sluicelabs/sluice/config"
)

// lintCommand validates a rules file, and optionally a proxy routes file
// against it, with the daemon's own parsers: no daemon is needed, so a
// rules repository's CI can run it.
func lintCommand() *cli.Command {
	return &cli.Command{
		Name:      "lint",
		Usage:     "validate a rules file (and a proxy routes file against it) without a daemon: exit 0 valid, 1 problems, 2 error",
		ArgsUsage: "RULES [ROUTES]",
		Description: "Parses the files as sluiced would and prints every problem, one a line, as\n" +
			"file:line:column: field: problem. With a routes file, its limits are also checked against\n" +
			"the rules: each must name a rule the file defines and cost no more than its burst.\n" +
			"Exit 0 (and a one-line summary) when both are valid, 1 when there are problems, 2 when a\n" +
			"file cannot be read or the arguments are wrong.",
		Action: func(c *cli.Context) error {
			if n := c.NArg(); n < 1 || n > 2 {
				fmt.Fprintln(c.App.ErrWriter, "sluice lint: want RULES [ROUTES]")
				return exitCode(exitError)
			}
			return status(lint(c.App.Writer, c.App.ErrWriter, c.Args().Get(0), c.Args().Get(1)))
		},
	}
}

// lint checks the files and returns the exit code.
func lint(stdout, stderr io.Writer, rulesPath, routesPath string) int {
	code := exitOK
	// report prints err's problems; a file that cannot be read is an error,
	// anything else a problem in it.
	report := func(err error) {
		fes := fieldErrors(err)
		if len(fes) == 0 {
			fmt.Fprintln(stderr, "sluice lint:", err)
			code = exitError
			return
		}
		for _, fe := range fes {
			fmt.Fprintln(stderr, fe)
		}
		code = max(code, exitRefused)
	}
	rules, err := config.LoadRules(rulesPath)
	if err != nil {
		report(err)
	}
	var routes *config.ProxyRoutes
	if routesPath != "" {
		if routes, err = config.LoadProxyRoutes(routesPath); err != nil {
			report(err)
		} else if rules != nil {
			if err := routes.CheckRules(config.RulesLookup(rules)); err != nil {
				report(err)
			}
		}
	}
	if code != exitOK {
		return code
	}
	fmt.Fprintf(stdout, "%s: %d rules, valid (hash %s)", rulesPath, len(rules.ByName), rules.Hash)
	if routes != nil {
		fmt.Fprintf(stdout, "; %s: %d routes, valid against them", routesPath, len(routes.Routes))
	}
	fmt.Fprintln(stdout)
	return exitOK
}

// fieldErrors are the *config.FieldError leaves of an error tree, in order.
func fieldErrors(err error) []*config.FieldError {
	var out []*config.FieldError
	switch u := err.(type) {
	case *config.FieldError:
		return []*config.FieldError{u}
	case interface{ Unwrap() []error }:
		for _, e := range u.Unwrap() {
			out = append(out, fieldErrors(e)...)
		}
	case interface{ Unwrap() error }:
		out = fieldErrors(u.Unwrap())
	}
	return out
}
