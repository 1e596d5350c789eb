package main

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	be "encoding/binary"
	"io"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// memberlist v0.5.4's verifyProtocol read Vsn[0..5] of any node state whose
// version list was not empty: a push-pull naming one node with a 1-byte list
// panicked the daemon. The stream guard refuses such a plain push-pull
// before memberlist reads it, but it cannot see inside an encrypted one,
// and the reply to a push-pull this node opens never passes the guard.
// memberlist v0.7.0 skips short lists (and then refuses the push-pull as
// incompatible). These tests send the short list every way the guard does
// not cover, to a real sluiced, and check it stays up and that memberlist
// did read the list (it logs the node as incompatible).

// ghouseShortVsnPushPull is a push-pull message as memberlist writes it
// (type 6, header, node states, user state) naming one alive node "x" whose
// protocol version list is 1 byte long.
func ghouseShortVsnPushPull() []byte {
	b := []byte{6, 0x83}
	b = append(b, 0xa5)
	b = append(b, "Nodes"...)
	b = append(b, 1, 0xac)
	b = append(b, "UserStateLen"...)
	b = append(b, 0, 0xa4)
	b = append(b, "Join"...)
	b = append(b, 0xc2)
	// {Name: "x", Addr: 127.0.0.1, Port: 7946, State: 0 (alive), Vsn: [1]}
	b = append(b, 0x85, 0xa4, 'N', 'a', 'm', 'e', 0xa1, 'x', 0xa4, 'A', 'd', 'd', 'r', 0xc4, 4, 127, 0, 0, 1,
		0xa4, 'P', 'o', 'r', 't', 0xcd, 0x1f, 0x0a, 0xa5, 'S', 't', 'a', 't', 'e', 0,
		0xa3, 'V', 's', 'n', 0xc4, 1, 1)
	return b
}

// ghouseEncrypt frames msg as memberlist frames an encrypted stream:
// type 10, a big-endian length, then encryption version 1 (no padding), a
// nonce and AES-GCM of msg, authenticated with the 5 header bytes and the
// stream label.
func ghouseEncrypt(t *testing.T, keyB64, label string, msg []byte) []byte {
	t.Helper()
	key, err := base64.StdEncoding.DecodeString(keyB64)
	if err != nil {
		t.Fatal(err)
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		t.Fatal(err)
	}
	gcm, err := cipher.NewGCM(block)
	if err != nil {
		t.Fatal(err)
	}
	head := be.BigEndian.AppendUint32([]byte{10}, uint32(1+gcm.NonceSize()+len(msg)+gcm.Overhead()))
	nonce := make([]byte, gcm.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		t.Fatal(err)
	}
	out := append(append(append([]byte(nil), head...), 1), nonce...)
	return gcm.Seal(out, nonce, msg, append(append([]byte(nil), head...), label...))
}

// ghouseFakePeer listens on loopback as a gossip peer would and answers
// every push-pull opened to it with reply, after reading what the daemon
// sent. It counts the streams it answered.
func ghouseFakePeer(t *testing.T, reply []byte) (addr string, answered *atomic.Int64) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	answered = new(atomic.Int64)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				// The daemon writes its whole state, then waits for ours: read
				// until it pauses, answer, then until it closes (all bounded).
				buf := make([]byte, 64<<10)
				c.SetReadDeadline(time.Now().Add(5 * time.Second))
				if _, err := c.Read(buf); err != nil {
					return
				}
				for {
					c.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
					if _, err := c.Read(buf); err != nil {
						break
					}
				}
				c.SetDeadline(time.Now().Add(5 * time.Second))
				if _, err := c.Write(reply); err != nil {
					return
				}
				answered.Add(1)
				io.Copy(io.Discard, c)
			}()
		}
	}()
	return l.Addr().String(), answered
}

// A keyed peer's encrypted push-pull naming a node with a 1-byte version
// list, sent to the daemon: the guard cannot read it, memberlist decrypts
// it, reads the list and refuses it; the daemon stays up.
func TestGhouseEncryptedShortVersionListLeavesDaemonUp(t *testing.T) {
	t.Parallel()
	n := startTransportNode(t, "victim", transportTestKey)
	msg := labelled("sluice", ghouseEncrypt(t, transportTestKey, "sluice", ghouseShortVsnPushPull()))
	for range 3 {
		sendStream(t, n.gossip, msg)
		n.assertUp(t, "after an encrypted push-pull with a 1-byte version list")
	}
	eventually(t, "memberlist read the version list and refused it", func() bool {
		return strings.Contains(n.p.stderr.String(), "protocol version (0) is incompatible")
	})
	n.assertUp(t, "at the end")
}

// The daemon joins a fake peer, which answers the daemon's own push-pull
// with a node whose version list is 1 byte long. Plain, the reply guard
// reads the node states and refuses it before memberlist does; encrypted,
// the guard cannot read it and memberlist decrypts it, reads the list and
// refuses the join. Either way the join fails, is retried, and the daemon
// stays up.
func TestGhouseShortVersionListInAReplyLeavesDaemonUp(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name    string
		key     string
		args    []string
		refusal string // what the log says refused the reply
	}{
		{"plain", "", []string{"--insecure-gossip"}, "refused a gossip reply"},
		{"encrypted", transportTestKey, nil, "protocol version (0) is incompatible"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			reply := ghouseShortVsnPushPull()
			if tt.key != "" {
				reply = ghouseEncrypt(t, tt.key, "sluice", reply)
			}
			peer, answered := ghouseFakePeer(t, reply)
			n := startTransportNode(t, "victim", tt.key, append([]string{"--join", peer}, tt.args...)...)
			eventually(t, "two push-pull replies were read", func() bool {
				select {
				case err := <-n.p.exited:
					n.p.exited <- err
					t.Fatalf("sluiced exited (%v) after %d replies; stderr:\n%s", err, answered.Load(), tail(n.p.stderr.String(), 3000))
				default:
				}
				return answered.Load() >= 2
			})
			n.assertUp(t, "after replies with a 1-byte version list")
			eventually(t, "the reply was refused: "+tt.refusal, func() bool {
				return strings.Contains(n.p.stderr.String(), tt.refusal)
			})
			if bytes.Contains([]byte(n.p.stderr.String()), []byte("panic")) {
				t.Fatalf("a panic in the log:\n%s", tail(n.p.stderr.String(), 3000))
			}
		})
	}
}
