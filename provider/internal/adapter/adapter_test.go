package adapter

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/retryhost/retryhost/abi"
	"github.com/retryhost/retryhost/driver"
)

func TestClassify(t *testing.T) {
	tests := []struct {
		status         int
		typ, code, msg string
		want           abi.ErrorClass
	}{
		{429, "requests", "rate_limit_exceeded", "", abi.ClassRateLimit},
		{429, "", "", "", abi.ClassRateLimit},
		{503, "server_error", "", "", abi.ClassOverloaded},
		{529, "overloaded_error", "", "", abi.ClassOverloaded},
		{529, "", "", "", abi.ClassOverloaded},
		{500, "", "", "", abi.ClassServer},
		{502, "", "", "", abi.ClassServer},
		{401, "", "", "", abi.ClassAuth},
		{403, "permission_error", "", "", abi.ClassAuth},
		{400, "invalid_request_error", "context_length_exceeded", "", abi.ClassContextLength},
		{400, "invalid_request_error", "", "prompt is too long: 215412 tokens > 200000 maximum", abi.ClassContextLength},
		{400, "invalid_request_error", "content_filter", "", abi.ClassContentFilter},
		{400, "invalid_request_error", "", "", abi.ClassClient},
		{404, "not_found_error", "", "", abi.ClassClient},
		{0, "overloaded_error", "", "", abi.ClassOverloaded},
		{0, "api_error", "", "", abi.ClassServer},
		{0, "server_error", "", "", abi.ClassServer},
		{0, "something_new", "", "", abi.ClassUnknown},
		{0, "invalid_request_error", "", "", abi.ClassClient},
		{0, "", "invalid_image_url", "", abi.ClassClient},
		{0, "", "invalid_api_key", "", abi.ClassAuth},
	}
	for _, tt := range tests {
		t.Run(tt.typ+"/"+tt.code+"/"+http.StatusText(tt.status), func(t *testing.T) {
			require.Equal(t, tt.want, Classify(tt.status, tt.typ, tt.code, tt.msg))
		})
	}
}

func TestHTTPErrorRetryable(t *testing.T) {
	h := func(kv ...string) http.Header {
		out := http.Header{}
		for i := 0; i < len(kv); i += 2 {
			out.Set(kv[i], kv[i+1])
		}
		return out
	}
	require.True(t, HTTPError("p", 429, h(), nil, "", "", "", nil).Retryable)
	require.False(t, HTTPError("p", 429, h(), nil, "insufficient_quota", "insufficient_quota", "", nil).Retryable)
	require.False(t, HTTPError("p", 500, h("x-should-retry", "false"), nil, "", "", "", nil).Retryable)
	require.True(t, HTTPError("p", 400, h("x-should-retry", "true"), nil, "", "", "", nil).Retryable)
	require.False(t, HTTPError("p", 400, h(), nil, "", "", "", nil).Retryable)
	e := HTTPError("p", 500, h(), make([]byte, MaxBody+10), "", "", "", nil)
	require.Len(t, e.Body, MaxBody)
	require.Equal(t, "Internal Server Error", e.Message)
}

func TestTransportError(t *testing.T) {
	bg := context.Background()
	cut := TransportError(bg, "p", false, io.ErrUnexpectedEOF)
	var pe *driver.ProviderError
	require.ErrorAs(t, cut, &pe)
	require.Equal(t, abi.ClassNetwork, pe.Class)
	require.True(t, pe.Retryable)
	require.ErrorIs(t, cut, io.ErrUnexpectedEOF)

	require.ErrorIs(t, TransportError(bg, "p", false, ErrTruncated), ErrTruncated)
	require.ErrorIs(t, TransportError(bg, "p", true, io.ErrUnexpectedEOF), net.ErrClosed)

	ctx, cancel := context.WithCancelCause(bg)
	cause := errors.New("gap deadline")
	cancel(cause)
	err := TransportError(ctx, "p", false, io.ErrUnexpectedEOF)
	require.ErrorIs(t, err, context.Canceled)
	require.ErrorIs(t, err, cause)

	own := &driver.ProviderError{Provider: "p", Class: abi.ClassServer}
	require.Same(t, own, TransportError(bg, "p", false, own))
}

// fakeSource yields batches of parts, then err; Next blocks while block is
// set, until Close.
type fakeSource struct {
	batches [][]abi.Part
	err     error
	block   bool
	closed  chan struct{}
	once    sync.Once
	closes  int
}

func (f *fakeSource) Next(q []abi.Part) ([]abi.Part, error) {
	if len(f.batches) > 0 {
		q = append(q, f.batches[0]...)
		f.batches = f.batches[1:]
		if len(f.batches) == 0 && f.err != nil {
			return q, f.err
		}
		return q, nil
	}
	if f.block {
		<-f.closed
		return q, io.ErrUnexpectedEOF // what a closed body reads as
	}
	return q, f.err
}

func (f *fakeSource) Close() error {
	f.closes++
	f.once.Do(func() { close(f.closed) })
	return nil
}

func text(s string) abi.Part { return abi.Part{Kind: abi.KindTextDelta, Delta: s} }

func drain(s *Stream) ([]string, error) {
	var out []string
	for {
		p, err := s.Recv()
		if err != nil {
			return out, err
		}
		out = append(out, p.Kind.String()+":"+p.Delta)
	}
}

func TestStreamDeliversPartsBeforeError(t *testing.T) {
	boom := &driver.ProviderError{Provider: "p", Class: abi.ClassServer}
	src := &fakeSource{batches: [][]abi.Part{{text("a"), text("b")}, {text("c")}}, err: boom, closed: make(chan struct{})}
	s := NewStream(context.Background(), "p", src, abi.Part{Kind: abi.KindStreamStart})
	got, err := drain(s)
	require.Equal(t, []string{"stream-start:", "text-delta:a", "text-delta:b", "text-delta:c"}, got)
	require.Same(t, boom, err)
	_, err2 := s.Recv()
	require.Same(t, boom, err2, "Recv repeats the error")
	require.Equal(t, 1, src.closes, "the connection is released once, at the error")
	require.NoError(t, s.Close())
	require.Equal(t, 1, src.closes)
}

func TestStreamEOF(t *testing.T) {
	src := &fakeSource{batches: [][]abi.Part{{text("a"), {Kind: abi.KindFinish, Finish: &abi.Finish{}}}}, err: io.EOF, closed: make(chan struct{})}
	got, err := drain(NewStream(context.Background(), "p", src))
	require.Equal(t, []string{"text-delta:a", "finish:"}, got)
	require.Equal(t, io.EOF, err)
}

func TestStreamTruncatedIsNetworkError(t *testing.T) {
	src := &fakeSource{batches: [][]abi.Part{{text("a")}}, err: ErrTruncated, closed: make(chan struct{})}
	_, err := drain(NewStream(context.Background(), "p", src))
	var pe *driver.ProviderError
	require.ErrorAs(t, err, &pe)
	require.Equal(t, abi.ClassNetwork, pe.Class)
	require.ErrorIs(t, err, ErrTruncated)
}

func TestStreamCancelDropsQueuedParts(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	src := &fakeSource{batches: [][]abi.Part{{text("a"), text("b")}}, closed: make(chan struct{})}
	s := NewStream(ctx, "p", src)
	p, err := s.Recv()
	require.NoError(t, err)
	require.Equal(t, "a", p.Delta)
	cancel()
	_, err = s.Recv()
	require.ErrorIs(t, err, context.Canceled)
	require.Equal(t, 1, src.closes)
}

func TestStreamCloseUnblocksRecv(t *testing.T) {
	src := &fakeSource{block: true, closed: make(chan struct{})}
	s := NewStream(context.Background(), "p", src)
	errc := make(chan error, 1)
	go func() {
		_, err := s.Recv()
		errc <- err
	}()
	time.Sleep(time.Millisecond) // let Recv block (the test passes either way)
	require.NoError(t, s.Close())
	select {
	case err := <-errc:
		require.ErrorIs(t, err, net.ErrClosed)
	case <-time.After(10 * time.Second):
		t.Fatal("Recv did not return")
	}
}

func TestRefusal(t *testing.T) {
	err := Refusal("openai", "stop", "I can't.")
	require.Equal(t, abi.ClassRefusal, err.Class)
	require.False(t, err.Retryable)
	var re *abi.RefusalError
	require.ErrorAs(t, err, &re)
	require.Equal(t, "I can't.", re.Text)
	require.Equal(t, "the model refused to answer", Refusal("anthropic", "refusal", "").Message)
}

// An error event that names no error type is a retryable
// server fault, never ClassUnknown, whatever else it carries.
func TestEventError(t *testing.T) {
	for _, tc := range []struct {
		name, typ, code, msg string
		class                abi.ErrorClass
		retryable            bool
		wantMsg              string
	}{
		{name: "no data", class: abi.ClassServer, retryable: true, wantMsg: EmptyErrorEvent},
		{name: "message only", msg: "upstream reset", class: abi.ClassServer, retryable: true, wantMsg: "upstream reset"},
		{name: "overloaded", typ: "overloaded_error", msg: "Overloaded", class: abi.ClassOverloaded, retryable: true, wantMsg: "Overloaded"},
		{name: "code only", code: "rate_limit_exceeded", class: abi.ClassRateLimit, retryable: true, wantMsg: EmptyErrorEvent},
		{name: "invalid request", typ: "invalid_request_error", msg: "bad", class: abi.ClassClient, wantMsg: "bad"},
		{name: "invalid prompt", code: "invalid_prompt", msg: "bad", class: abi.ClassClient, wantMsg: "bad"},
		{name: "new type", typ: "something_new", class: abi.ClassUnknown, wantMsg: EmptyErrorEvent},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := EventError("p", tc.typ, tc.code, tc.msg, nil, nil)
			require.Equal(t, tc.class, e.Class)
			require.Equal(t, tc.retryable, e.Retryable)
			require.Equal(t, tc.wantMsg, e.Message)
			require.Zero(t, e.Status)
		})
	}
}

func TestProviderNameAndModelKey(t *testing.T) {
	tests := []struct {
		name, provider string
		providerSet    bool
		key            string
		keySet         bool
		wantProvider   string
		wantKey        string
		wantErr        string
	}{
		{name: "defaults", wantProvider: "gemini", wantKey: "gemini/m"},
		{name: "provider set", provider: "vertex", providerSet: true, wantProvider: "vertex", wantKey: "vertex/m"},
		{name: "key set", key: "fast", keySet: true, wantProvider: "gemini", wantKey: "fast"},
		{name: "blank provider", provider: " ", providerSet: true, wantErr: "gemini: empty provider name"},
		{name: "blank key", key: " ", keySet: true, wantErr: "gemini: empty model key"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			prov, err := ProviderName("gemini", "gemini", tt.provider, tt.providerSet)
			if err == nil {
				var key string
				key, err = ModelKey("gemini", prov, "m", tt.key, tt.keySet)
				if err == nil {
					require.Empty(t, tt.wantErr)
					require.Equal(t, tt.wantProvider, prov)
					require.Equal(t, tt.wantKey, key)
					return
				}
			}
			require.EqualError(t, err, tt.wantErr)
		})
	}
}

func TestCollect(t *testing.T) {
	src := &abi.Source{URL: "https://example.com"}
	parts := []abi.Part{
		{Kind: abi.KindStreamStart},
		{Kind: abi.KindReasoningStart, ID: "r"}, {Kind: abi.KindReasoningDelta, ID: "r", Delta: "a"}, {Kind: abi.KindReasoningDelta, ID: "r", Delta: "b"},
		{Kind: abi.KindTextStart, ID: "t0"}, {Kind: abi.KindTextDelta, ID: "t0", Delta: "Hel"}, {Kind: abi.KindTextDelta, ID: "t0", Delta: "lo"},
		{Kind: abi.KindTextDelta, ID: "t1", Delta: "!"},
		{Kind: abi.KindToolInputDelta, ID: "c", Delta: "{}"}, {Kind: abi.KindToolCall, ID: "c"},
		{Kind: abi.KindSource, Source: src},
		{Kind: abi.KindFinish},
	}
	require.Equal(t, []abi.Part{
		{Kind: abi.KindReasoningDelta, ID: "r", Delta: "ab"},
		{Kind: abi.KindTextDelta, ID: "t0", Delta: "Hello"},
		{Kind: abi.KindTextDelta, ID: "t1", Delta: "!"},
		{Kind: abi.KindToolCall, ID: "c"},
		{Kind: abi.KindSource, Source: src},
	}, Collect(parts))
}
