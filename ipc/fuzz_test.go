package ipc

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"math"
	"reflect"
	"testing"
	"time"
)

// Fuzz targets for every decoder that reads bytes from the other end of the
// socket: the server's (a client may send anything) and the client's (a
// confused or hostile daemon must not crash its clients). Run one longer with
//
//	go test -run '^$' -fuzz '^FuzzDecodeRequest$' -fuzztime 5m ./ipc
//
// Inputs the fuzzer has found interesting live in testdata/fuzz and run as
// ordinary tests.

// sampleFrames returns one valid frame of every message type, encoded by the
// package's own encoders.
func sampleFrames() [][]byte {
	checks := []Check{
		{Rule: []byte("api"), Key: []byte("alice"), Cost: 1},
		{Rule: []byte("login"), Key: []byte("10.0.0.1"), Cost: 3, MaxDelay: 250 * time.Millisecond},
	}
	results := []Result{
		{Status: StatusOK, Limit: 100, Remaining: 99, ResetAfter: 10 * time.Millisecond, Period: time.Second},
		{Status: StatusOverLimit, Limit: 5, RetryAfter: 12 * time.Second, ResetAfter: time.Minute, Period: time.Minute},
	}
	return [][]byte{
		AppendHello(nil, Hello{Version: ProtocolVersion, Client: "clientlib/1"}),
		AppendWelcome(nil, Welcome{Version: ProtocolVersion, Server: "sluiced", MaxFrame: 64 << 10, MaxBatch: 128, MaxKeyLen: 1024}),
		AppendRequest(nil, 7, checks),
		AppendRequest(nil, 1<<40, checks[:1]),
		AppendReply(nil, 7, false, results),
		AppendInspect(nil, 9, "api", "alice"),
		AppendBalance(nil, Inspection{ID: 9, Known: true, Balance: -2.5, Limit: 100, Burst: 200}),
		AppendReport(nil, Report{FailedOpen: 3, FailedClosed: 1 << 33}),
		AppendError(nil, &Error{ID: 7, Code: CodeBatchTooLarge, Message: "batch of 500 checks, limit 128"}),
	}
}

// malformedBodies are hand-made bad bodies: truncations, lying lengths,
// wrong types, negative integers.
var malformedBodies = [][]byte{
	{},
	{0x90},             // empty array
	{0x93, 0x02, 0x07}, // CHECK cut short
	{0x93, 0x02, 0x07, 0xdd, 0x7f, 0xff, 0xff, 0xff},                         // a batch of 2^31 checks in 8 bytes
	{0x93, 0x02, 0x07, 0xdc, 0xff, 0xff},                                     // a batch of 65535 checks
	{0x93, 0x02, 0x07, 0x91, 0x93, 0xdb, 0xff, 0xff, 0xff, 0xff, 0x61, 0x01}, // key of 4 GiB
	{0x93, 0x01, 0xff, 0xa0},                                                 // negative version
	{0x94, 0x03, 0x07, 0xc3, 0xdd, 0xff, 0xff, 0xff, 0xff},
	{0x96, 0x06, 0x01, 0xc3, 0xcb, 0x7f, 0xf8, 0, 0, 0, 0, 0, 1, 0x01, 0x01}, // NaN balance
	[]byte("GET / HTTP/1.1\r\n\r\n"),
}

// FuzzReadFrame feeds a byte stream to ReadFrame until it fails: no frame is
// empty or longer than maxFrame, the buffer never grows past maxFrame, and
// frames never hold more bytes than the stream.
func FuzzReadFrame(f *testing.F) {
	var stream []byte
	for _, fr := range sampleFrames() {
		stream = append(stream, fr...)
		f.Add(fr, uint16(64<<10-1))
	}
	f.Add(stream, uint16(64))
	f.Add(stream, uint16(0))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 1, 2, 3}, uint16(1000))
	f.Add([]byte{0, 0, 0, 0}, uint16(1000))
	f.Add([]byte{0, 0, 0x10, 0, 'x'}, uint16(0xffff))
	f.Add([]byte{0, 0}, uint16(10))
	f.Fuzz(func(t *testing.T, stream []byte, maxFrame uint16) {
		r := bufio.NewReaderSize(bytes.NewReader(stream), 16)
		var buf []byte
		total := 0
		for range len(stream) + 1 {
			b, err := ReadFrame(r, buf, int(maxFrame))
			if cap(b) > int(maxFrame) {
				t.Fatalf("buffer grown to %d bytes, limit %d", cap(b), maxFrame)
			}
			if err != nil {
				if len(b) != 0 {
					t.Fatalf("error %v with a %d-byte body", err, len(b))
				}
				if !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) &&
					!errors.Is(err, ErrMalformed) && !errors.Is(err, ErrFrameTooLarge) {
					t.Fatalf("unexpected error %v", err)
				}
				if errors.Is(err, io.EOF) && total != len(stream) {
					t.Fatalf("clean EOF after %d of %d bytes", total, len(stream))
				}
				return
			}
			if len(b) == 0 || len(b) > int(maxFrame) {
				t.Fatalf("frame of %d bytes, limit %d", len(b), maxFrame)
			}
			if want := stream[total+4 : total+4+len(b)]; !bytes.Equal(b, want) {
				t.Fatalf("frame body %x, stream has %x", b, want)
			}
			total += 4 + len(b)
			buf = b
		}
		t.Fatalf("more frames than bytes in the stream")
	})
}

// FuzzDecodeRequest feeds CHECK bodies to the server's decoder: it never
// yields more than maxBatch checks or an empty batch, every key and rule is a
// slice of the body, refusals are an *Error or ErrMalformed, and what it
// accepts re-encodes to a body that decodes to the same request.
func FuzzDecodeRequest(f *testing.F) {
	for _, fr := range sampleFrames() {
		f.Add(body(fr), uint8(128))
	}
	f.Add(body(AppendRequest(nil, 1, make([]Check, 20))), uint8(4))
	for _, b := range malformedBodies {
		f.Add(b, uint8(16))
	}
	f.Fuzz(func(t *testing.T, b []byte, maxBatch uint8) {
		// A reused request with stale checks, as the server holds one per connection.
		req := &Request{ID: 99, Checks: []Check{{Rule: []byte("stale"), Key: []byte("stale"), Cost: 5}}}
		err := DecodeRequest(b, req, int(maxBatch))
		if err != nil {
			var e *Error
			if !errors.As(err, &e) && !errors.Is(err, ErrMalformed) {
				t.Fatalf("error %v is neither an *Error nor ErrMalformed", err)
			}
			if e != nil && e.Code != CodeBatchTooLarge && e.Code != CodeBadRequest {
				t.Fatalf("refusal with code %d", e.Code)
			}
			return
		}
		if n := len(req.Checks); n == 0 || n > int(maxBatch) {
			t.Fatalf("accepted %d checks with maxBatch %d", n, maxBatch)
		}
		for i, c := range req.Checks {
			if !within(b, c.Rule) || !within(b, c.Key) {
				t.Fatalf("check %d: rule or key does not alias the body", i)
			}
			if c.MaxDelay < 0 {
				t.Fatalf("check %d: negative max delay %v", i, c.MaxDelay)
			}
		}
		again := &Request{}
		if err := DecodeRequest(body(AppendRequest(nil, req.ID, req.Checks)), again, int(maxBatch)); err != nil {
			t.Fatalf("re-encoded request refused: %v", err)
		}
		if !sameRequest(req, again) {
			t.Fatalf("round trip changed the request:\n%+v\n%+v", req, again)
		}
	})
}

// FuzzRequestRoundTrip builds requests from fuzzed fields and checks that
// decode(encode(request)) is the request.
func FuzzRequestRoundTrip(f *testing.F) {
	f.Add(uint64(7), []byte("api"), []byte("alice"), uint64(1), int64(0), uint8(1))
	f.Add(uint64(1<<63), []byte(""), bytes.Repeat([]byte("k"), 300), uint64(math.MaxUint64), int64(time.Second), uint8(40))
	f.Add(uint64(0), []byte("r"), []byte{0, 0xff}, uint64(1<<32), int64(math.MaxInt64), uint8(16))
	f.Add(uint64(0), []byte("r"), []byte("k"), uint64(0), int64(-1), uint8(0))
	f.Fuzz(func(t *testing.T, id uint64, rule, key []byte, cost uint64, maxDelay int64, n uint8) {
		checks := make([]Check, n)
		for i := range checks {
			// Vary the checks so a decoder that mixes entries up is caught.
			checks[i] = Check{Rule: rule, Key: key[:len(key)*i/max(int(n), 1)], Cost: cost + uint64(i), MaxDelay: time.Duration(maxDelay)}
		}
		req := &Request{}
		err := DecodeRequest(body(AppendRequest(nil, id, checks)), req, 255)
		if n == 0 {
			var e *Error
			if !errors.As(err, &e) || e.Code != CodeBadRequest || e.ID != id {
				t.Fatalf("empty batch: %v", err)
			}
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		if req.ID != id || len(req.Checks) != len(checks) {
			t.Fatalf("decoded id %d with %d checks, want %d with %d", req.ID, len(req.Checks), id, len(checks))
		}
		for i, c := range req.Checks {
			want := checks[i]
			want.MaxDelay = max(want.MaxDelay, 0) // a plain check has no delay
			want.MaxDelay = min(want.MaxDelay, 1<<62)
			if !bytes.Equal(c.Rule, want.Rule) || !bytes.Equal(c.Key, want.Key) || c.Cost != want.Cost || c.MaxDelay != want.MaxDelay {
				t.Fatalf("check %d: decoded %+v, want %+v", i, c, want)
			}
		}
	})
}

// FuzzDecodeServerMessages feeds a body to the server's other decoders
// (PeekType, HELLO, INSPECT, REPORT): no panics, refusals wrap ErrMalformed,
// and what is accepted survives a re-encoding unchanged.
func FuzzDecodeServerMessages(f *testing.F) {
	for _, fr := range sampleFrames() {
		f.Add(body(fr))
	}
	for _, b := range malformedBodies {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		typ, n, err := PeekType(b)
		requireMalformed(t, "peek", err)
		if err == nil && (n < 1 || n > len(b)) {
			t.Fatalf("peek: %d elements in %d bytes", n, len(b))
		}
		h, err := DecodeHello(b)
		requireMalformed(t, "hello", err)
		if err == nil {
			if typ != MsgHello {
				t.Fatalf("hello decoded from a message of type %d", typ)
			}
			if got, err := DecodeHello(body(AppendHello(nil, h))); err != nil || got != h {
				t.Fatalf("hello round trip: %+v, %+v, %v", h, got, err)
			}
		}
		id, rule, key, err := DecodeInspect(b)
		requireMalformed(t, "inspect", err)
		if err == nil {
			if !within(b, rule) || !within(b, key) {
				t.Fatal("inspect: rule or key does not alias the body")
			}
			gid, grule, gkey, err := DecodeInspect(body(AppendInspect(nil, id, rule, key)))
			if err != nil || gid != id || !bytes.Equal(grule, rule) || !bytes.Equal(gkey, key) {
				t.Fatalf("inspect round trip: %v", err)
			}
		}
		rep, err := DecodeReport(b)
		requireMalformed(t, "report", err)
		if err == nil {
			if got, err := DecodeReport(body(AppendReport(nil, rep))); err != nil || got != rep {
				t.Fatalf("report round trip: %+v, %+v, %v", rep, got, err)
			}
		}
	})
}

// FuzzDecodeClientMessages feeds a body to the client's decoders (WELCOME,
// RESULT, BALANCE, ERROR): a daemon sending garbage gets an error back, never
// a panic, and what is accepted survives a re-encoding unchanged.
func FuzzDecodeClientMessages(f *testing.F) {
	for _, fr := range sampleFrames() {
		f.Add(body(fr))
	}
	for _, b := range malformedBodies {
		f.Add(b)
	}
	f.Add([]byte{0x94, 0x03, 0x07, 0xc2, 0x91, 0x96, 0, 0, 0, 0xcf, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0, 0}) // duration overflow
	f.Fuzz(func(t *testing.T, b []byte) {
		w, err := DecodeWelcome(b)
		requireMalformed(t, "welcome", err)
		if err == nil {
			if got, err := DecodeWelcome(body(AppendWelcome(nil, w))); err != nil || got != w {
				t.Fatalf("welcome round trip: %+v, %+v, %v", w, got, err)
			}
		}
		rep := &Reply{Results: []Result{{Status: StatusSoft, Limit: 1}}} // reused, as clients do
		err = DecodeReply(b, rep)
		requireMalformed(t, "reply", err)
		if err == nil {
			if len(rep.Results) > len(b) {
				t.Fatalf("reply: %d results from %d bytes", len(rep.Results), len(b))
			}
			for i, r := range rep.Results {
				if r.RetryAfter < 0 || r.ResetAfter < 0 || r.Period < 0 {
					t.Fatalf("reply: result %d has a negative duration: %+v", i, r)
				}
			}
			got := &Reply{}
			if err := DecodeReply(body(AppendReply(nil, rep.ID, rep.Allowed, rep.Results)), got); err != nil ||
				got.ID != rep.ID || got.Allowed != rep.Allowed || !slicesEqual(got.Results, rep.Results) {
				t.Fatalf("reply round trip: %+v, %+v, %v", rep, got, err)
			}
		}
		in, err := DecodeBalance(b)
		requireMalformed(t, "balance", err)
		if err == nil {
			got, err := DecodeBalance(body(AppendBalance(nil, in)))
			// Compare the balance by its bits: NaN is not equal to itself.
			same := got.ID == in.ID && got.Known == in.Known && got.Limit == in.Limit && got.Burst == in.Burst &&
				math.Float64bits(got.Balance) == math.Float64bits(in.Balance)
			if err != nil || !same {
				t.Fatalf("balance round trip: %+v, %+v, %v", in, got, err)
			}
		}
		e, err := DecodeError(b)
		requireMalformed(t, "error", err)
		if err == nil {
			if got, err := DecodeError(body(AppendError(nil, e))); err != nil || *got != *e {
				t.Fatalf("error round trip: %+v, %+v, %v", e, got, err)
			}
		}
	})
}

// FuzzMessageRoundTrip builds every other message from fuzzed fields, frames
// it, reads the frame back with ReadFrame and decodes it.
func FuzzMessageRoundTrip(f *testing.F) {
	f.Add(uint64(2), uint64(7), "sluiced", "api", 2.5, true)
	f.Add(uint64(math.MaxUint64), uint64(0), "", string(bytes.Repeat([]byte("x"), 70000)), math.Inf(-1), false)
	f.Add(uint64(1<<31), uint64(1<<16), "\xff\x00", "k", math.NaN(), true)
	f.Fuzz(func(t *testing.T, a, b uint64, s1, s2 string, fl float64, flag bool) {
		var stream []byte
		stream = AppendHello(stream, Hello{Version: a, Client: s1})
		stream = AppendWelcome(stream, Welcome{Version: a, Server: s2, MaxFrame: b, MaxBatch: a ^ b, MaxKeyLen: a + b})
		stream = AppendInspect(stream, a, s1, s2)
		stream = AppendBalance(stream, Inspection{ID: b, Known: flag, Balance: fl, Limit: a, Burst: b})
		stream = AppendReport(stream, Report{FailedOpen: a, FailedClosed: b})
		stream = AppendError(stream, &Error{ID: a, Code: ErrorCode(b), Message: s2})
		results := []Result{{Status: Status(a), Limit: b, Remaining: a, RetryAfter: time.Duration(a >> 1), ResetAfter: time.Duration(b >> 1), Period: time.Second}}
		stream = AppendReply(stream, b, flag, results)

		r := bufio.NewReader(bytes.NewReader(stream))
		next := func() []byte {
			t.Helper()
			fr, err := ReadFrame(r, nil, len(stream))
			if err != nil {
				t.Fatalf("read frame: %v", err)
			}
			return fr
		}
		if h, err := DecodeHello(next()); err != nil || h != (Hello{Version: a, Client: s1}) {
			t.Fatalf("hello: %+v %v", h, err)
		}
		if w, err := DecodeWelcome(next()); err != nil || w != (Welcome{Version: a, Server: s2, MaxFrame: b, MaxBatch: a ^ b, MaxKeyLen: a + b}) {
			t.Fatalf("welcome: %+v %v", w, err)
		}
		if id, rule, key, err := DecodeInspect(next()); err != nil || id != a || string(rule) != s1 || string(key) != s2 {
			t.Fatalf("inspect: %d %q %q %v", id, rule, key, err)
		}
		if in, err := DecodeBalance(next()); err != nil || in.ID != b || in.Known != flag || in.Limit != a || in.Burst != b ||
			math.Float64bits(in.Balance) != math.Float64bits(fl) {
			t.Fatalf("balance: %+v %v", in, err)
		}
		if rep, err := DecodeReport(next()); err != nil || rep != (Report{FailedOpen: a, FailedClosed: b}) {
			t.Fatalf("report: %+v %v", rep, err)
		}
		if e, err := DecodeError(next()); err != nil || *e != (Error{ID: a, Code: ErrorCode(b), Message: s2}) {
			t.Fatalf("error: %+v %v", e, err)
		}
		rep := &Reply{}
		if err := DecodeReply(next(), rep); err != nil || rep.ID != b || rep.Allowed != flag || !slicesEqual(rep.Results, results) {
			t.Fatalf("reply: %+v %v", rep, err)
		}
		if _, err := ReadFrame(r, nil, len(stream)); !errors.Is(err, io.EOF) {
			t.Fatalf("after the last frame: %v", err)
		}
	})
}

// within reports whether p is a sub-slice of b (or empty).
func within(b, p []byte) bool {
	if len(p) == 0 {
		return true
	}
	for off := 0; off+len(p) <= len(b); off++ {
		if &b[off] == &p[0] {
			return true
		}
	}
	return false
}

func sameRequest(a, b *Request) bool {
	if a.ID != b.ID || len(a.Checks) != len(b.Checks) {
		return false
	}
	for i := range a.Checks {
		x, y := a.Checks[i], b.Checks[i]
		if !bytes.Equal(x.Rule, y.Rule) || !bytes.Equal(x.Key, y.Key) || x.Cost != y.Cost || x.MaxDelay != y.MaxDelay {
			return false
		}
	}
	return true
}

func slicesEqual(a, b []Result) bool { return reflect.DeepEqual(a, b) || (len(a) == 0 && len(b) == 0) }

// requireMalformed fails the test unless err is nil or wraps ErrMalformed.
func requireMalformed(t *testing.T, what string, err error) {
	t.Helper()
	if err != nil && !errors.Is(err, ErrMalformed) {
		t.Fatalf("%s: error %v does not wrap ErrMalformed", what, err)
	}
}
