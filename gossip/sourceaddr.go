package gossip

import (
	"net/netip"

	"golang.org/x/net/ipv4"
	"golang.org/x/net/ipv6"
)

// Packets leave from the address this node advertises. Receivers check
// that a counters packet's sender is the member at the packet's source
// address (senderguard.go), and a node bound to every interface would
// otherwise send from whichever of its addresses the route picks (to a
// peer on loopback: 127.0.0.1, not the 127.0.0.2 or host address it
// advertises). So, bound to every interface, the transport asks the kernel
// for the advertised address as each packet's source (IP_PKTINFO,
// IPV6_PKTINFO). If the kernel refuses it (the advertised address is not
// this host's: a NAT's public address) and the packet goes without it,
// packets leave as before from then on, once warned about, and the NAT must
// translate them to the advertised address. Streams this node opens
// are bound to the advertised address likewise, so that peers give them
// the slots kept for members (streamslots.go).

// sourceOOB returns the control message that makes a packet leave from
// adv, or nil when the socket's own address already is its source.
func sourceOOB(bind, adv netip.Addr) []byte {
	if !bind.IsUnspecified() || !adv.IsValid() || adv.IsUnspecified() {
		return nil
	}
	if adv.Is4() {
		return (&ipv4.ControlMessage{Src: adv.AsSlice()}).Marshal()
	}
	return (&ipv6.ControlMessage{Src: adv.AsSlice()}).Marshal()
}
