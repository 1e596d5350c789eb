// Package ipc is the protocol between a service and its local sluiced daemon,
// and the daemon's Unix-socket server. The wire types are defined once here and
// used by both the server and clientlib.
//
// The package speaks bytes and sockets; it does not decide anything. The
// daemon plugs its decisions in through the Decider interface.
//
// # Protocol, version 2
//
// The protocol's specification is docs/PROTOCOL.md: every message and
// field with its msgpack type, every status and error code, the id rules,
// the version handshake, the limits WELCOME announces and the bounded-key
// derivation, and the behaviour required of a client. Its test vectors,
// ipc/testdata/vectors.json, are generated from this package's code and
// replayed against it (vectors_test.go). What follows is a summary.
//
// A client connects to the daemon's Unix stream socket (see
// DefaultSocketPath). Each direction is a sequence of frames:
//
//	frame = length:uint32 big-endian | body:length bytes
//
// where body is exactly one msgpack value: an array whose first element is the
// message type. length is at least 1 and at most the server's frame cap (64 KiB
// by default; the WELCOME message states it). Integers may use any msgpack
// integer encoding but must not be negative; strings may be sent as str or bin.
//
// The first frame from the client must be HELLO; the server answers WELCOME,
// or ERROR and closes the connection if it cannot speak that version.
//
//	HELLO    [1, version, client_name]                 client → server
//	WELCOME  [1, version, server_name, max_frame, max_batch, max_key_len]
//	CHECK    [2, id, [[rule, key, cost(, max_delay_ns)], ...]]   client → server
//	RESULT   [3, id, allowed, [[status, limit, remaining, retry_after_ns, reset_after_ns, period_ns], ...]]
//	ERROR    [4, id, code, message]                    server → client
//	INSPECT  [5, id, rule, key]                        client → server
//	BALANCE  [6, id, known, balance, limit, burst]     server → client
//	REPORT   [7, failed_open, failed_closed]           client → server (version 2)
//
// version is the highest protocol version the client speaks; the server
// replies with the version it will use (the lower of the two). id is chosen by
// the client (never 0, which an ERROR uses to mean the connection is closing)
// and echoed in the RESULT, BALANCE or ERROR that answers it, so a client may
// have many requests in flight on one connection and match replies as they
// come (replies to one connection are sent in request order). A CHECK holds 1
// to max_batch checks; it is admitted only if every check admits, and only
// then is every check charged. A check with the optional fourth field asks to
// be shaped rather than refused: if its tokens will be there within
// max_delay_ns, they are taken now and its status is delayed (4) with
// retry_after saying how long the caller must wait before going ahead.
// RESULT carries one entry per check, in order (see Status and Result).
//
// INSPECT reads a key's bucket without charging it: BALANCE says whether the
// rule exists, the balance in tokens (a float: at most burst, negative when in
// debt), and the limit (requests per period) and burst that apply to the key.
// Servers that do not offer inspection refuse it with ERROR CodeUnexpected.
//
// REPORT (version 2; never sent to a version 1 server) tells the daemon how
// many calls the client decided without it, failing open or closed, since
// its previous REPORT. It has no reply.
//
// ERROR with a non-zero id refuses that request alone and charges nothing;
// the connection stays usable. ERROR with id 0 reports a connection-level
// fault (a frame larger than max_frame, bytes that are not a valid message,
// an unknown message type, a failed handshake, the connection cap, a
// shutdown, a peer not on the allow-list) and the server closes the
// connection after sending it. Codes are listed under ErrorCode.
//
// # Limits a server enforces
//
// A frame, once its first byte has arrived, must arrive whole within the
// server's frame timeout (ServerConfig.FrameTimeout, 5 s by default); HELLO
// within the handshake timeout. A client that stalls mid-frame is closed
// without a reply. Between frames a connection may stay idle as long as it
// likes, except that a server at its connection cap closes the connection
// that has waited longest for its next frame (or its HELLO), if it has
// waited at least ServerConfig.IdleReap (1 s by default), to admit a new
// one: that connection is sent ERROR CodeTooManyConns with id 0, then
// closed, and a client reconnects. Only when no connection has been idle
// that long is the newcomer refused with CodeTooManyConns. Frames larger
// than 4 KiB are read a bounded number at a time (ServerConfig.MaxLargeFrames):
// a large frame may wait for its turn, within the frame timeout. A server
// keeps at most 64 bytes of a HELLO's client_name (for its logs). What
// REPORTs add to the server's counts is bounded over all clients together
// (ServerConfig.MaxReportBurst and MaxReportRate); the excess is dropped
// and counted as such.
package ipc
