package gossip

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"log"
	"net"
	"testing"
	"time"

	"github.com/hashicorp/go-msgpack/v2/codec"
)

func TestReplyGuardParse(t *testing.T) {
	push := func(nodes, state int64) []byte {
		return append([]byte{mlPushPull}, mpMapInts("Nodes", nodes, "UserStateLen", state, "Join", false)...)
	}
	tests := []struct {
		name      string
		encrypted bool
		in        []byte
		want      string // refusal reason, "" for accepted
		limit     int64  // when accepted
	}{
		{"push-pull within the caps", false, push(3, 1000), "", int64(len(push(3, 1000))) + 3*maxNodeStateBytes + 1000},
		{"push-pull of 2^40 nodes", false, push(1<<40, 0), RefusedLength, 0},
		{"push-pull user state of 2^62 bytes", false, push(1, 1<<62), RefusedLength, 0},
		{"ack", false, []byte{mlAckResp, 0x80}, "", 1 + maxPlainOther},
		{"error", false, []byte{mlErr, 0x80}, "", 1 + maxPlainOther},
		{"a label header (memberlist writes none on a reply)", false, withLabel("l", push(1, 1)), RefusedLabel, 0},
		{"a user message", false, append([]byte{mlUser}, mpMapInts("UserMsgLen", 5)...), RefusedType, 0},
		{"a ping", false, []byte{mlPing, 0x80}, RefusedType, 0},
		{"compressed", false, []byte{mlCompress, 0x80}, RefusedType, 0},
		{"garbage", false, []byte("HTTP/1.1 200 OK\r\n"), RefusedType, 0},
		{"encrypted to a plain node", false, []byte{mlEncrypt, 0, 0, 0, 1}, RefusedEncryption, 0},
		{"plain to an encrypted node", true, push(1, 1), RefusedEncryption, 0},
		{"encrypted frame of 4 GiB", true, []byte{mlEncrypt, 0xff, 0xff, 0xff, 0xff}, RefusedLength, 0},
		{"encrypted frame at the cap", true, append(binary.BigEndian.AppendUint32([]byte{mlEncrypt}, maxStreamBytes), 1), "", 5 + maxStreamBytes},
		{"encrypted frame of version 0", true, append(binary.BigEndian.AppendUint32([]byte{mlEncrypt}, 45), 0), RefusedHeader, 0},
		{"empty", false, nil, RefusedTimeout, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := &streamGuard{label: "l", encryption: tt.encrypted, encrypted: tt.encrypted}
			var plan pushPullPlan
			limit, err := g.parseReply(bufio.NewReaderSize(bytes.NewReader(tt.in), streamPeekSize), &plan)
			var r *errRefused
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tt.want == "" && limit != tt.limit:
				t.Fatalf("limit %d, want %d", limit, tt.limit)
			case tt.want != "" && (!errors.As(err, &r) || r.reason != tt.want):
				t.Fatalf("got %v, want refusal %q", err, tt.want)
			}
		})
	}
}

// replyNodeState is a push-pull node state as memberlist encodes it.
type replyNodeState struct {
	Name        string
	Addr        []byte
	Port        uint16
	Meta        []byte
	Incarnation uint32
	State       uint8
	Vsn         []uint8
}

// A reply on a stream this node opened is screened on its first read: a
// node state whose version list would panic memberlist is refused, and
// counted; an honest reply reads back byte for byte.
func TestReplyConnScreensTheReply(t *testing.T) {
	state := func(vsn []uint8) []byte {
		var b bytes.Buffer
		b.WriteByte(mlPushPull)
		enc := codec.NewEncoder(&b, &codec.MsgpackHandle{})
		enc.Encode(map[string]any{"Nodes": 1, "UserStateLen": 2, "Join": false})
		enc.Encode(&replyNodeState{Name: "fake", Addr: []byte{127, 0, 0, 1}, Port: 1, Vsn: vsn})
		b.WriteString("us")
		return b.Bytes()
	}
	for _, tt := range []struct {
		name  string
		reply []byte
		want  string
	}{
		{"honest", state([]uint8{1, 5, 5, 0, 1, 1}), ""},
		{"a one-byte version list", state([]uint8{1}), RefusedHeader},
		{"a huge declared user state", append([]byte{mlPushPull}, mpMapInts("Nodes", 0, "UserStateLen", int64(1<<40), "Join", false)...), RefusedLength},
	} {
		t.Run(tt.name, func(t *testing.T) {
			client, server := net.Pipe()
			defer client.Close()
			stats := &TransportStats{}
			g := &streamGuard{stats: stats, log: newDropLog(log.New(io.Discard, "", 0))}
			c := g.outbound(client)
			go func() {
				server.Write(append(bytes.Clone(tt.reply), "beyond"...))
				server.Close()
			}()
			got, err := io.ReadAll(c)
			if tt.want == "" {
				if err != nil || !bytes.HasPrefix(got, tt.reply) {
					t.Fatalf("read %q, %v; want %q", got, err, tt.reply)
				}
				return
			}
			if !isRefusal(err, tt.want) || stats.RepliesRefused(tt.want) != 1 || len(got) != 0 {
				t.Fatalf("read %d bytes, %v (refused %d); want refusal %q", len(got), err, stats.RepliesRefused(tt.want), tt.want)
			}
			if c.(*replyConn).clamp(time.Now().Add(time.Hour)).After(time.Now().Add(replyTimeout)) {
				t.Fatal("a deadline beyond the guard's was kept")
			}
		})
	}
}
