package main

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
)

// serveRevProxy serves a bare httputil.ReverseProxy to upstream, in a
// process of its own so that its RSS and CPU are its own.
func serveRevProxy(upstream string) {
	u, err := url.Parse(upstream)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	srv := &http.Server{Handler: newRevProxy(u)}
	if *heldH2C {
		srv.Protocols = new(http.Protocols)
		srv.Protocols.SetHTTP1(true)
		srv.Protocols.SetUnencryptedHTTP2(true)
	}
	serveChild(srv)
}

func newRevProxy(upstream *url.URL) *httputil.ReverseProxy {
	rp := httputil.NewSingleHostReverseProxy(upstream)
	rp.FlushInterval = -1
	rp.Transport = &http.Transport{MaxIdleConnsPerHost: 1024, DisableCompression: true}
	director := rp.Director
	rp.Director = func(r *http.Request) {
		director(r)
		if r.Body != nil && r.ContentLength > 0 {
			r.Body = &declaredBody{rc: r.Body, left: r.ContentLength}
		}
	}
	return rp
}

// declaredBody forwards a request body of a declared length and ends it
// there. Without it a bare ReverseProxy cut about 2% of the streams in the
// open loop at pace 0 (golang/go#40747, #15527): once the transport has
// sent the declared bytes it reads the inbound body once more to check
// that it ends; when the upstream answered first (it has the whole
// request) and the server, on writing the answer's headers, has closed
// that body, the read fails ("invalid Read on closed Body") and the
// transport's write loop closes the upstream connection under the answer
// being relayed ("ReverseProxy read error during body copy: … use of
// closed network connection"). Here the check is answered without
// touching the inbound body.
type declaredBody struct {
	rc   io.ReadCloser
	left int64
}

func (b *declaredBody) Read(p []byte) (int, error) {
	if b.left <= 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.rc.Read(p)
	b.left -= int64(n)
	if err == io.EOF && b.left > 0 {
		err = io.ErrUnexpectedEOF
	}
	return n, err
}

func (b *declaredBody) Close() error { return b.rc.Close() }
