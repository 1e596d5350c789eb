package ipc

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"time"

	mp "github.com/sluicelabs/sluice/internal/msgpackwire"
)

// ProtocolVersion is the highest protocol version this package speaks.
// Version 2 adds REPORT.
const ProtocolVersion = 2

// MsgType is the first element of every message.
type MsgType uint64

// Message types. HELLO and WELCOME share a number: one goes each way.
const (
	MsgHello   MsgType = 1
	MsgWelcome MsgType = 1
	MsgCheck   MsgType = 2
	MsgResult  MsgType = 3
	MsgError   MsgType = 4
	MsgInspect MsgType = 5
	MsgBalance MsgType = 6
	MsgReport  MsgType = 7
)

// Status is one check's outcome in a RESULT.
type Status uint64

// Check statuses.
const (
	// StatusOK: the check admits.
	StatusOK Status = 0
	// StatusOverLimit: the bucket does not cover the cost; retry_after says when it will.
	StatusOverLimit Status = 1
	// StatusUnknownRule: no such rule, and the daemon's policy denies unknown rules.
	StatusUnknownRule Status = 2
	// StatusUnknownRuleAllowed: no such rule, and the policy admits unknown rules.
	StatusUnknownRuleAllowed Status = 3
	// StatusDelayed: admitted and charged, but the caller must first wait
	// retry_after (the check asked to be shaped, and its turn comes within
	// its max_delay).
	StatusDelayed Status = 4
	// StatusShadowDenied: admitted because the rule is in shadow mode, but
	// the limit would have refused it (and nothing was charged).
	StatusShadowDenied Status = 5
	// StatusSoft: admitted (and charged) within the rule's soft margin
	// below zero.
	StatusSoft Status = 6
)

// Admits reports whether the status lets the request through.
func (s Status) Admits() bool {
	return s == StatusOK || s == StatusUnknownRuleAllowed || s == StatusDelayed || s == StatusShadowDenied || s == StatusSoft
}

func (s Status) String() string {
	switch s {
	case StatusOK:
		return "ok"
	case StatusOverLimit:
		return "over_limit"
	case StatusUnknownRule:
		return "unknown_rule"
	case StatusUnknownRuleAllowed:
		return "unknown_rule_allowed"
	case StatusDelayed:
		return "delayed"
	case StatusShadowDenied:
		return "shadow_denied"
	case StatusSoft:
		return "soft"
	}
	return fmt.Sprintf("status(%d)", uint64(s))
}

// ErrorCode classifies an ERROR message.
type ErrorCode uint64

// Error codes (docs/PROTOCOL.md, section 10). Codes below 100 concern the
// connection: sent with id 0, the server closes the connection after them
// (the one exception is CodeUnexpected with a request's id, refusing an
// INSPECT a server does not offer). Codes from 100 refuse a single request,
// whose id they carry; the connection stays usable.
const (
	CodeMalformed     ErrorCode = 1   // bytes that are not a valid message
	CodeFrameTooLarge ErrorCode = 2   // length prefix above max_frame
	CodeBadVersion    ErrorCode = 3   // no common protocol version
	CodeUnexpected    ErrorCode = 4   // unknown message type, or HELLO missing
	CodeTooManyConns  ErrorCode = 5   // the server is at its connection cap
	CodeShuttingDown  ErrorCode = 6   // the server is stopping
	CodePeerRefused   ErrorCode = 7   // the peer's uid and gid are not on the server's allow-list
	CodeBatchTooLarge ErrorCode = 100 // more checks than max_batch
	CodeKeyTooLong    ErrorCode = 101 // a key longer than max_key_len
	CodeBadCost       ErrorCode = 102 // cost 0, or above the rule's burst
	CodeBadRequest    ErrorCode = 103 // empty key, empty batch, other invalid fields
	CodeInternal      ErrorCode = 104 // the server could not decide (clients fail open or closed, not deny)
)

// Error is an ERROR message, and the error type for refusals the server sends.
type Error struct {
	ID      uint64
	Code    ErrorCode
	Message string
}

func (e *Error) Error() string { return fmt.Sprintf("sluiced error %d: %s", uint64(e.Code), e.Message) }

// Hello opens a connection.
type Hello struct {
	Version uint64
	Client  string
}

// Report tells the server what the client decided without it: calls it
// failed open (allowed) or closed (denied) because the daemon was down,
// slow or unreachable, since the client's previous report. It has no reply.
// A client sends it only to a server that agreed on version 2 or later.
type Report struct {
	FailedOpen   uint64
	FailedClosed uint64
}

// AppendReport appends a REPORT frame to b.
func AppendReport(b []byte, r Report) []byte {
	b, start := beginFrame(b)
	b = mp.AppendArrayHeader(b, 3)
	b = mp.AppendUint(b, uint64(MsgReport))
	b = mp.AppendUint(b, r.FailedOpen)
	b = mp.AppendUint(b, r.FailedClosed)
	return endFrame(b, start)
}

// DecodeReport decodes a REPORT body.
func DecodeReport(body []byte) (Report, error) {
	d, err := header(body, MsgReport, 3)
	if err != nil {
		return Report{}, err
	}
	var r Report
	if r.FailedOpen, err = d.Uint(); err != nil {
		return Report{}, err
	}
	if r.FailedClosed, err = d.Uint(); err != nil {
		return Report{}, err
	}
	return r, d.End()
}

// Welcome answers Hello and states the server's limits.
type Welcome struct {
	Version   uint64
	Server    string
	MaxFrame  uint64
	MaxBatch  uint64
	MaxKeyLen uint64
}

// Check is one limit to check in a request. When decoded by the server its
// byte slices alias the frame buffer and are valid only until the next frame.
type Check struct {
	Rule []byte
	Key  []byte
	Cost uint64
	// MaxDelay, when positive, asks for shaping: rather than deny, reserve
	// the tokens and say how long to wait, if that is at most MaxDelay.
	MaxDelay time.Duration
}

// Result is the outcome of one Check.
type Result struct {
	Status     Status
	Limit      uint64
	Remaining  uint64
	RetryAfter time.Duration
	ResetAfter time.Duration
	Period     time.Duration // Limit tokens refill per Period
}

// Request is a CHECK message.
type Request struct {
	ID     uint64
	Checks []Check
}

// Reply is a RESULT message.
type Reply struct {
	ID      uint64
	Allowed bool
	Results []Result
}

// Inspection is the answer to an INSPECT: a key's bucket as the daemon holds it.
type Inspection struct {
	ID      uint64
	Known   bool    // the rule exists
	Balance float64 // tokens now: at most Burst, negative when in debt
	Limit   uint64  // requests per period
	Burst   uint64
}

// AppendInspect appends an INSPECT frame to b.
func AppendInspect[S string | []byte](b []byte, id uint64, rule, key S) []byte {
	b, start := beginFrame(b)
	b = mp.AppendArrayHeader(b, 4)
	b = mp.AppendUint(b, uint64(MsgInspect))
	b = mp.AppendUint(b, id)
	b = mp.AppendStr(b, rule)
	b = mp.AppendStr(b, key)
	return endFrame(b, start)
}

// DecodeInspect decodes an INSPECT body; rule and key alias body.
func DecodeInspect(body []byte) (id uint64, rule, key []byte, err error) {
	d, err := header(body, MsgInspect, 4)
	if err != nil {
		return 0, nil, nil, err
	}
	if id, err = d.Uint(); err != nil {
		return 0, nil, nil, err
	}
	if rule, err = d.Bytes(); err != nil {
		return 0, nil, nil, err
	}
	if key, err = d.Bytes(); err != nil {
		return 0, nil, nil, err
	}
	return id, rule, key, d.End()
}

// AppendBalance appends a BALANCE frame to b.
func AppendBalance(b []byte, in Inspection) []byte {
	b, start := beginFrame(b)
	b = mp.AppendArrayHeader(b, 6)
	b = mp.AppendUint(b, uint64(MsgBalance))
	b = mp.AppendUint(b, in.ID)
	b = mp.AppendBool(b, in.Known)
	b = mp.AppendFloat64(b, in.Balance)
	b = mp.AppendUint(b, in.Limit)
	b = mp.AppendUint(b, in.Burst)
	return endFrame(b, start)
}

// DecodeBalance decodes a BALANCE body.
func DecodeBalance(body []byte) (Inspection, error) {
	d, err := header(body, MsgBalance, 6)
	if err != nil {
		return Inspection{}, err
	}
	var in Inspection
	if in.ID, err = d.Uint(); err != nil {
		return in, err
	}
	if in.Known, err = d.Bool(); err != nil {
		return in, err
	}
	if in.Balance, err = d.Float64(); err != nil {
		return in, err
	}
	if in.Limit, err = d.Uint(); err != nil {
		return in, err
	}
	if in.Burst, err = d.Uint(); err != nil {
		return in, err
	}
	return in, d.End()
}

// ErrMalformed is wrapped by every decoding error: the bytes are not a valid
// message of the protocol.
var ErrMalformed = mp.ErrMalformed

// ErrFrameTooLarge is returned by ReadFrame for a length prefix above the cap.
var ErrFrameTooLarge = errors.New("frame too large")

// ReadFrame reads one frame from r into buf (grown as needed, never beyond
// maxFrame) and returns its body, which aliases buf.
func ReadFrame(r *bufio.Reader, buf []byte, maxFrame int) ([]byte, error) {
	hdr, err := r.Peek(4) // not a local array: it would escape through io.Reader
	if err != nil {
		if len(hdr) > 0 && errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return buf[:0], err
	}
	n := binary.BigEndian.Uint32(hdr)
	r.Discard(4)
	if n == 0 {
		return buf[:0], fmt.Errorf("%w: empty frame", ErrMalformed)
	}
	if uint64(n) > uint64(maxFrame) {
		return buf[:0], fmt.Errorf("%w: %d bytes, limit %d", ErrFrameTooLarge, n, maxFrame)
	}
	if cap(buf) < int(n) {
		buf = make([]byte, n)
	}
	buf = buf[:n]
	if _, err := io.ReadFull(r, buf); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return buf[:0], err
	}
	return buf, nil
}

// beginFrame reserves a frame's length prefix; endFrame fills it in.
func beginFrame(b []byte) ([]byte, int) { return append(b, 0, 0, 0, 0), len(b) }

func endFrame(b []byte, start int) []byte {
	binary.BigEndian.PutUint32(b[start:], uint32(len(b)-start-4))
	return b
}

// AppendHello appends a HELLO frame to b.
func AppendHello(b []byte, h Hello) []byte {
	b, start := beginFrame(b)
	b = mp.AppendArrayHeader(b, 3)
	b = mp.AppendUint(b, uint64(MsgHello))
	b = mp.AppendUint(b, h.Version)
	b = mp.AppendStr(b, h.Client)
	return endFrame(b, start)
}

// AppendWelcome appends a WELCOME frame to b.
func AppendWelcome(b []byte, w Welcome) []byte {
	b, start := beginFrame(b)
	b = mp.AppendArrayHeader(b, 6)
	b = mp.AppendUint(b, uint64(MsgWelcome))
	b = mp.AppendUint(b, w.Version)
	b = mp.AppendStr(b, w.Server)
	b = mp.AppendUint(b, w.MaxFrame)
	b = mp.AppendUint(b, w.MaxBatch)
	b = mp.AppendUint(b, w.MaxKeyLen)
	return endFrame(b, start)
}

// AppendRequest appends a CHECK frame to b.
func AppendRequest(b []byte, id uint64, checks []Check) []byte {
	b, start := BeginRequest(b, id, len(checks))
	for _, c := range checks {
		b = AppendShapedCheck(b, c.Rule, c.Key, c.Cost, c.MaxDelay)
	}
	return FinishFrame(b, start)
}

// BeginRequest starts a CHECK frame of n checks; append each with AppendCheck,
// then call FinishFrame with the returned start. This lets a client encode
// string rules and keys without converting them to byte slices.
func BeginRequest(b []byte, id uint64, n int) ([]byte, int) {
	b, start := beginFrame(b)
	b = mp.AppendArrayHeader(b, 3)
	b = mp.AppendUint(b, uint64(MsgCheck))
	b = mp.AppendUint(b, id)
	return mp.AppendArrayHeader(b, n), start
}

// AppendCheck appends one check of a CHECK frame begun with BeginRequest.
func AppendCheck[S string | []byte](b []byte, rule, key S, cost uint64) []byte {
	b = mp.AppendArrayHeader(b, 3)
	b = mp.AppendStr(b, rule)
	b = mp.AppendStr(b, key)
	return mp.AppendUint(b, cost)
}

// AppendShapedCheck is AppendCheck with a maximum delay (see Check.MaxDelay);
// a zero maxDelay writes a plain check.
func AppendShapedCheck[S string | []byte](b []byte, rule, key S, cost uint64, maxDelay time.Duration) []byte {
	if maxDelay <= 0 {
		return AppendCheck(b, rule, key, cost)
	}
	b = mp.AppendArrayHeader(b, 4)
	b = mp.AppendStr(b, rule)
	b = mp.AppendStr(b, key)
	b = mp.AppendUint(b, cost)
	return mp.AppendUint(b, uint64(maxDelay))
}

// FinishFrame fills in the length of the frame that starts at start.
func FinishFrame(b []byte, start int) []byte { return endFrame(b, start) }

// AppendReply appends a RESULT frame to b.
func AppendReply(b []byte, id uint64, allowed bool, results []Result) []byte {
	b, start := beginFrame(b)
	b = mp.AppendArrayHeader(b, 4)
	b = mp.AppendUint(b, uint64(MsgResult))
	b = mp.AppendUint(b, id)
	b = mp.AppendBool(b, allowed)
	b = mp.AppendArrayHeader(b, len(results))
	for _, r := range results {
		b = mp.AppendArrayHeader(b, 6)
		b = mp.AppendUint(b, uint64(r.Status))
		b = mp.AppendUint(b, r.Limit)
		b = mp.AppendUint(b, r.Remaining)
		b = mp.AppendUint(b, uint64(max(r.RetryAfter, 0)))
		b = mp.AppendUint(b, uint64(max(r.ResetAfter, 0)))
		b = mp.AppendUint(b, uint64(max(r.Period, 0)))
	}
	return endFrame(b, start)
}

// AppendError appends an ERROR frame to b.
func AppendError(b []byte, e *Error) []byte {
	b, start := beginFrame(b)
	b = mp.AppendArrayHeader(b, 4)
	b = mp.AppendUint(b, uint64(MsgError))
	b = mp.AppendUint(b, e.ID)
	b = mp.AppendUint(b, uint64(e.Code))
	b = mp.AppendStr(b, e.Message)
	return endFrame(b, start)
}

// PeekType returns a body's message type and its element count.
func PeekType(body []byte) (MsgType, int, error) {
	d := mp.NewDecoder(body)
	n, err := d.ArrayLen()
	if err != nil {
		return 0, 0, err
	}
	if n < 1 {
		return 0, 0, d.Fail("empty message")
	}
	t, err := d.Uint()
	return MsgType(t), n, err
}

// header checks a body is an array of want elements starting with typ.
func header(body []byte, typ MsgType, want int) (mp.Decoder, error) {
	d := mp.NewDecoder(body)
	n, err := d.ArrayLen()
	if err != nil {
		return d, err
	}
	t, err := d.Uint()
	if err != nil {
		return d, err
	}
	if MsgType(t) != typ || n != want {
		return d, d.Fail(fmt.Sprintf("expected message %d with %d fields, got %d with %d", typ, want, t, n))
	}
	return d, nil
}

// DecodeHello decodes a HELLO body.
func DecodeHello(body []byte) (Hello, error) {
	d, err := header(body, MsgHello, 3)
	if err != nil {
		return Hello{}, err
	}
	var h Hello
	if h.Version, err = d.Uint(); err != nil {
		return Hello{}, err
	}
	name, err := d.Bytes()
	if err != nil {
		return Hello{}, err
	}
	h.Client = string(name)
	return h, d.End()
}

// DecodeWelcome decodes a WELCOME body.
func DecodeWelcome(body []byte) (Welcome, error) {
	d, err := header(body, MsgWelcome, 6)
	if err != nil {
		return Welcome{}, err
	}
	var w Welcome
	if w.Version, err = d.Uint(); err != nil {
		return Welcome{}, err
	}
	name, err := d.Bytes()
	if err != nil {
		return Welcome{}, err
	}
	w.Server = string(name)
	for _, f := range []*uint64{&w.MaxFrame, &w.MaxBatch, &w.MaxKeyLen} {
		if *f, err = d.Uint(); err != nil {
			return Welcome{}, err
		}
	}
	return w, d.End()
}

// DecodeRequest decodes a CHECK body into req, reusing req.Checks' storage.
// The checks' slices alias body. A batch above maxBatch is refused with an
// *Error carrying the request's id, so the connection can carry on.
func DecodeRequest(body []byte, req *Request, maxBatch int) error {
	d, err := header(body, MsgCheck, 3)
	if err != nil {
		return err
	}
	if req.ID, err = d.Uint(); err != nil {
		return err
	}
	n, err := d.ArrayLen()
	if err != nil {
		return err
	}
	if n == 0 || n > maxBatch {
		// Refuse before reading entries, but the frame must still be well formed.
		code, msg := CodeBatchTooLarge, fmt.Sprintf("batch of %d checks, limit %d", n, maxBatch)
		if n == 0 {
			code, msg = CodeBadRequest, "empty batch"
		}
		return &Error{ID: req.ID, Code: code, Message: msg}
	}
	req.Checks = req.Checks[:0]
	for range n {
		m, err := d.ArrayLen()
		if err != nil {
			return err
		}
		if m != 3 && m != 4 {
			return d.Fail("check must have 3 or 4 fields")
		}
		var c Check
		if c.Rule, err = d.Bytes(); err != nil {
			return err
		}
		if c.Key, err = d.Bytes(); err != nil {
			return err
		}
		if c.Cost, err = d.Uint(); err != nil {
			return err
		}
		if m == 4 {
			md, err := d.Uint()
			if err != nil {
				return err
			}
			c.MaxDelay = time.Duration(min(md, 1<<62))
		}
		req.Checks = append(req.Checks, c)
	}
	return d.End()
}

// DecodeReply decodes a RESULT body into rep, reusing rep.Results' storage.
func DecodeReply(body []byte, rep *Reply) error {
	d, err := header(body, MsgResult, 4)
	if err != nil {
		return err
	}
	if rep.ID, err = d.Uint(); err != nil {
		return err
	}
	if rep.Allowed, err = d.Bool(); err != nil {
		return err
	}
	n, err := d.ArrayLen()
	if err != nil {
		return err
	}
	rep.Results = rep.Results[:0]
	for range n {
		m, err := d.ArrayLen()
		if err != nil {
			return err
		}
		if m != 6 {
			return d.Fail("result must have 6 fields")
		}
		var f [6]uint64
		for i := range f {
			if f[i], err = d.Uint(); err != nil {
				return err
			}
		}
		if f[3] > 1<<63-1 || f[4] > 1<<63-1 || f[5] > 1<<63-1 {
			return d.Fail("duration overflows")
		}
		rep.Results = append(rep.Results, Result{Status: Status(f[0]), Limit: f[1], Remaining: f[2], RetryAfter: time.Duration(f[3]), ResetAfter: time.Duration(f[4]), Period: time.Duration(f[5])})
	}
	return d.End()
}

// DecodeError decodes an ERROR body.
func DecodeError(body []byte) (*Error, error) {
	d, err := header(body, MsgError, 4)
	if err != nil {
		return nil, err
	}
	e := &Error{}
	if e.ID, err = d.Uint(); err != nil {
		return nil, err
	}
	code, err := d.Uint()
	if err != nil {
		return nil, err
	}
	e.Code = ErrorCode(code)
	msg, err := d.Bytes()
	if err != nil {
		return nil, err
	}
	e.Message = string(msg)
	return e, d.End()
}
