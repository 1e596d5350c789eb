package gossip

// The packet guard screens each UDP packet before memberlist sees it. A
// packet is at most maxDatagram bytes and is copied at its own size, and
// memberlist's label and encryption handling allocate no more than the
// packet (the label is at most 255 bytes; decryption makes one plaintext of
// the packet's size). What a plain packet can make memberlist allocate
// beyond its size is decompression: memberlist inflates any compressed
// message (LZW, about 2,700:1, and a compressed message may hold another),
// although Sluice turns compression off and never sends one. So on a node
// without encryption a packet whose message, or any part of a compound
// message, is compressed is refused here; a packet with another cluster's
// label or none is refused too (memberlist would drop it, logging each). With
// encryption the message is only readable after the key is checked, by
// memberlist; only a keyed peer could send a compressed one.

// Packet refusal reasons, the label values of sluice_gossip_packets_refused_total.
const (
	PacketRefusedLabel      = "label"      // missing, malformed or another cluster's label
	PacketRefusedCompressed = "compressed" // a compressed message to a plain node
	PacketRefusedMalformed  = "malformed"  // empty, or compound messages nested too deep
)

// PacketRefusals lists the packet refusal reasons.
var PacketRefusals = []string{PacketRefusedLabel, PacketRefusedCompressed, PacketRefusedMalformed,
	PacketRefusedSender, PacketRefusedOrigin, PacketRefusedUnchecked}

// maxCompoundDepth is how deep compound messages may nest; memberlist never
// nests them.
const maxCompoundDepth = 2

// checkPacket returns why the packet b is refused, or "".
func checkPacket(b []byte, label string, encrypted bool) string {
	if len(b) == 0 {
		return PacketRefusedMalformed
	}
	if b[0] == mlHasLabel {
		if len(b) < 2 || b[1] == 0 || len(b) < 2+int(b[1]) {
			return PacketRefusedLabel
		}
		if string(b[2:2+int(b[1])]) != label {
			return PacketRefusedLabel
		}
		b = b[2+int(b[1]):]
	} else if label != "" {
		return PacketRefusedLabel
	}
	if encrypted {
		return ""
	}
	if len(b) >= mlCrcHeader && b[0] == mlHasCrc {
		b = b[mlCrcHeader:]
	}
	return checkCommand(b, 0)
}

// checkCommand checks one message as memberlist's handleCommand reads it.
func checkCommand(b []byte, depth int) string {
	if len(b) == 0 {
		return "" // memberlist logs and drops it
	}
	switch b[0] {
	case mlCompress:
		return PacketRefusedCompressed
	case mlCompound:
		if depth >= maxCompoundDepth {
			return PacketRefusedMalformed
		}
		return checkCompound(b[1:], depth+1)
	}
	return ""
}

// checkCompound checks each part of a compound message that memberlist would
// handle (decodeCompoundMessage: a count byte, big-endian uint16 lengths,
// the parts; a truncated part and those after it are ignored).
func checkCompound(b []byte, depth int) string {
	if len(b) < 1 {
		return ""
	}
	n := int(b[0])
	b = b[1:]
	if len(b) < 2*n {
		return ""
	}
	lens, b := b[:2*n], b[2*n:]
	for i := range n {
		l := int(lens[2*i])<<8 | int(lens[2*i+1])
		if len(b) < l {
			return ""
		}
		if r := checkCommand(b[:l], depth); r != "" {
			return r
		}
		b = b[l:]
	}
	return ""
}
