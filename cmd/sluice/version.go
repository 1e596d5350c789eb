package main

import (
	"encoding/json"
	"fmt"

	"github.com/urfave/cli/v2"

	"github.com/sluicelabs/sluice/internal/buildinfo"
)

// versionCommand prints which build of sluice this is. It needs no daemon:
// the daemon's own build is in `sluice members` (version column) and in its
// sluice_build_info metric.
func versionCommand() *cli.Command {
	return &cli.Command{
		Name:  "version",
		Usage: "print this build's version, VCS revision and Go version",
		Flags: []cli.Flag{&cli.BoolFlag{Name: "json", Usage: "print JSON"}},
		Action: func(c *cli.Context) error {
			in := buildinfo.Get()
			if c.Bool("json") {
				out, err := json.Marshal(versionJSON{Version: in.Version, Revision: in.Revision, Modified: in.Modified, Time: in.Time, GoVersion: in.GoVersion})
				if err != nil {
					return fmt.Errorf("encode version: %w", err)
				}
				fmt.Fprintln(c.App.Writer, string(out))
				return nil
			}
			fmt.Fprintln(c.App.Writer, "sluice version", in)
			return nil
		},
	}
}

// versionJSON is `sluice version --json`.
type versionJSON struct {
	Version   string `json:"version"`
	Revision  string `json:"revision,omitempty"`
	Modified  bool   `json:"modified,omitempty"`
	Time      string `json:"time,omitempty"`
	GoVersion string `json:"go_version"`
}
