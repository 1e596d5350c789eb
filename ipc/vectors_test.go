package ipc_test

// Test vectors of the wire protocol (docs/PROTOCOL.md, "Test vectors").
//
// ipc/testdata/vectors.json is generated, never edited by hand:
//
//	go test ./ipc -run TestVectors -update
//
// runs the scripts below against real ipc.Servers deciding with a real
// daemon.Daemon on a fixed clock, and writes every frame each side sent.
// Without -update, TestVectorsUpToDate regenerates the file in memory and
// fails if it differs from the one on disk; TestVectorsReplay replays the
// file's client frames against fresh servers and compares the replies;
// TestVectorsMessages checks each frame's readable form against its bytes,
// both ways, with this package's decoders and encoders.

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/sluicelabs/sluice/clientlib"
	"github.com/sluicelabs/sluice/config"
	"github.com/sluicelabs/sluice/daemon"
	"github.com/sluicelabs/sluice/ipc"
)

var updateVectors = flag.Bool("update", false, "rewrite ipc/testdata/vectors.json from the scripts in vectors_test.go")

const vectorsPath = "testdata/vectors.json"

// vectorFile is the layout of vectors.json.
type vectorFile struct {
	Format      string                 `json:"format"`
	About       []string               `json:"about"`
	Servers     map[string]vectorSetup `json:"servers"`
	BoundedKeys []boundedKeyVector     `json:"bounded_keys"`
	Vectors     []vector               `json:"vectors"`
}

// vectorSetup describes the server an exchange runs against.
type vectorSetup struct {
	Note      string   `json:"note"`
	MaxFrame  int      `json:"max_frame"`
	MaxBatch  int      `json:"max_batch"`
	MaxKeyLen int      `json:"max_key_len"`
	MaxConns  int      `json:"max_conns,omitempty"`
	IdleReapS float64  `json:"idle_reap_s,omitempty"`
	AllowUIDs []uint32 `json:"allow_uids,omitempty"`
	Rules     string   `json:"rules,omitempty"`
	Sluiced   []string `json:"sluiced_args,omitempty"`
}

// boundedKeyVector is one example of clientlib.BoundedKey.
type boundedKeyVector struct {
	MaxKeyLen  int    `json:"max_key_len"`
	Key        string `json:"key,omitempty"`
	KeyHex     string `json:"key_hex"`
	Bounded    string `json:"bounded,omitempty"`
	BoundedHex string `json:"bounded_hex"`
}

// vector is one frame of an exchange.
type vector struct {
	Exchange  string          `json:"exchange"`
	Step      int             `json:"step"`
	Server    string          `json:"server"`
	Conn      int             `json:"conn"`
	After     string          `json:"after,omitempty"`
	Name      string          `json:"name"`
	From      string          `json:"from"`
	Hex       string          `json:"hex"`
	Message   json.RawMessage `json:"message"`
	Canonical bool            `json:"canonical"`
	Closes    bool            `json:"closes,omitempty"`
	Varies    []string        `json:"varies,omitempty"`
	Note      string          `json:"note"`
}

// Messages in their readable form, fields named as the spec names them.
type (
	helloMsg struct {
		Type       string `json:"type"`
		Version    uint64 `json:"version"`
		ClientName string `json:"client_name"`
	}
	welcomeMsg struct {
		Type       string `json:"type"`
		Version    uint64 `json:"version"`
		ServerName string `json:"server_name"`
		MaxFrame   uint64 `json:"max_frame"`
		MaxBatch   uint64 `json:"max_batch"`
		MaxKeyLen  uint64 `json:"max_key_len"`
	}
	checkEntry struct {
		Rule       string  `json:"rule"`
		Key        string  `json:"key"`
		Cost       uint64  `json:"cost"`
		MaxDelayNS *uint64 `json:"max_delay_ns,omitempty"`
	}
	checkMsg struct {
		Type   string       `json:"type"`
		ID     uint64       `json:"id"`
		Checks []checkEntry `json:"checks"`
	}
	resultEntry struct {
		Status       uint64 `json:"status"`
		StatusName   string `json:"status_name"`
		Limit        uint64 `json:"limit"`
		Remaining    uint64 `json:"remaining"`
		RetryAfterNS uint64 `json:"retry_after_ns"`
		ResetAfterNS uint64 `json:"reset_after_ns"`
		PeriodNS     uint64 `json:"period_ns"`
	}
	resultMsg struct {
		Type    string        `json:"type"`
		ID      uint64        `json:"id"`
		Allowed bool          `json:"allowed"`
		Results []resultEntry `json:"results"`
	}
	errorMsg struct {
		Type     string `json:"type"`
		ID       uint64 `json:"id"`
		Code     uint64 `json:"code"`
		CodeName string `json:"code_name"`
		Message  string `json:"message"`
	}
	inspectMsg struct {
		Type string `json:"type"`
		ID   uint64 `json:"id"`
		Rule string `json:"rule"`
		Key  string `json:"key"`
	}
	balanceMsg struct {
		Type    string  `json:"type"`
		ID      uint64  `json:"id"`
		Known   bool    `json:"known"`
		Balance float64 `json:"balance"`
		Limit   uint64  `json:"limit"`
		Burst   uint64  `json:"burst"`
	}
	reportMsg struct {
		Type         string `json:"type"`
		FailedOpen   uint64 `json:"failed_open"`
		FailedClosed uint64 `json:"failed_closed"`
	}
)

// codeNames names the error codes as docs/PROTOCOL.md does.
var codeNames = map[ipc.ErrorCode]string{
	ipc.CodeMalformed: "malformed", ipc.CodeFrameTooLarge: "frame_too_large", ipc.CodeBadVersion: "bad_version",
	ipc.CodeUnexpected: "unexpected", ipc.CodeTooManyConns: "too_many_conns", ipc.CodeShuttingDown: "shutting_down",
	ipc.CodePeerRefused: "peer_refused", ipc.CodeBatchTooLarge: "batch_too_large", ipc.CodeKeyTooLong: "key_too_long",
	ipc.CodeBadCost: "bad_cost", ipc.CodeBadRequest: "bad_request", ipc.CodeInternal: "internal",
}

func codeName(c ipc.ErrorCode) string {
	if n, ok := codeNames[c]; ok {
		return n
	}
	return fmt.Sprintf("code(%d)", uint64(c))
}

// decodeMessage decodes a frame body sent by from into its readable form.
func decodeMessage(from string, body []byte) (any, error) {
	typ, _, err := ipc.PeekType(body)
	if err != nil {
		return nil, err
	}
	switch {
	case from == "client" && typ == ipc.MsgHello:
		h, err := ipc.DecodeHello(body)
		return helloMsg{"HELLO", h.Version, h.Client}, err
	case from == "client" && typ == ipc.MsgCheck:
		var req ipc.Request
		if err := ipc.DecodeRequest(body, &req, 1<<20); err != nil {
			if e := (*ipc.Error)(nil); errors.As(err, &e) {
				// Well formed, but no checks: the server refuses it alone.
				return checkMsg{Type: "CHECK", ID: e.ID, Checks: []checkEntry{}}, nil
			}
			return nil, err
		}
		m := checkMsg{Type: "CHECK", ID: req.ID, Checks: []checkEntry{}}
		for _, c := range req.Checks {
			e := checkEntry{Rule: string(c.Rule), Key: string(c.Key), Cost: c.Cost}
			if c.MaxDelay > 0 {
				d := uint64(c.MaxDelay)
				e.MaxDelayNS = &d
			}
			m.Checks = append(m.Checks, e)
		}
		return m, nil
	case from == "client" && typ == ipc.MsgInspect:
		id, rule, key, err := ipc.DecodeInspect(body)
		return inspectMsg{"INSPECT", id, string(rule), string(key)}, err
	case from == "client" && typ == ipc.MsgReport:
		r, err := ipc.DecodeReport(body)
		return reportMsg{"REPORT", r.FailedOpen, r.FailedClosed}, err
	case from == "server" && typ == ipc.MsgWelcome:
		w, err := ipc.DecodeWelcome(body)
		return welcomeMsg{"WELCOME", w.Version, w.Server, w.MaxFrame, w.MaxBatch, w.MaxKeyLen}, err
	case from == "server" && typ == ipc.MsgResult:
		var rep ipc.Reply
		if err := ipc.DecodeReply(body, &rep); err != nil {
			return nil, err
		}
		m := resultMsg{Type: "RESULT", ID: rep.ID, Allowed: rep.Allowed, Results: []resultEntry{}}
		for _, r := range rep.Results {
			m.Results = append(m.Results, resultEntry{uint64(r.Status), r.Status.String(), r.Limit, r.Remaining,
				uint64(r.RetryAfter), uint64(r.ResetAfter), uint64(r.Period)})
		}
		return m, nil
	case from == "server" && typ == ipc.MsgError:
		e, err := ipc.DecodeError(body)
		if err != nil {
			return nil, err
		}
		return errorMsg{"ERROR", e.ID, uint64(e.Code), codeName(e.Code), e.Message}, nil
	case from == "server" && typ == ipc.MsgBalance:
		in, err := ipc.DecodeBalance(body)
		return balanceMsg{"BALANCE", in.ID, in.Known, in.Balance, in.Limit, in.Burst}, err
	}
	return nil, fmt.Errorf("decode message: type %d is not sent by the %s", typ, from)
}

// encodeMessage encodes a readable message with this package's encoders.
func encodeMessage(raw json.RawMessage) ([]byte, error) {
	var head struct{ Type string }
	if err := json.Unmarshal(raw, &head); err != nil {
		return nil, fmt.Errorf("encode message: %w", err)
	}
	strict := func(v any) error {
		d := json.NewDecoder(bytes.NewReader(raw))
		d.DisallowUnknownFields()
		return d.Decode(v)
	}
	switch head.Type {
	case "HELLO":
		var m helloMsg
		if err := strict(&m); err != nil {
			return nil, err
		}
		return ipc.AppendHello(nil, ipc.Hello{Version: m.Version, Client: m.ClientName}), nil
	case "WELCOME":
		var m welcomeMsg
		if err := strict(&m); err != nil {
			return nil, err
		}
		return ipc.AppendWelcome(nil, ipc.Welcome{Version: m.Version, Server: m.ServerName, MaxFrame: m.MaxFrame, MaxBatch: m.MaxBatch, MaxKeyLen: m.MaxKeyLen}), nil
	case "CHECK":
		var m checkMsg
		if err := strict(&m); err != nil {
			return nil, err
		}
		var checks []ipc.Check
		for _, c := range m.Checks {
			ch := ipc.Check{Rule: []byte(c.Rule), Key: []byte(c.Key), Cost: c.Cost}
			if c.MaxDelayNS != nil {
				ch.MaxDelay = time.Duration(*c.MaxDelayNS)
			}
			checks = append(checks, ch)
		}
		return ipc.AppendRequest(nil, m.ID, checks), nil
	case "RESULT":
		var m resultMsg
		if err := strict(&m); err != nil {
			return nil, err
		}
		var rs []ipc.Result
		for _, r := range m.Results {
			rs = append(rs, ipc.Result{Status: ipc.Status(r.Status), Limit: r.Limit, Remaining: r.Remaining,
				RetryAfter: time.Duration(r.RetryAfterNS), ResetAfter: time.Duration(r.ResetAfterNS), Period: time.Duration(r.PeriodNS)})
		}
		return ipc.AppendReply(nil, m.ID, m.Allowed, rs), nil
	case "ERROR":
		var m errorMsg
		if err := strict(&m); err != nil {
			return nil, err
		}
		return ipc.AppendError(nil, &ipc.Error{ID: m.ID, Code: ipc.ErrorCode(m.Code), Message: m.Message}), nil
	case "INSPECT":
		var m inspectMsg
		if err := strict(&m); err != nil {
			return nil, err
		}
		return ipc.AppendInspect(nil, m.ID, m.Rule, m.Key), nil
	case "BALANCE":
		var m balanceMsg
		if err := strict(&m); err != nil {
			return nil, err
		}
		return ipc.AppendBalance(nil, ipc.Inspection{ID: m.ID, Known: m.Known, Balance: m.Balance, Limit: m.Limit, Burst: m.Burst}), nil
	case "REPORT":
		var m reportMsg
		if err := strict(&m); err != nil {
			return nil, err
		}
		return ipc.AppendReport(nil, ipc.Report{FailedOpen: m.FailedOpen, FailedClosed: m.FailedClosed}), nil
	}
	return nil, fmt.Errorf("encode message: unknown type %q", head.Type)
}

// The rules every sluiced setup runs. Each exchange uses keys of its own,
// so exchanges do not disturb one another on one daemon.
const vectorRules = `unknown_rule: %s
rules:
  api:
    rate: 2/1h
  shaped:
    rate: 1/1h
  shadowed:
    rate: 1/1h
    shadow: true
  soft:
    rate: 2/1h
    soft_percent: 50
`

// vectorClock is the fixed time every generated decision is made at.
var vectorClock = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func sluicedSetup(note, unknown string, extra ...string) vectorSetup {
	args := []string{"--rules", "RULES_FILE", "--node-name", "vectors", "--max-frame", "1024", "--max-batch", "4", "--max-key-len", "32"}
	return vectorSetup{Note: note, MaxFrame: 1024, MaxBatch: 4, MaxKeyLen: 32, Rules: fmt.Sprintf(vectorRules, unknown), Sluiced: append(args, extra...)}
}

// vectorSetups are the servers exchanges run against.
func vectorSetups() map[string]vectorSetup {
	deny := sluicedSetup("sluiced with the rules below (unknown rules denied)", "deny")
	allow := sluicedSetup("sluiced with the rules below (unknown rules allowed)", "allow")
	capped := sluicedSetup("sluiced at a cap of one connection; an idle connection is closed to admit a newcomer only after an hour (sluiced's own idle_reap is 1 s and has no flag: replay the newcomer within a second of the first connection's last frame)", "deny", "--max-conns", "1")
	capped.MaxConns, capped.IdleReapS = 1, 3600
	reap := sluicedSetup("sluiced at a cap of one connection; a connection idle for idle_reap_s is closed to admit a newcomer (sluiced reaps after 1 s; this file was generated with 0.001 s)", "deny", "--max-conns", "1")
	reap.MaxConns, reap.IdleReapS = 1, 0.001
	peers := sluicedSetup("sluiced serving only uid 54321 (run the client as another user)", "deny", "--allow-uid", "54321")
	peers.AllowUIDs = []uint32{54321}
	return map[string]vectorSetup{
		"sluiced":         deny,
		"sluiced-allow":   allow,
		"sluiced-cap":     capped,
		"sluiced-reap":    reap,
		"sluiced-peers":   peers,
		"bare-ipc-server": {Note: "not sluiced: an ipc.Server whose Decider fails every request (\"decider failed\") and which offers no inspection; it shows ERRORs sluiced sends only in conditions no request can provoke", MaxFrame: 1024, MaxBatch: 4, MaxKeyLen: 32},
	}
}

// failingDecider refuses every request with a plain error (CodeInternal).
type failingDecider struct{}

func (failingDecider) Decide([]ipc.Check, []ipc.Result) (bool, error) {
	return false, errors.New("decider failed")
}

// startSetup serves setup on a fresh socket and returns its path and a stop
// function (Shutdown, idempotent).
func startSetup(t *testing.T, setup vectorSetup) (string, func()) {
	t.Helper()
	dir, err := os.MkdirTemp("", "vec")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	var decider ipc.Decider = failingDecider{}
	if setup.Rules != "" {
		rulesPath := filepath.Join(dir, "rules.yaml")
		if err := os.WriteFile(rulesPath, []byte(setup.Rules), 0o600); err != nil {
			t.Fatal(err)
		}
		s := config.DefaultSettings()
		s.SocketPath, s.RulesPath, s.NodeName = filepath.Join(dir, "d.sock"), rulesPath, "vectors"
		s.MaxFrameBytes, s.MaxBatch, s.MaxKeyLen = setup.MaxFrame, setup.MaxBatch, setup.MaxKeyLen
		d, err := daemon.New(daemon.Config{Settings: s, Now: func() time.Time { return vectorClock }})
		if err != nil {
			t.Fatalf("start daemon: %v", err)
		}
		decider = d
	}
	srv := ipc.NewServer(ipc.ServerConfig{
		Name: "vectors", MaxFrame: setup.MaxFrame, MaxBatch: setup.MaxBatch, MaxKeyLen: setup.MaxKeyLen,
		MaxConns: setup.MaxConns, IdleReap: time.Duration(setup.IdleReapS * float64(time.Second)), AllowUIDs: setup.AllowUIDs,
	}, decider)
	path := filepath.Join(dir, "s.sock")
	l, err := ipc.Listen(path, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan struct{})
	go func() { srv.Serve(l, path); close(served) }()
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		srv.Shutdown(t.Context())
		<-served
	}
	t.Cleanup(stop)
	return path, stop
}

// step is one frame of an exchange script: a client frame to send (bytes
// set) or a server frame to read.
type step struct {
	conn      int
	after     string // "connect", "idle", "shutdown"
	name      string
	from      string
	frame     []byte // client frames
	canonical bool
	closes    bool
	varies    []string
	note      string
}

// exchange is a scripted conversation with one server setup.
type exchange struct {
	name, server string
	steps        []step
}

// Frame builders for scripts.
func frame(body ...byte) []byte {
	return append(binary.BigEndian.AppendUint32(nil, uint32(len(body))), body...)
}

func client(name string, b []byte, note string) step {
	return step{conn: 1, name: name, from: "client", frame: b, canonical: true, note: note}
}

func server(name, note string) step { return step{conn: 1, name: name, from: "server", note: note} }

func (s step) on(conn int) step { s.conn = conn; return s }
func (s step) whenAfter(a string) step {
	s.after = a
	return s
}
func (s step) closing() step            { s.closes = true; return s }
func (s step) nonCanonical() step       { s.canonical = false; return s }
func (s step) varying(f ...string) step { s.varies = f; return s }
func hello(v uint64) []byte             { return ipc.AppendHello(nil, ipc.Hello{Version: v, Client: "vectors"}) }
func checkOf(rule, key string) ipc.Check {
	return ipc.Check{Rule: []byte(rule), Key: []byte(key), Cost: 1}
}
func req(id uint64, c ...ipc.Check) []byte { return ipc.AppendRequest(nil, id, c) }

// Fields a replay against a live sluiced cannot reproduce exactly (its
// clock moves between steps).
var (
	resultVaries  = []string{"results[*].retry_after_ns", "results[*].reset_after_ns"}
	balanceVaries = []string{"balance"}
)

func result(name, note string) step  { return server(name, note).varying(resultVaries...) }
func balance(name, note string) step { return server(name, note).varying(balanceVaries...) }

// handshake is the HELLO/WELCOME that opens every exchange's connection.
func handshake(conn int) []step {
	return []step{
		client("HELLO", hello(2), "").on(conn),
		server("WELCOME", "").on(conn),
	}
}

func ex(name, srv string, steps ...[]step) exchange {
	return exchange{name: name, server: srv, steps: slices.Concat(steps...)}
}

func one(s ...step) []step { return s }

// exchanges is every scripted conversation, in the order of the file.
func exchanges() []exchange {
	longKey := "user:0123456789abcdefghijklmnopqrstuvwxyz" // 41 bytes
	exact := strings.Repeat("k", 32)
	return []exchange{
		ex("handshake-v2", "sluiced", one(
			client("HELLO", hello(2), "a client at version 2 (the current one)"),
			server("WELCOME", "the server agrees on version 2 and states its limits: max_frame 1024, max_batch 4, max_key_len 32"),
		)),
		ex("handshake-v1", "sluiced", one(
			client("HELLO", hello(1), "a client at version 1 (no REPORT)"),
			server("WELCOME", "the server agrees on version 1, the lower of the two"),
		)),
		ex("handshake-future", "sluiced", one(
			client("HELLO", hello(7), "a client speaking up to a future version 7"),
			server("WELCOME", "the server answers with the highest version it speaks (2); the client must speak that"),
		)),
		ex("check-single", "sluiced", handshake(1), one(
			client("CHECK", req(1, checkOf("api", "alice")), "one check: rule api (2 per hour, burst 2), key alice, cost 1"),
			result("RESULT ok", "status 0 (ok): admitted and charged; 1 token remains; the bucket is full again in 30 min"),
			client("CHECK", req(2, checkOf("api", "alice")), ""),
			result("RESULT ok", "the second token"),
			client("CHECK", req(3, checkOf("api", "alice")), ""),
			result("RESULT over_limit", "status 1 (over_limit): refused, nothing charged; retry_after says when one token will be there (30 min)"),
		)),
		ex("check-multi", "sluiced", handshake(1), one(
			client("CHECK", req(1, checkOf("api", "multi-a"), checkOf("api", "multi-b")), "two checks in one request: admitted only if both admit, and only then are both charged"),
			result("RESULT", "both ok; one result per check, in order"),
			client("CHECK", req(2, checkOf("api", "multi-a"), ipc.Check{Rule: []byte("api"), Key: []byte("multi-c"), Cost: 2}), ""),
			result("RESULT", ""),
			client("CHECK", req(3, checkOf("api", "multi-a"), checkOf("api", "multi-b")), "multi-a has no token left; multi-b has one"),
			result("RESULT not allowed", "allowed is false, so nothing was charged: not even multi-b, whose status is ok (0) because on its own it would have admitted"),
			client("CHECK", req(4, checkOf("api", "multi-b")), ""),
			result("RESULT ok", "multi-b still had its token: the refused request did not charge it"),
		)),
		ex("check-shaped", "sluiced", handshake(1), one(
			client("CHECK", req(1, ipc.Check{Rule: []byte("shaped"), Key: []byte("s"), Cost: 1, MaxDelay: 2 * time.Hour}), "a shaped check (max_delay_ns 2 h) on rule shaped (1 per hour): the token is there"),
			result("RESULT ok", "status 0: a shaped check that needs no wait is plain ok"),
			client("CHECK", req(2, ipc.Check{Rule: []byte("shaped"), Key: []byte("s"), Cost: 1, MaxDelay: 2 * time.Hour}), "the next token comes in 1 h, within max_delay"),
			result("RESULT delayed", "status 4 (delayed): admitted and charged now; the caller must wait retry_after (1 h) before going ahead"),
			client("CHECK", req(3, ipc.Check{Rule: []byte("shaped"), Key: []byte("s"), Cost: 1, MaxDelay: 30 * time.Minute}), "the next turn is 2 h away, beyond this check's max_delay (30 min)"),
			result("RESULT over_limit", "refused, nothing charged or reserved"),
		)),
		ex("check-shadow-soft", "sluiced", handshake(1), one(
			client("CHECK", req(1, checkOf("shadowed", "sh")), "rule shadowed (1 per hour, shadow: true)"),
			result("RESULT ok", ""),
			client("CHECK", req(2, checkOf("shadowed", "sh")), ""),
			result("RESULT shadow_denied", "status 5 (shadow_denied): admitted because the rule is in shadow mode; the limit would have refused; nothing charged"),
			client("CHECK", req(3, checkOf("soft", "so"), checkOf("soft", "so")), "rule soft (2 per hour, soft_percent 50: admits down to 1 token below zero); two checks of one key"),
			result("RESULT", ""),
			client("CHECK", req(4, checkOf("soft", "so")), "the bucket is empty"),
			result("RESULT soft", "status 6 (soft): admitted and charged within the soft margin"),
		)),
		ex("check-unknown-rule-deny", "sluiced", handshake(1), one(
			client("CHECK", req(1, checkOf("no-such-rule", "k")), "a rule the daemon does not have, under unknown_rule: deny"),
			server("RESULT unknown_rule", "status 2 (unknown_rule): refused; limit, remaining and the durations are 0"),
		)),
		ex("check-unknown-rule-allow", "sluiced-allow", handshake(1), one(
			client("CHECK", req(1, checkOf("no-such-rule", "k")), "a rule the daemon does not have, under unknown_rule: allow"),
			server("RESULT unknown_rule_allowed", "status 3 (unknown_rule_allowed): admitted; nothing to charge"),
		)),
		ex("check-pipelined", "sluiced", handshake(1), one(
			client("CHECK", req(10, checkOf("api", "pipe")), "two requests sent back to back, before any reply"),
			client("CHECK", req(11, checkOf("no-such-rule", "pipe")), ""),
			result("RESULT", "replies on one connection come in request order"),
			server("RESULT", ""),
		)),
		ex("check-id-zero", "sluiced", handshake(1), one(
			client("CHECK", req(0, checkOf("api", "zero")), "id 0 is accepted, but an ERROR answering it could not be told from a connection-level ERROR: clients must not use it"),
			result("RESULT", ""),
		)),
		ex("key-limits", "sluiced", handshake(1), one(
			client("CHECK", req(1, checkOf("api", exact)), "a key of exactly max_key_len (32) bytes is accepted"),
			result("RESULT ok", ""),
			client("CHECK", req(2, checkOf("api", exact+"k")), "a key of 33 bytes"),
			server("ERROR key_too_long", "refuses this request alone; the connection stays usable"),
			client("CHECK", req(3, checkOf("api", clientlib.BoundedKey(longKey, 32))), "what a client sends for the 41-byte key "+longKey+": its bounded key (see bounded_keys)"),
			result("RESULT ok", ""),
		)),
		ex("request-errors", "sluiced", handshake(1), one(
			client("CHECK", req(1, checkOf("api", "e1"), checkOf("api", "e2"), checkOf("api", "e3"), checkOf("api", "e4"), checkOf("api", "e5")), "5 checks, above max_batch (4)"),
			server("ERROR batch_too_large", ""),
			client("CHECK", req(2), "no checks"),
			server("ERROR bad_request", ""),
			client("CHECK", req(3, checkOf("api", "")), "an empty key"),
			server("ERROR bad_request", ""),
			client("CHECK", req(4, ipc.Check{Rule: []byte("api"), Key: []byte("e"), Cost: 0}), "cost 0"),
			server("ERROR bad_cost", ""),
			client("CHECK", req(5, ipc.Check{Rule: []byte("api"), Key: []byte("e"), Cost: 3}), "cost 3, above the rule's burst (2): it could never be admitted"),
			server("ERROR bad_cost", "sent by the daemon's decision, not the frame check; nothing charged"),
			client("CHECK", req(6, checkOf("api", "e")), "the connection is still usable"),
			result("RESULT ok", ""),
		)),
		ex("inspect", "sluiced", handshake(1), one(
			client("CHECK", req(1, checkOf("api", "seen")), ""),
			result("RESULT ok", ""),
			client("INSPECT", ipc.AppendInspect(nil, 2, "api", "seen"), "a key the daemon holds"),
			balance("BALANCE known key", "balance 1.0 of burst 2; nothing charged"),
			client("INSPECT", ipc.AppendInspect(nil, 3, "api", "never-seen"), "a key the daemon has never seen"),
			server("BALANCE unknown key", "a full bucket: balance equals burst"),
			client("INSPECT", ipc.AppendInspect(nil, 4, "no-such-rule", "seen"), "a rule the daemon does not have"),
			server("BALANCE unknown rule", "known false; the other fields are 0"),
			client("INSPECT", ipc.AppendInspect(nil, 5, "api", exact+"k"), "a key longer than max_key_len"),
			server("ERROR key_too_long", "the connection stays usable"),
		)),
		ex("report-v2", "sluiced", handshake(1), one(
			client("REPORT", ipc.AppendReport(nil, ipc.Report{FailedOpen: 12, FailedClosed: 0}), "12 calls failed open since the client's previous REPORT; REPORT has no reply"),
			client("CHECK", req(1, checkOf("api", "reporter")), "the request the REPORT was sent ahead of"),
			result("RESULT ok", "the first reply on the connection answers the CHECK"),
		)),
		ex("report-v1", "sluiced", one(
			client("HELLO", hello(1), ""),
			server("WELCOME", "version 1"),
			client("REPORT", ipc.AppendReport(nil, ipc.Report{FailedOpen: 1}), "a REPORT on a version 1 connection (a client must not send it)"),
			server("ERROR unexpected", "REPORT does not exist at version 1: connection closed").closing(),
		)),
		ex("alternative-encodings", "sluiced", one(
			client("HELLO", frame(0x93, 0x01, 0xcf, 0, 0, 0, 0, 0, 0, 0, 0x02, 0xc4, 0x07, 'v', 'e', 'c', 't', 'o', 'r', 's'), "HELLO with version as uint 64 and client_name as bin 8").nonCanonical(),
			server("WELCOME", ""),
			client("CHECK", frame(0xdc, 0x00, 0x03, 0x02, 0xcd, 0x00, 0x01, 0x91, 0x94, 0xd9, 0x03, 'a', 'p', 'i', 0xc4, 0x03, 'a', 'l', 't', 0xd0, 0x01, 0xd3, 0, 0, 0, 0, 0, 0, 0, 0x00),
				"CHECK as array 16, id as uint 16, rule as str 8, key as bin 8, cost as int 8, max_delay_ns as int 64 (0: not shaped)").nonCanonical(),
			result("RESULT ok", "the server's replies are always in the shortest encodings"),
			client("INSPECT", frame(0x94, 0x05, 0xd1, 0x00, 0x02, 0xc4, 0x03, 'a', 'p', 'i', 0xda, 0x00, 0x03, 'a', 'l', 't'), "INSPECT with id as int 16, rule as bin 8, key as str 16").nonCanonical(),
			balance("BALANCE", ""),
			client("REPORT", frame(0x93, 0x07, 0xce, 0, 0, 0, 0x02, 0xd2, 0, 0, 0, 0x01), "REPORT with uint 32 and int 32 counts").nonCanonical(),
			client("CHECK", frame(0x93, 0x02, 0x03, 0x91, 0x93, 0xa3, 'a', 'p', 'i', 0xa3, 'a', 'l', 't', 0xcf, 0, 0, 0, 0, 0, 0, 0, 0x01), "cost as uint 64").nonCanonical(),
			result("RESULT ok", "alt's second token (INSPECT charged nothing)"),
			client("CHECK", frame(0xdd, 0, 0, 0, 0x03, 0x02, 0xd3, 0, 0, 0, 0, 0, 0, 0, 0x04, 0xdc, 0x00, 0x01, 0x93, 0xc5, 0x00, 0x03, 'a', 'p', 'i', 0xdb, 0, 0, 0, 0x04, 'a', 'l', 't', '2', 0xcc, 0x01),
				"CHECK as array 32, id as int 64, checks as array 16, rule as bin 16, key as str 32, cost as uint 8").nonCanonical(),
			result("RESULT ok", ""),
			client("CHECK", frame(0x93, 0x02, 0x05, 0x91, 0x93, 0xa3, 'a', 'p', 'i', 0xc6, 0, 0, 0, 0x04, 'a', 'l', 't', '2', 0x01), "key as bin 32").nonCanonical(),
			result("RESULT ok", ""),
		)),
		ex("check-same-id", "sluiced", handshake(1), one(
			client("CHECK", req(7, checkOf("api", "same")), "two requests in flight with the same id: the server does not check ids, it echoes them (a client must not do this: it could not tell the replies apart but by their order)"),
			client("CHECK", req(7, checkOf("no-such-rule", "same")), ""),
			result("RESULT", ""),
			server("RESULT", ""),
		)),
		ex("error-malformed-negative", "sluiced", handshake(1), one(
			client("CHECK", frame(0x93, 0x02, 0x01, 0x91, 0x93, 0xa3, 'a', 'p', 'i', 0xa1, 'k', 0xff), "cost -1 (negative fixint): integers must not be negative").nonCanonical(),
			server("ERROR malformed", "connection-level: id 0, then the server closes the connection").closing(),
		)),
		ex("error-malformed-type", "sluiced", handshake(1), one(
			client("CHECK", frame(0x93, 0x02, 0x01, 0x91, 0x93, 0xa3, 'a', 'p', 'i', 0xa1, 'k', 0xcb, 0x3f, 0xf0, 0, 0, 0, 0, 0, 0), "cost as a float 64 (1.0): integers must be msgpack integers").nonCanonical(),
			server("ERROR malformed", "").closing(),
		)),
		ex("error-malformed-trailing", "sluiced", handshake(1), one(
			client("CHECK", frame(0x93, 0x02, 0x01, 0x91, 0x93, 0xa3, 'a', 'p', 'i', 0xa1, 'k', 0x01, 0xc0), "a valid CHECK followed by a stray byte inside the frame").nonCanonical(),
			server("ERROR malformed", "").closing(),
		)),
		ex("error-empty-frame", "sluiced", handshake(1), one(
			client("empty frame", frame(), "a length prefix of 0").nonCanonical(),
			server("ERROR malformed", "").closing(),
		)),
		ex("error-frame-too-large", "sluiced", handshake(1), one(
			client("length prefix only", []byte{0, 0, 0x04, 0x01}, "a length prefix of 1025, above max_frame (1024); the server answers without waiting for the body").nonCanonical(),
			server("ERROR frame_too_large", "").closing(),
		)),
		ex("error-bad-version", "sluiced", one(
			client("HELLO", hello(0), "version 0 does not exist"),
			server("ERROR bad_version", "").closing(),
		)),
		ex("error-no-hello", "sluiced", one(
			client("CHECK", req(1, checkOf("api", "nohello")), "a CHECK before HELLO"),
			server("ERROR unexpected", "").closing(),
		)),
		ex("error-unknown-type", "sluiced", handshake(1), one(
			client("type 9", frame(0x92, 0x09, 0x01), "a message type the server does not know").nonCanonical(),
			server("ERROR unexpected", "").closing(),
		)),
		ex("error-hello-twice", "sluiced", handshake(1), one(
			client("HELLO", hello(2), "a second HELLO on a connection"),
			server("ERROR unexpected", "").closing(),
		)),
		ex("error-shutting-down", "sluiced", handshake(1), one(
			server("ERROR shutting_down", "the daemon stops (SIGTERM): requests already received are answered, then every connection gets this and is closed").whenAfter("shutdown").closing(),
		)),
		ex("error-cap-refused", "sluiced-cap", handshake(1), one(
			server("ERROR too_many_conns", "a second connection, while the first is at the cap and has not been idle for idle_reap: refused at once, before any HELLO").on(2).whenAfter("connect").closing(),
		)),
		ex("error-cap-reaped", "sluiced-reap", handshake(1), one(
			client("HELLO", hello(2), "a second connection, once the first has been idle for idle_reap").on(2).whenAfter("idle"),
			server("ERROR too_many_conns", "the idle first connection is closed to make room; its client reconnects").closing(),
			server("WELCOME", "the newcomer is served").on(2),
		)),
		ex("error-peer-refused", "sluiced-peers", one(
			server("ERROR peer_refused", "the client's uid and gid are not allowed: refused at once, before any HELLO; the message quotes the client's uid and gid").whenAfter("connect").closing().varying("message"),
		)),
		ex("error-internal", "bare-ipc-server", handshake(1), one(
			client("CHECK", req(1, checkOf("api", "x")), ""),
			server("ERROR internal", "the server could not decide: a client fails open (or closed), it is not an invalid request"),
			client("INSPECT", ipc.AppendInspect(nil, 2, "api", "x"), ""),
			server("ERROR unexpected", "a server that offers no inspection refuses INSPECT with code 4 and the request's id; the connection stays usable"),
		)),
	}
}

// boundedKeys is the examples of clientlib.BoundedKey in the file.
func boundedKeys() []boundedKeyVector {
	cases := []struct {
		key    string
		maxLen int
	}{
		{"user:0123456789abcdefghijklmnopqrstuvwxyz", 32},
		{strings.Repeat("k", 32), 32},
		{strings.Repeat("k", 33), 32},
		{"https://example.com/" + strings.Repeat("a/", 150), 256},
		{"user:0123456789abcdefghijklmnopqrstuvwxyz", 23},
		{"user:0123456789abcdefghijklmnopqrstuvwxyz", 16},
		{"a-ключ-пользователя-номер-один", 32}, // the cut splits a character: the bounded key is not UTF-8
	}
	var out []boundedKeyVector
	for _, c := range cases {
		b := clientlib.BoundedKey(c.key, c.maxLen)
		v := boundedKeyVector{MaxKeyLen: c.maxLen, KeyHex: hex.EncodeToString([]byte(c.key)), BoundedHex: hex.EncodeToString([]byte(b))}
		if utf8.ValidString(c.key) {
			v.Key = c.key
		}
		if utf8.ValidString(b) {
			v.Bounded = b
		}
		out = append(out, v)
	}
	return out
}

// runExchange plays ex against a fresh server of its setup: it sends the
// client steps' frames and reads the server steps' frames, which it returns
// in step order (nil for client steps).
func runExchange(t *testing.T, setups map[string]vectorSetup, e exchange) [][]byte {
	t.Helper()
	setup, ok := setups[e.server]
	if !ok {
		t.Fatalf("exchange %s: no server setup %q", e.name, e.server)
	}
	path, stop := startSetup(t, setup)
	conns := map[int]*vectorConn{}
	defer func() {
		for _, c := range conns {
			c.nc.Close()
		}
	}()
	connect := func(n int) *vectorConn {
		if c := conns[n]; c != nil {
			return c
		}
		nc, err := net.Dial("unix", path)
		if err != nil {
			t.Fatalf("exchange %s: connect %d: %v", e.name, n, err)
		}
		conns[n] = &vectorConn{nc: nc, br: bufio.NewReader(nc)}
		return conns[n]
	}
	got := make([][]byte, len(e.steps))
	for i, s := range e.steps {
		switch s.after {
		case "shutdown":
			stop()
		case "idle":
			// The server's idle_reap is 1 ms here: wait well past it (and
			// past the few instructions between the server's WELCOME and
			// its wait for the next frame), by the clock, not for an
			// outcome: the outcome is read below.
			time.Sleep(250 * time.Millisecond)
		}
		c := connect(s.conn)
		if s.from == "client" {
			c.nc.SetWriteDeadline(time.Now().Add(10 * time.Second))
			if _, err := c.nc.Write(s.frame); err != nil {
				t.Fatalf("exchange %s step %d: send: %v", e.name, i+1, err)
			}
			continue
		}
		f, err := c.read()
		if err != nil {
			t.Fatalf("exchange %s step %d (%s): read: %v", e.name, i+1, s.name, err)
		}
		got[i] = f
		if s.closes {
			if err := c.expectEOF(); err != nil {
				t.Fatalf("exchange %s step %d: the server should close the connection: %v", e.name, i+1, err)
			}
		}
	}
	return got
}

type vectorConn struct {
	nc net.Conn
	br *bufio.Reader
}

// read reads one whole frame, prefix included.
func (c *vectorConn) read() ([]byte, error) {
	c.nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	hdr := make([]byte, 4)
	if _, err := io.ReadFull(c.br, hdr); err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint32(hdr)
	if n > 1<<20 {
		return nil, fmt.Errorf("frame of %d bytes", n)
	}
	f := make([]byte, 4+n)
	copy(f, hdr)
	_, err := io.ReadFull(c.br, f[4:])
	return f, err
}

func (c *vectorConn) expectEOF() error {
	c.nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	n, err := c.br.Read(make([]byte, 1))
	if n > 0 || err == nil {
		return errors.New("more bytes after the last frame")
	}
	if errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) || strings.Contains(err.Error(), "connection reset") {
		return nil
	}
	return err
}

// generateVectors runs every exchange and returns the file's contents.
func generateVectors(t *testing.T) []byte {
	t.Helper()
	f := vectorFile{
		Format: "sluice-ipc-vectors/1",
		About: []string{
			"Test vectors of Sluice's Unix-socket protocol; docs/PROTOCOL.md, section Test vectors, describes this file.",
			"Generated by `go test ./ipc -run TestVectors -update` (ipc/vectors_test.go) against real servers: never edit by hand.",
		},
		Servers:     vectorSetups(),
		BoundedKeys: boundedKeys(),
	}
	for _, e := range exchanges() {
		got := runExchange(t, f.Servers, e)
		for i, s := range e.steps {
			b := s.frame
			if s.from == "server" {
				b = got[i]
			}
			v := vector{Exchange: e.name, Step: i + 1, Server: e.server, Conn: s.conn, After: s.after, Name: s.name, From: s.from,
				Hex: hex.EncodeToString(b), Canonical: s.canonical || s.from == "server", Closes: s.closes, Varies: s.varies, Note: s.note}
			v.Message = json.RawMessage("null")
			if len(b) >= 4 && int(binary.BigEndian.Uint32(b)) == len(b)-4 && len(b) > 4 {
				if m, err := decodeMessage(s.from, b[4:]); err == nil {
					raw, err := json.Marshal(m)
					if err != nil {
						t.Fatal(err)
					}
					v.Message = raw
				}
			}
			if string(v.Message) == "null" {
				v.Canonical = false
			}
			f.Vectors = append(f.Vectors, v)
		}
	}
	out, err := json.MarshalIndent(f, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	return append(out, '\n')
}

func loadVectors(t *testing.T) vectorFile {
	t.Helper()
	data, err := os.ReadFile(vectorsPath)
	if err != nil {
		t.Fatalf("read vectors (generate them with go test ./ipc -run TestVectors -update): %v", err)
	}
	var f vectorFile
	if err := json.Unmarshal(data, &f); err != nil {
		t.Fatalf("parse %s: %v", vectorsPath, err)
	}
	return f
}

// TestVectorsUpToDate regenerates the vectors and compares them with the
// file: the spec's examples are what the code does today.
func TestVectorsUpToDate(t *testing.T) {
	got := generateVectors(t)
	if *updateVectors {
		if err := os.WriteFile(vectorsPath, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	var gen vectorFile
	if err := json.Unmarshal(got, &gen); err != nil {
		t.Fatal(err)
	}
	file := loadVectors(t)
	if len(gen.Vectors) != len(file.Vectors) {
		t.Fatalf("%s has %d frames, the scripts make %d: run go test ./ipc -run TestVectors -update", vectorsPath, len(file.Vectors), len(gen.Vectors))
	}
	for i := range gen.Vectors {
		g, w := gen.Vectors[i], file.Vectors[i]
		if slices.Contains(w.Varies, "message") {
			// An ERROR that quotes the client's uid and gid, which differ by machine.
			g.Hex, w.Hex, g.Message, w.Message = "", "", nil, nil
		}
		gj, _ := json.Marshal(g)
		wj, _ := json.Marshal(w)
		if !bytes.Equal(gj, wj) {
			t.Errorf("frame %d differs from %s (run go test ./ipc -run TestVectors -update and review the diff):\n got  %s\n file %s", i, vectorsPath, gj, wj)
		}
	}
	for _, part := range []struct {
		name      string
		got, want any
	}{{"servers", gen.Servers, file.Servers}, {"bounded_keys", gen.BoundedKeys, file.BoundedKeys}, {"format", gen.Format, file.Format}} {
		gj, _ := json.Marshal(part.got)
		wj, _ := json.Marshal(part.want)
		if !bytes.Equal(gj, wj) {
			t.Errorf("%s differ from %s: run go test ./ipc -run TestVectors -update", part.name, vectorsPath)
		}
	}
}

// TestVectorsReplay plays the file's client frames against fresh servers
// and compares the server's frames with the file's, byte for byte (but for
// the fields a frame says vary with the machine).
func TestVectorsReplay(t *testing.T) {
	f := loadVectors(t)
	var order []string
	byName := map[string]*exchange{}
	want := map[string][]vector{}
	for _, v := range f.Vectors {
		e := byName[v.Exchange]
		if e == nil {
			e = &exchange{name: v.Exchange, server: v.Server}
			byName[v.Exchange] = e
			order = append(order, v.Exchange)
		}
		if v.Step != len(e.steps)+1 {
			t.Fatalf("exchange %s: step %d out of order", v.Exchange, v.Step)
		}
		b, err := hex.DecodeString(v.Hex)
		if err != nil {
			t.Fatalf("exchange %s step %d: %v", v.Exchange, v.Step, err)
		}
		s := step{conn: v.Conn, after: v.After, name: v.Name, from: v.From, closes: v.Closes}
		if v.From == "client" {
			s.frame = b
		}
		e.steps = append(e.steps, s)
		want[v.Exchange] = append(want[v.Exchange], v)
	}
	for _, name := range order {
		t.Run(name, func(t *testing.T) {
			got := runExchange(t, f.Servers, *byName[name])
			for i, v := range want[name] {
				if v.From != "server" {
					continue
				}
				if slices.Contains(v.Varies, "message") {
					gm, err := decodeMessage("server", got[i][4:])
					if err != nil {
						t.Fatalf("step %d: %v", v.Step, err)
					}
					var wm errorMsg
					if err := json.Unmarshal(v.Message, &wm); err != nil {
						t.Fatal(err)
					}
					g := gm.(errorMsg)
					if g.ID != wm.ID || g.Code != wm.Code {
						t.Errorf("step %d: got %+v, want %+v", v.Step, g, wm)
					}
					continue
				}
				if h := hex.EncodeToString(got[i]); h != v.Hex {
					t.Errorf("step %d (%s): got %s, want %s", v.Step, v.Name, h, v.Hex)
				}
			}
		})
	}
}

// TestVectorsMessages checks each frame's readable form against its bytes:
// decoding the bytes gives the message, and encoding the message gives the
// bytes when the frame is canonical (in the encodings ipc writes).
func TestVectorsMessages(t *testing.T) {
	f := loadVectors(t)
	for _, v := range f.Vectors {
		b, err := hex.DecodeString(v.Hex)
		if err != nil {
			t.Fatalf("%s step %d: %v", v.Exchange, v.Step, err)
		}
		if string(v.Message) == "null" {
			if len(b) >= 4 && int(binary.BigEndian.Uint32(b)) == len(b)-4 && len(b) > 4 {
				if _, err := decodeMessage(v.From, b[4:]); err == nil {
					t.Errorf("%s step %d: a frame without a message should not decode", v.Exchange, v.Step)
				}
			}
			continue
		}
		if len(b) < 5 || int(binary.BigEndian.Uint32(b)) != len(b)-4 {
			t.Errorf("%s step %d: length prefix does not match the frame", v.Exchange, v.Step)
			continue
		}
		m, err := decodeMessage(v.From, b[4:])
		if err != nil {
			t.Errorf("%s step %d: decode: %v", v.Exchange, v.Step, err)
			continue
		}
		got, _ := json.Marshal(m)
		var want bytes.Buffer
		json.Compact(&want, v.Message)
		if !bytes.Equal(got, want.Bytes()) {
			t.Errorf("%s step %d: decoded %s, file says %s", v.Exchange, v.Step, got, want.Bytes())
		}
		enc, err := encodeMessage(v.Message)
		if err != nil {
			t.Errorf("%s step %d: encode: %v", v.Exchange, v.Step, err)
			continue
		}
		if v.Canonical != bytes.Equal(enc, b) {
			t.Errorf("%s step %d: canonical is %v, but encoding the message gives %x for %x", v.Exchange, v.Step, v.Canonical, enc, b)
		}
	}
	for _, k := range f.BoundedKeys {
		key, _ := hex.DecodeString(k.KeyHex)
		if got := hex.EncodeToString([]byte(clientlib.BoundedKey(string(key), k.MaxKeyLen))); got != k.BoundedHex {
			t.Errorf("BoundedKey(%q, %d) = %s, file says %s", key, k.MaxKeyLen, got, k.BoundedHex)
		}
	}
}
