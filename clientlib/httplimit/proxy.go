package httplimit

import (
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"sync"
	"sync/atomic"
	"time"
)

// Proxy is a reverse proxy that puts a Middleware in front of one upstream:
// the sidecar for services in any language. Bodies are streamed both ways,
// WebSocket and other upgrades pass through, connections to the upstream are
// kept alive, and the middleware can be replaced while requests flow.
type Proxy struct {
	rp *httputil.ReverseProxy
	m  atomic.Pointer[Middleware]
}

// NewProxy returns a proxy to upstream behind m.
func NewProxy(upstream *url.URL, m *Middleware) *Proxy {
	transport := &http.Transport{
		Proxy:                 nil,
		DialContext:           (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:          1024,
		MaxIdleConnsPerHost:   1024, // one upstream: keep plenty of connections warm
		IdleConnTimeout:       90 * time.Second,
		ExpectContinueTimeout: time.Second,
		ForceAttemptHTTP2:     false,
		DisableCompression:    true, // pass the client's Accept-Encoding through untouched
	}
	p := &Proxy{}
	p.rp = &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(upstream)
			pr.Out.Host = pr.In.Host
			pr.SetXForwarded()
		},
		Transport:     transport,
		FlushInterval: 0, // responses of unknown length (streams, SSE) are flushed on every write anyway
		BufferPool:    bufferPool{},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			http.Error(w, "upstream unavailable", http.StatusBadGateway)
		},
	}
	p.m.Store(m)
	return p
}

// SetMiddleware swaps the limits in force; requests in flight finish with
// the ones they started with.
func (p *Proxy) SetMiddleware(m *Middleware) { p.m.Store(m) }

// ServeHTTP limits the request, then forwards it.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p.m.Load().ServeHTTP(w, r, p.rp)
}

// bufferPool reuses the proxy's copy buffers instead of allocating 32 KiB per request.
type bufferPool struct{}

var buffers = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

func (bufferPool) Get() []byte  { return *buffers.Get().(*[]byte) }
func (bufferPool) Put(b []byte) { buffers.Put(&b) }
