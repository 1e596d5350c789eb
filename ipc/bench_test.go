package ipc

import "testing"

// BenchmarkServerRoundTrip is one request and its reply over the socket,
// one at a time (the server waits idle between requests, as with a client
// that has one call in flight).
func BenchmarkServerRoundTrip(b *testing.B) {
	ts := startServer(b, ServerConfig{})
	c := dialRaw(b, ts.path)
	c.hello()
	req := AppendRequest(nil, 1, []Check{check("api", "k")})
	buf := make([]byte, 0, 256)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := c.conn.Write(req); err != nil {
			b.Fatal(err)
		}
		if _, err := ReadFrame(c.br, buf, 1<<20); err != nil {
			b.Fatal(err)
		}
	}
}
