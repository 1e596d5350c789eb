package main

import (
	"fmt"
	"io"

	"github.com/sluicelabs/sluice/daemon/adminapi"
)

// gossipCell is what `sluice members` shows of a member's gossip security:
// "encrypted" (with a cluster label), "PLAINTEXT" for a member that gossips
// in the clear, "?" for one too old to say, "-" when not clustered or gone.
func gossipCell(m adminapi.MemberView, clustered bool) string {
	switch {
	case !clustered || m.State != "alive":
		return "-"
	case m.Encrypted == nil:
		return "?"
	case !*m.Encrypted:
		return "PLAINTEXT"
	case m.Labelled != nil && !*m.Labelled:
		return "encrypted, NO LABEL"
	}
	return "encrypted"
}

// unencryptedLine warns under the table when members gossip in the clear.
func unencryptedLine(w io.Writer, unencrypted, alive int) {
	if unencrypted > 0 {
		fmt.Fprintf(w, "gossip PLAINTEXT: %d of %d alive members gossip without a key: whoever reaches their gossip port can join, read and forge consumption (give every node --gossip-key-file)\n",
			unencrypted, alive)
	}
}
