package main

import (
	"fmt"
	"os/user"
	"strconv"
	"strings"

	"github.com/urfave/cli/v2"
)

// allowLists reads --allow-uid and --allow-gid (or SLUICE_ALLOW_UIDS and
// SLUICE_ALLOW_GIDS): numbers, or user and group names looked up on this host.
func allowLists(c *cli.Context) (uids, gids []uint32, err error) {
	if uids, err = parseIDs("--allow-uid", c.StringSlice("allow-uid"), lookupUID); err != nil {
		return nil, nil, err
	}
	if gids, err = parseIDs("--allow-gid", c.StringSlice("allow-gid"), lookupGID); err != nil {
		return nil, nil, err
	}
	return uids, gids, nil
}

// parseIDs turns flag values into ids: a value of digits is the id itself;
// anything else is a name that lookup resolves to a numeric id. Blank values
// (a trailing comma) are skipped.
func parseIDs(flag string, vals []string, lookup func(name string) (string, error)) ([]uint32, error) {
	var ids []uint32
	for _, v := range vals {
		v = strings.TrimSpace(v)
		if v == "" {
			continue
		}
		num := v
		if strings.Trim(v, "0123456789") != "" {
			var err error
			if num, err = lookup(v); err != nil {
				return nil, fmt.Errorf("%s %q: %w", flag, v, err)
			}
		}
		id, err := strconv.ParseUint(num, 10, 32)
		if err != nil {
			return nil, fmt.Errorf("%s %q: not a 32-bit id", flag, v)
		}
		ids = append(ids, uint32(id))
	}
	return ids, nil
}

func lookupUID(name string) (string, error) {
	u, err := user.Lookup(name)
	if err != nil {
		return "", err
	}
	return u.Uid, nil
}

func lookupGID(name string) (string, error) {
	g, err := user.LookupGroup(name)
	if err != nil {
		return "", err
	}
	return g.Gid, nil
}
