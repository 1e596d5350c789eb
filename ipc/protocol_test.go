package ipc

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"
)

func body(frame []byte) []byte { return frame[4:] }

func TestRoundTripAllMessages(t *testing.T) {
	checks := []Check{
		{Rule: []byte("api"), Key: []byte("alice"), Cost: 1},
		{Rule: []byte("route:/upload"), Key: []byte(strings.Repeat("k", 300)), Cost: 70000},
		{Rule: []byte("shaped"), Key: []byte("k"), Cost: 1, MaxDelay: 1500 * time.Millisecond},
	}
	var req Request
	if err := DecodeRequest(body(AppendRequest(nil, 1<<40, checks)), &req, 16); err != nil {
		t.Fatal(err)
	}
	if req.ID != 1<<40 || !reflect.DeepEqual(req.Checks, checks) {
		t.Fatalf("request round trip: %+v", req)
	}
	results := []Result{
		{Status: StatusOK, Limit: 100, Remaining: 99, ResetAfter: 10 * time.Millisecond},
		{Status: StatusOverLimit, Limit: 4, RetryAfter: 2250 * time.Millisecond, ResetAfter: 3 * time.Second, Period: time.Second},
	}
	var rep Reply
	if err := DecodeReply(body(AppendReply(nil, 7, false, results)), &rep); err != nil {
		t.Fatal(err)
	}
	if rep.ID != 7 || rep.Allowed || !reflect.DeepEqual(rep.Results, results) {
		t.Fatalf("reply round trip: %+v", rep)
	}
	h, err := DecodeHello(body(AppendHello(nil, Hello{Version: 3, Client: "svc"})))
	if err != nil || h != (Hello{Version: 3, Client: "svc"}) {
		t.Fatalf("hello: %+v %v", h, err)
	}
	w := Welcome{Version: 1, Server: "node-a", MaxFrame: 65536, MaxBatch: 16, MaxKeyLen: 256}
	if got, err := DecodeWelcome(body(AppendWelcome(nil, w))); err != nil || got != w {
		t.Fatalf("welcome: %+v %v", got, err)
	}
	e := &Error{ID: 9, Code: CodeKeyTooLong, Message: "too long"}
	if got, err := DecodeError(body(AppendError(nil, e))); err != nil || *got != *e {
		t.Fatalf("error: %+v %v", got, err)
	}
}

// A client in another language uses a stock msgpack library: what it encodes
// must decode here, and what we encode must decode there.
func TestInspectRoundTrip(t *testing.T) {
	id, rule, key, err := DecodeInspect(body(AppendInspect(nil, 77, "api", "alice")))
	if err != nil || id != 77 || string(rule) != "api" || string(key) != "alice" {
		t.Fatalf("inspect: %d %q %q %v", id, rule, key, err)
	}
	want := Inspection{ID: 77, Known: true, Balance: -8.25, Limit: 4, Burst: 4}
	if got, err := DecodeBalance(body(AppendBalance(nil, want))); err != nil || got != want {
		t.Fatalf("balance: %+v %v", got, err)
	}
}

func TestInteroperatesWithStockMsgpack(t *testing.T) {
	// Signed integer encodings and bin keys, as some encoders produce them.
	enc, err := msgpack.Marshal([]any{int64(2), int32(42), []any{[]any{"api", []byte("bob"), int8(3)}}})
	if err != nil {
		t.Fatal(err)
	}
	var req Request
	if err := DecodeRequest(enc, &req, 16); err != nil {
		t.Fatal(err)
	}
	if req.ID != 42 || len(req.Checks) != 1 || string(req.Checks[0].Key) != "bob" || req.Checks[0].Cost != 3 {
		t.Fatalf("decoded %+v", req)
	}
	var generic []any
	if err := msgpack.Unmarshal(body(AppendReply(nil, 300, true, []Result{{Status: StatusOK, Limit: 5, Remaining: 4, ResetAfter: time.Second}})), &generic); err != nil {
		t.Fatal(err)
	}
	want := []any{uint8(3), uint16(300), true, []any{[]any{int8(0), int8(5), int8(4), int8(0), uint32(1e9), int8(0)}}}
	if !reflect.DeepEqual(normalise(generic), normalise(want)) {
		t.Fatalf("stock decoder read %#v", generic)
	}
}

// normalise turns every integer into uint64 so encodings of one value compare equal.
func normalise(v any) any {
	switch x := v.(type) {
	case []any:
		out := make([]any, len(x))
		for i := range x {
			out[i] = normalise(x[i])
		}
		return out
	case int8, int16, int32, int64, uint8, uint16, uint32, uint64:
		return reflect.ValueOf(x).Convert(reflect.TypeFor[uint64]()).Uint()
	}
	return v
}

func TestDecodeRequestRejectsMalformed(t *testing.T) {
	good := body(AppendRequest(nil, 5, []Check{{Rule: []byte("r"), Key: []byte("k"), Cost: 1}}))
	mp := func(v any) []byte { b, _ := msgpack.Marshal(v); return b }
	tests := []struct {
		name     string
		body     []byte
		wantCode ErrorCode // 0: ErrMalformed expected
	}{
		{"truncated", good[:len(good)-1], 0},
		{"trailing bytes", append(append([]byte{}, good...), 0), 0},
		{"not an array", mp("hello"), 0},
		{"wrong type", mp([]any{3, 1, []any{}}), 0},
		{"too few fields", mp([]any{2, 1}), 0},
		{"negative id", mp([]any{2, -1, []any{[]any{"r", "k", 1}}}), 0},
		{"negative cost", mp([]any{2, 1, []any{[]any{"r", "k", -5}}}), 0},
		{"cost as float", mp([]any{2, 1, []any{[]any{"r", "k", 1.5}}}), 0},
		{"key as int", mp([]any{2, 1, []any{[]any{"r", 7, 1}}}), 0},
		{"check with 2 fields", mp([]any{2, 1, []any{[]any{"r", "k"}}}), 0},
		{"check with 5 fields", mp([]any{2, 1, []any{[]any{"r", "k", 1, 1, 1}}}), 0},
		{"array header lies", []byte{0x93, 0x02, 0x01, 0xdd, 0xff, 0xff, 0xff, 0xff}, 0},
		{"string header lies", []byte{0x93, 0x02, 0x01, 0x91, 0x93, 0xdb, 0x7f, 0xff, 0xff, 0xff, 'r'}, 0},
		{"batch too large", mp([]any{2, 1, []any{[]any{"r", "a", 1}, []any{"r", "b", 1}, []any{"r", "c", 1}}}), CodeBatchTooLarge},
		{"empty batch", mp([]any{2, 1, []any{}}), CodeBadRequest},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var req Request
			err := DecodeRequest(tt.body, &req, 2)
			var e *Error
			switch {
			case tt.wantCode == 0 && !errors.Is(err, ErrMalformed):
				t.Fatalf("err = %v, want ErrMalformed", err)
			case tt.wantCode != 0 && (!errors.As(err, &e) || e.Code != tt.wantCode || e.ID != 1):
				t.Fatalf("err = %v, want *Error code %d for id 1", err, tt.wantCode)
			}
		})
	}
}

func TestReadFrameCapsAndTruncation(t *testing.T) {
	frame := AppendHello(nil, Hello{Version: 1, Client: "x"})
	tests := []struct {
		name  string
		input []byte
		want  error
	}{
		{"lying length", binary.BigEndian.AppendUint32(nil, 1<<31), ErrFrameTooLarge},
		{"just over cap", binary.BigEndian.AppendUint32(nil, 65), ErrFrameTooLarge},
		{"empty frame", binary.BigEndian.AppendUint32(nil, 0), ErrMalformed},
		{"body cut short", frame[:len(frame)-2], nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			buf := make([]byte, 0, 8)
			_, err := ReadFrame(bufio.NewReader(bytes.NewReader(tt.input)), buf, 64)
			if err == nil || (tt.want != nil && !errors.Is(err, tt.want)) {
				t.Fatalf("err = %v, want %v", err, tt.want)
			}
		})
	}
	got, err := ReadFrame(bufio.NewReader(bytes.NewReader(frame)), nil, 64)
	if err != nil || !bytes.Equal(got, body(frame)) {
		t.Fatalf("good frame: %q %v", got, err)
	}
}

func TestEncodeDecodeAllocateNothing(t *testing.T) {
	checks := []Check{{Rule: []byte("api"), Key: []byte("alice"), Cost: 1}, {Rule: []byte("route"), Key: []byte("GET /x"), Cost: 2}}
	out := make([]byte, 0, 512)
	req := Request{Checks: make([]Check, 0, 16)}
	rep := Reply{Results: make([]Result, 0, 16)}
	results := []Result{{Status: StatusOK, Limit: 1, Remaining: 1}, {Status: StatusOverLimit, Limit: 9}}
	allocs := testing.AllocsPerRun(1000, func() {
		out = AppendRequest(out[:0], 12345, checks)
		if err := DecodeRequest(body(out), &req, 16); err != nil {
			t.Fatal(err)
		}
		out = AppendReply(out[:0], 12345, true, results)
		if err := DecodeReply(body(out), &rep); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Fatalf("%v allocs per encode+decode round, want 0", allocs)
	}
}
