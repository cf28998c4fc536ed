package openai

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"

	oai "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/retryhost/retryhost/abi"
	"github.com/retryhost/retryhost/driver"
	"github.com/retryhost/retryhost/provider/internal/adapter"
)

// directPath sends a Chat Completions request whose body leanBody writes
// (a gateway's, whose messages come as raw JSON) without the SDK's
// per-request pipeline, with the URL and the headers that pipeline
// composes for the model: they are captured from the SDK itself, once,
// and reused.
//
// For such a request the pipeline's work is the same every time: it
// applies the client's option closures, rebuilds the platform headers,
// validates and copies the body through the params' encoder, clones the
// request for its retry loop and wraps the transport in its origin check.
// That was ~35 µs of CPU a request, the largest share of what a gateway
// does of its own before the upstream answers (docs/benchmarks.md); BenchmarkRequest/stream/gateway went from 452 to 379
// allocations and from 46 to 36 KB a request without it. The path is taken only when nothing could make a
// request's pipeline differ from the captured one: no WithRequestOptions
// (middleware, timeouts), no SDK retries (WithMaxRetries 0, the default:
// the driver retries), no WithParam fields, Chat Completions, and no
// test's wish for the SDK's body (sdkBody). Of the SDK's headers, its
// X-Stainless-* ones are not sent: they describe the SDK build, OS and
// runtime of the gateway's host to the SDK vendor's telemetry (and the
// request's retry count, always 0 here), not the client, and with them
// the header map of every open upstream request outgrows a small map's
// single group (~1 KiB more per held stream). What the pipeline guards is
// kept: the body is checked to be JSON before anything is sent, a
// redirect is followed only within the base URL's origin, and an error
// answer becomes the same *openai.Error, and so the same
// *driver.ProviderError, as the SDK's.
type directPath struct {
	ok   bool         // the model qualifies (New)
	hc   *http.Client // the model's (nil: http.DefaultClient, as the SDK's)
	once sync.Once
	t    *directTemplate // nil until captured, or when capturing failed (the SDK path is used)
}

// directTemplate is the request the SDK composes for the model.
type directTemplate struct {
	// req is never sent: each request is a copy of it (WithContext) with
	// its body and headers. Its URL is shared by every request, never
	// modified (net/http does not).
	req    *http.Request
	header http.Header // every value slice clipped: a request's Add copies it
	client *http.Client
}

// errCaptured ends the SDK's request once its middleware has seen it.
var errCaptured = errors.New("openai: request captured")

// template returns the model's captured request, capturing it on first
// use; nil when the model does not qualify.
func (m *Model) template() *directTemplate {
	if !m.direct.ok || m.sdkBody {
		return nil
	}
	m.direct.once.Do(func() {
		var got *http.Request
		capture := option.WithMiddleware(func(r *http.Request, _ option.MiddlewareNext) (*http.Response, error) {
			got = r
			return nil, errCaptured
		})
		_, err := m.client.Chat.Completions.New(context.Background(), oai.ChatCompletionNewParams{Model: m.id}, capture)
		if got == nil || !errors.Is(err, errCaptured) {
			return
		}
		h := make(http.Header, len(got.Header))
		for k, vs := range got.Header {
			if strings.HasPrefix(k, "X-Stainless-") {
				continue // see directPath
			}
			h[k] = vs[:len(vs):len(vs)]
		}
		origin := *got.URL
		c := adapter.SameOriginRedirects("openai", m.direct.hc)
		// As http.NewRequestWithContext makes it, on the captured URL;
		// send fills in a copy of it (WithContext) per request.
		tr := &http.Request{
			Method:     http.MethodPost,
			URL:        &origin,
			Proto:      "HTTP/1.1",
			ProtoMajor: 1,
			ProtoMinor: 1,
			Host:       origin.Host,
		}
		m.direct.t = &directTemplate{req: tr, header: h, client: c}
	})
	return m.direct.t
}

// directBody returns the body of req sent on the direct path, with its
// "stream" member, and the model's template; a nil template (and no
// error) when the request or the model does not qualify: the SDK path
// sends it.
func (m *Model) directBody(req *driver.Request, stream bool) (body []byte, t *directTemplate, err error) {
	if t = m.template(); t == nil || req == nil {
		return nil, nil, nil
	}
	// Whether the request qualifies is decided before prepare translates
	// it: a request that does not (a library caller's own messages) is
	// translated once, by the SDK path. An entry that is not a map is the
	// SDK path's error to report.
	if fields, err := m.entry(req); err != nil || !m.leanable(req, fields) {
		return nil, nil, nil
	}
	p, fields, _, err := m.prepare(req, stream)
	if err != nil {
		return nil, nil, err
	}
	sv := "false"
	if stream {
		sv = "true"
	}
	if body, err = leanBody(&p, req.StopSequences, fields, sv); err != nil {
		return nil, nil, fmt.Errorf("openai: %w", err)
	}
	if !json.Valid(body) { // a forwarded raw value that is not JSON: the SDK's encoder refuses it too
		return nil, nil, errors.New("openai: the request body is not valid JSON (a raw ProviderOptions value)")
	}
	return body, t, nil
}

// send sends body on the direct path and returns the response of a 2xx;
// any other outcome is the error the SDK path gives for it (openError).
// sse normalizes an event stream's body as the SDK path's middleware does.
func (m *Model) send(ctx context.Context, t *directTemplate, req *driver.Request, body []byte, sse bool) (*http.Response, error) {
	// The template's request with ctx: one shallow copy, on the
	// template's URL (a parsed URL of its own is ~0.5 KiB that every open
	// stream would hold).
	hr := t.req.WithContext(ctx)
	hr.Body = io.NopCloser(bytes.NewReader(body))
	hr.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
	hr.ContentLength = int64(len(body))
	h := make(http.Header, len(t.header)+len(req.Headers))
	for k, vs := range t.header {
		h[k] = vs
	}
	for k, vs := range req.Headers { // as option.WithHeaderAdd
		for _, v := range vs {
			h.Add(k, v)
		}
	}
	hr.Header = h
	var (
		resp *http.Response
		err  error
	)
	if sse {
		resp, err = adapter.NormalizeSSE(hr, t.client.Do)
	} else {
		resp, err = t.client.Do(hr)
	}
	if err != nil {
		return nil, m.openError(ctx, err, nil)
	}
	if ctx.Err() != nil {
		_ = resp.Body.Close()
		return nil, adapter.CtxError(ctx)
	}
	if resp.StatusCode >= 400 {
		return nil, m.openError(ctx, apiError(resp), resp)
	}
	return resp, nil
}

// apiError is the SDK's error for an error answer: an *openai.Error
// decoded from the body's "error" member (from nothing when the body has
// none, as the SDK does), or the decoding's error, for which openError
// keeps the status and the body. The body is read (bounded) and put back
// for openError to read again.
func apiError(resp *http.Response) error {
	b := adapter.ReadBody(resp)
	var env struct {
		Error json.RawMessage `json:"error"`
	}
	if json.Unmarshal(b, &env) != nil {
		env.Error = nil
	}
	e := &oai.Error{Request: resp.Request, Response: resp, StatusCode: resp.StatusCode}
	if err := e.UnmarshalJSON(env.Error); err != nil {
		return err
	}
	return e
}

// streamDirect is Stream on the direct path.
func (m *Model) streamDirect(ctx context.Context, t *directTemplate, req *driver.Request, body []byte) (driver.Stream, error) {
	raw, err := m.send(ctx, t, req, body, true)
	if err != nil {
		return nil, err
	}
	if err := adapter.JSONError(m.provider, raw); err != nil {
		// A 200 with a JSON error object in place of the events.
		_ = raw.Body.Close()
		return nil, err
	}
	src := m.newSource()
	src.ev = &events{body: raw.Body}
	s := adapter.NewStream(ctx, m.provider, src, abi.Part{Kind: abi.KindStreamStart})
	s.SetHeader(raw.Header)
	s.SetBody(raw.Body) // a body that opens with a JSON error in place of events fails with it
	return s, nil
}
