package gossip

import "testing"

func TestCheckPacket(t *testing.T) {
	compound := func(parts ...[]byte) []byte {
		b := []byte{mlCompound, byte(len(parts))}
		for _, p := range parts {
			b = append(b, byte(len(p)>>8), byte(len(p)))
		}
		for _, p := range parts {
			b = append(b, p...)
		}
		return b
	}
	tests := []struct {
		name      string
		encrypted bool
		in        []byte
		want      string
	}{
		{"a user message", false, withLabel("l", []byte{mlUser, 1, 2}), ""},
		{"a ping", false, withLabel("l", []byte{mlPing, 0x80}), ""},
		{"compressed", false, withLabel("l", []byte{mlCompress, 0x82}), PacketRefusedCompressed},
		{"compressed after a CRC", false, withLabel("l", []byte{mlHasCrc, 0, 0, 0, 0, mlCompress}), PacketRefusedCompressed},
		{"compressed inside a compound", false, withLabel("l", compound([]byte{mlUser}, []byte{mlCompress, 0x80})), PacketRefusedCompressed},
		{"compound of user messages", false, withLabel("l", compound([]byte{mlUser, 1}, []byte{mlUser, 2})), ""},
		{"compound nested too deep", false, withLabel("l", compound(compound(compound([]byte{mlUser})))), PacketRefusedMalformed},
		{"truncated compound", false, withLabel("l", []byte{mlCompound, 3, 0}), ""},
		{"no label", false, []byte{mlUser}, PacketRefusedLabel},
		{"another label", false, withLabel("x", []byte{mlUser}), PacketRefusedLabel},
		{"truncated label", false, []byte{mlHasLabel, 9, 'l'}, PacketRefusedLabel},
		{"empty label header", false, []byte{mlHasLabel, 0}, PacketRefusedLabel},
		{"empty", false, nil, PacketRefusedMalformed},
		{"encrypted: the label only", true, withLabel("l", []byte{mlCompress}), ""},
		{"encrypted: another label", true, withLabel("x", []byte{1}), PacketRefusedLabel},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := checkPacket(tt.in, "l", tt.encrypted); got != tt.want {
				t.Fatalf("got %q, want %q", got, tt.want)
			}
		})
	}
}

// Screening a packet allocates nothing: it runs for every packet.
func TestCheckPacketDoesNotAllocate(t *testing.T) {
	p := withLabel("sluice", []byte{mlCompound, 2, 0, 2, 0, 2, mlUser, 1, mlUser, 2})
	if n := testing.AllocsPerRun(100, func() { checkPacket(p, "sluice", false) }); n != 0 {
		t.Fatalf("%v allocations per packet", n)
	}
}
