package config

import (
	"errors"
	"fmt"
	"net"

	"github.com/sluicelabs/sluice/bucket"
)

// ErrGossipNeedsKey is returned (wrapped) by ClusterSettings.Validate for a
// cluster that gossips beyond loopback with no key and without Insecure.
var ErrGossipNeedsKey = errors.New("gossip beyond loopback needs a key")

// ParseFirstContact reads ClusterSettings.FirstContact by name: "auto",
// "token" or "share" ("": auto, the default).
func ParseFirstContact(name string) (bucket.FirstContact, error) {
	for _, f := range bucket.FirstContacts {
		if name == f.String() {
			return f, nil
		}
	}
	if name == "" {
		return bucket.FirstContactAuto, nil
	}
	return 0, fmt.Errorf("first contact %q: want auto, token or share", name)
}

// Encrypted reports whether gossip is encrypted: a key or a keyring file is given.
func (c ClusterSettings) Encrypted() bool { return len(c.Key) > 0 || c.KeyringFile != "" }

// Exposed reports whether the daemon gossips with anyone beyond this host:
// it joins peers, it binds an address that is not loopback (an empty host,
// as in ":7946", is every interface), or it advertises one (something
// forwards that address to it). A host name other than localhost counts as
// exposed: it is not resolved here.
func (c ClusterSettings) Exposed() bool {
	if !c.Enabled() {
		return false
	}
	return len(c.Join) > 0 || !loopbackBind(c.Bind) || (c.Advertise != "" && !loopbackBind(c.Advertise))
}

func loopbackBind(bind string) bool {
	host, _, err := net.SplitHostPort(bind)
	if err != nil {
		host = bind // a bare address
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// Validate reports the first cluster setting that cannot work or that would
// gossip in the clear with other hosts without saying so.
func (c ClusterSettings) Validate() error {
	switch {
	case len(c.Key) > 0 && c.KeyringFile != "":
		return errors.New("settings: a gossip key and a gossip keyring file are exclusive; give one (a keyring for rotation)")
	case len(c.Key) != 0 && len(c.Key) != 16 && len(c.Key) != 24 && len(c.Key) != 32:
		return fmt.Errorf("settings: gossip key of %d bytes; want 16, 24 or 32", len(c.Key))
	case c.Insecure && c.Encrypted():
		return errors.New("settings: --insecure-gossip with a gossip key: give one or the other")
	case c.Encrypted() && c.Label == "":
		return errors.New("settings: a cluster label is required with a gossip key (--cluster-label NAME, the same on every node)")
	case c.FirstContact > bucket.FirstContactShare:
		return fmt.Errorf("settings: first contact %v: want auto, token or share", c.FirstContact)
	case len(c.Label) > 255:
		return fmt.Errorf("settings: cluster label of %d bytes; want at most 255", len(c.Label))
	case c.Exposed() && !c.Encrypted() && !c.Insecure:
		what := "--join"
		switch {
		case len(c.Join) > 0:
		case !loopbackBind(c.Bind):
			what = fmt.Sprintf("--bind %s (not loopback)", c.Bind)
		default:
			what = fmt.Sprintf("--advertise %s (not loopback)", c.Advertise)
		}
		return fmt.Errorf("settings: %s: %w: anyone who can reach the gossip port could join the cluster, read and forge consumption; "+
			"give every node the same key with --gossip-key-file FILE (base64 of 16, 24 or 32 random bytes, mode 0600), "+
			"SLUICE_GOSSIP_KEY or --gossip-keyring FILE; or pass --insecure-gossip to gossip in the clear on a network you trust",
			what, ErrGossipNeedsKey)
	}
	return nil
}
