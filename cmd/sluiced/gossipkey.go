package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/urfave/cli/v2"

	"github.com/sluicelabs/sluice/daemon"
)

// gossipKeyEnv holds the gossip key (base64) for daemons that take it from
// the environment: only the daemon's user and root can read a process's
// environment, where every local user can read its command line.
const gossipKeyEnv = "SLUICE_GOSSIP_KEY"

// errKeyOnCommandLine refuses --gossip-key VALUE.
var errKeyOnCommandLine = errors.New("--gossip-key: refused: a key on the command line is shown to every local user (ps, /proc/PID/cmdline); " +
	"put it in a file only this user can read and pass --gossip-key-file FILE, or set " + gossipKeyEnv)

// gossipKey returns the gossip key from --gossip-key-file or
// SLUICE_GOSSIP_KEY (nil when neither is given), refusing one given on the
// command line and two sources at once. The environment variable is removed
// once read, so nothing this process starts inherits it.
func gossipKey(c *cli.Context) ([]byte, error) {
	if c.IsSet("gossip-key") { // the flag has no EnvVars: set means argv
		return nil, errKeyOnCommandLine
	}
	env := os.Getenv(gossipKeyEnv)
	fromEnv := env != "" // set but empty: not given
	os.Unsetenv(gossipKeyEnv)
	file := c.String("gossip-key-file")
	switch {
	case fromEnv && file != "":
		return nil, fmt.Errorf("--gossip-key-file and %s are both given; give one", gossipKeyEnv)
	case file != "":
		return daemon.ReadKeyFile(file)
	case fromEnv:
		key, err := daemon.DecodeKey(env)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", gossipKeyEnv, err)
		}
		return key, nil
	}
	return nil, nil
}
