package main

import (
	"errors"
	"fmt"

	"github.com/urfave/cli/v2"

	"github.com/sluicelabs/sluice/internal/rulesapi"
)

// teamsCommand is `sluice rules teams ...`: the admin's commands for teams.
func teamsCommand() *cli.Command {
	return &cli.Command{
		Name:  "teams",
		Usage: "create, list and delete teams (admin token)",
		Subcommands: []*cli.Command{
			serviceCommand(&cli.Command{
				Name:      "create",
				Usage:     "create a team and a token for it; print the token on stdout: exit 0, 1 exists, 2 error",
				ArgsUsage: "NAME",
				Description: "NAME is lower-case letters, digits and inner dashes; the team's rules are served as NAME.RULE.\n" +
					"The token is printed once, alone on stdout (TOKEN=$(sluice rules teams create payments)); the\n" +
					"service keeps only its hash. Give it to the team (e.g. as a CI secret). --no-token: none.",
				Flags: []cli.Flag{
					&cli.StringFlag{Name: "token-name", Value: "default", Usage: "a label for the team's first token, e.g. ci"},
					&cli.BoolFlag{Name: "no-token", Usage: "do not issue a token"},
				},
			}, createTeam),
			serviceCommand(&cli.Command{
				Name:  "list",
				Usage: "list the teams (a team's token: its own)",
			}, listTeams),
			serviceCommand(&cli.Command{
				Name:      "delete",
				Usage:     "delete a team, its rules and its tokens: exit 0, 1 refused, 2 error",
				ArgsUsage: "NAME",
				Description: "A team that has rules is deleted only with --confirm: its limits disappear from every daemon\n" +
					"at the next poll.",
				Flags: []cli.Flag{&cli.BoolFlag{Name: "confirm", Usage: "delete a team that has rules"}},
			}, deleteTeam),
		},
	}
}

// tokensCommand is `sluice rules tokens ...`: a team's tokens.
func tokensCommand() *cli.Command {
	return &cli.Command{
		Name:  "tokens",
		Usage: "issue, list and revoke a team's tokens (admin token; a team's token may list its own)",
		Subcommands: []*cli.Command{
			serviceCommand(&cli.Command{
				Name:      "create",
				Usage:     "issue a token for TEAM; print it on stdout",
				ArgsUsage: "TEAM",
				Flags:     []cli.Flag{&cli.StringFlag{Name: "name", Value: "default", Usage: "a label, e.g. ci or web"}},
			}, createToken),
			serviceCommand(&cli.Command{
				Name:      "list",
				Usage:     "list TEAM's tokens (ids and labels, never the tokens)",
				ArgsUsage: "TEAM",
			}, listTokens),
			serviceCommand(&cli.Command{
				Name:      "revoke",
				Usage:     "revoke one of TEAM's tokens by its id",
				ArgsUsage: "TEAM ID",
			}, revokeToken),
		},
	}
}

func createTeam(c *cli.Context, s *service) (int, error) {
	if err := wantArgs(c, "NAME"); err != nil {
		return exitError, err
	}
	if err := needToken(c); err != nil {
		return exitError, err
	}
	name := c.Args().Get(0)
	team, err := s.client.CreateTeam(c.Context, name)
	if err != nil {
		return exitError, err
	}
	if c.Bool("no-token") {
		if c.Bool("json") {
			return exitOK, writeJSON(c.App.Writer, team)
		}
		fmt.Fprintf(c.App.ErrWriter, "team %s created (no token issued)\n", team.Name)
		return exitOK, nil
	}
	tok, err := s.client.CreateToken(c.Context, team.Name, c.String("token-name"))
	if err != nil {
		return exitError, fmt.Errorf("team %s created, but issuing its token failed (sluice rules tokens create %s): %w", team.Name, team.Name, err)
	}
	return exitOK, printToken(c, tok)
}

// printToken prints a token issued now: alone on stdout (or as JSON), what
// it is on stderr.
func printToken(c *cli.Context, tok rulesapi.Token) error {
	if c.Bool("json") {
		return writeJSON(c.App.Writer, tok)
	}
	fmt.Fprintf(c.App.ErrWriter, "team %s: token %s (%s) issued; it is shown once, below; the service keeps only its hash\n", tok.Team, tok.ID, tok.Name)
	_, err := fmt.Fprintln(c.App.Writer, tok.Secret)
	return err
}

func listTeams(c *cli.Context, s *service) (int, error) {
	if err := wantArgs(c); err != nil {
		return exitError, err
	}
	if err := needToken(c); err != nil {
		return exitError, err
	}
	teams, err := s.client.ListTeams(c.Context)
	if err != nil {
		return exitError, err
	}
	if c.Bool("json") {
		return exitOK, writeJSON(c.App.Writer, rulesapi.TeamList{Teams: teams})
	}
	tw := table(c.App.Writer)
	fmt.Fprintln(tw, "TEAM\tRULES\tVERSION\tCREATED")
	for _, t := range teams {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\n", t.Name, t.Rules, t.Version, stamp(t.CreatedAt))
	}
	return exitOK, tw.Flush()
}

func deleteTeam(c *cli.Context, s *service) (int, error) {
	if err := wantArgs(c, "NAME"); err != nil {
		return exitError, err
	}
	if err := needToken(c); err != nil {
		return exitError, err
	}
	res, err := s.client.DeleteTeam(c.Context, c.Args().Get(0), c.Bool("confirm"))
	if err != nil {
		return exitError, err
	}
	if c.Bool("json") {
		return exitOK, writeJSON(c.App.Writer, res)
	}
	printChanges(c.App.Writer, res)
	fmt.Fprintf(c.App.Writer, "team %s deleted\n", c.Args().Get(0))
	return exitOK, nil
}

func createToken(c *cli.Context, s *service) (int, error) {
	if err := wantArgs(c, "TEAM"); err != nil {
		return exitError, err
	}
	if err := needToken(c); err != nil {
		return exitError, err
	}
	tok, err := s.client.CreateToken(c.Context, c.Args().Get(0), c.String("name"))
	if err != nil {
		return exitError, err
	}
	return exitOK, printToken(c, tok)
}

func listTokens(c *cli.Context, s *service) (int, error) {
	if err := wantArgs(c, "TEAM"); err != nil {
		return exitError, err
	}
	if err := needToken(c); err != nil {
		return exitError, err
	}
	toks, err := s.client.ListTokens(c.Context, c.Args().Get(0))
	if err != nil {
		return exitError, err
	}
	if c.Bool("json") {
		return exitOK, writeJSON(c.App.Writer, rulesapi.TokenList{Tokens: toks})
	}
	tw := table(c.App.Writer)
	fmt.Fprintln(tw, "ID\tNAME\tCREATED\tREVOKED")
	for _, t := range toks {
		revoked := "-"
		if t.RevokedAt != nil {
			revoked = stamp(*t.RevokedAt)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", t.ID, t.Name, stamp(t.CreatedAt), revoked)
	}
	return exitOK, tw.Flush()
}

func revokeToken(c *cli.Context, s *service) (int, error) {
	if err := wantArgs(c, "TEAM", "ID"); err != nil {
		return exitError, err
	}
	if err := needToken(c); err != nil {
		return exitError, err
	}
	team, id := c.Args().Get(0), c.Args().Get(1)
	if err := s.client.RevokeToken(c.Context, team, id); err != nil {
		return exitError, err
	}
	fmt.Fprintf(c.App.Writer, "token %s of team %s revoked\n", id, team)
	return exitOK, nil
}

func whoami(c *cli.Context, s *service) (int, error) {
	if err := wantArgs(c); err != nil {
		return exitError, err
	}
	if err := needToken(c); err != nil {
		return exitError, err
	}
	who, err := s.client.WhoAmI(c.Context)
	if err != nil {
		return exitError, err
	}
	if c.Bool("json") {
		return exitOK, writeJSON(c.App.Writer, who)
	}
	switch who.Kind {
	case rulesapi.ActorAdmin:
		fmt.Fprintf(c.App.Writer, "admin (token %s) on %s\n", who.TokenID, s.base)
	case rulesapi.ActorTeam:
		fmt.Fprintf(c.App.Writer, "team %s (token %s) on %s\n", who.Team, who.TokenID, s.base)
	default:
		return exitError, errors.New("the service answered an unknown kind of token: " + who.Kind)
	}
	return exitOK, nil
}

func serviceStatus(c *cli.Context, s *service) (int, error) {
	if err := wantArgs(c); err != nil {
		return exitError, err
	}
	if err := needToken(c); err != nil {
		return exitError, err
	}
	st, err := s.client.Status(c.Context)
	if err != nil {
		return exitError, err
	}
	if c.Bool("json") {
		return exitOK, writeJSON(c.App.Writer, st)
	}
	fmt.Fprintf(c.App.Writer, "%s serves version %d (ETag %s, %s): %d rules of %d teams at %s\n",
		s.base, st.Version, st.ETag, stamp(st.UpdatedAt), st.Rules, st.Teams, s.base+rulesapi.ServedPath)
	return exitOK, nil
}
