package adapter

import (
	"context"
	"net/http"
)

// Record is what the HTTP client saw of one call, for the adapters whose
// SDK errors keep neither the headers nor the body (Gemini's, Bedrock's).
type Record struct {
	Status int
	Header http.Header
	Body   []byte // an error response's, up to MaxBody
}

type recordKey struct{}

// WithRecord returns a context whose call, sent through a Recording
// client, fills the returned Record once its response is in.
func WithRecord(ctx context.Context) (context.Context, *Record) {
	r := &Record{}
	return context.WithValue(ctx, recordKey{}, r), r
}

// Recording returns a copy of hc whose transport (hc's, or
// http.DefaultTransport when it has none) fills the Record of a call made
// with a WithRecord context; a call without one passes through untouched.
func Recording(hc *http.Client) *http.Client {
	c := *hc
	base := hc.Transport
	if base == nil {
		base = http.DefaultTransport
	}
	c.Transport = &recorder{base: base}
	return &c
}

// recorder is the transport that fills a call's Record.
type recorder struct{ base http.RoundTripper }

func (t *recorder) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.base.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	if r, ok := req.Context().Value(recordKey{}).(*Record); ok {
		r.Status, r.Header = resp.StatusCode, resp.Header
		if resp.StatusCode >= 400 {
			r.Body = ReadBody(resp)
		}
	}
	return resp, nil
}
