package openai

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"

	oai "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/retryhost/retryhost/abi"
	"github.com/retryhost/retryhost/driver"
	"github.com/retryhost/retryhost/provider/internal/adapter"
)

// streamFalse asks for a non-streamed answer in so many words: the API's
// default is false, but a compatible server's need not be. Made once.
var streamFalse = option.WithJSONSet("stream", false)

// streamJSON is Stream for a request that commits at its end, with
// WithUpstreamJSON: one non-streamed chat completion, replayed as the
// parts a one-chunk stream of it gives. It returns once the response's
// headers are in, as Stream does; the body is read at the first Recv, so
// what bounds it (the first-content deadline, the attempt's) is the
// driver's, as for a stream. Errors before the body map as Stream's do
// (openError): the same statuses, classes and Retry-After.
func (m *Model) streamJSON(ctx context.Context, req *driver.Request) (driver.Stream, error) {
	var raw *http.Response
	if body, t, err := m.directBody(req, false); err != nil {
		return nil, err
	} else if t != nil {
		if raw, err = m.send(ctx, t, req, body, false); err != nil {
			return nil, err
		}
	} else {
		params, opts, err := m.params(req, false)
		if err != nil {
			return nil, err
		}
		// The body is not read by the SDK: read here through MaxAnswer.
		_, err = m.client.Chat.Completions.New(ctx, params, append(opts, option.WithResponseBodyInto(&raw), streamFalse)...)
		if err != nil {
			return nil, m.openError(ctx, err, raw)
		}
	}
	if isEventStream(raw.Header.Get("Content-Type")) {
		// A compatible server that streams although asked not to: its
		// events are read as a stream's.
		if _, ok := raw.Body.(adapter.EventBody); !ok {
			raw.Body = adapter.SSEBody(raw.Body)
		}
		src := m.newSource()
		src.ev = &events{body: raw.Body}
		s := adapter.NewStream(ctx, m.provider, src, abi.Part{Kind: abi.KindStreamStart})
		s.SetHeader(raw.Header)
		s.SetBody(raw.Body)
		return s, nil
	}
	src := &answer{
		source: source{provider: m.provider, fields: m.fields},
		body:   raw.Body,
		size:   raw.ContentLength,
		header: raw.Header,
		sdk:    m.sdkChunks,
	}
	s := adapter.NewStream(ctx, m.provider, src, abi.Part{Kind: abi.KindStreamStart})
	s.SetHeader(raw.Header)
	return s, nil
}

// answer is the adapter.Source of a non-streamed chat completion: at its
// first Next it reads the whole body (under MaxAnswer), decodes it (the
// lean decoder, decodeCompletion, or the SDK's for what that declines), and
// hands it as one chunk to the stream's own mapping (source.chunk, then
// source.end), so the parts, their order, the refusal rules and the
// adapter's limits are the stream's.
type answer struct {
	source
	body   io.ReadCloser
	size   int64 // Content-Length, -1 when unknown
	header http.Header
	sdk    bool // decode with the SDK only (tests compare both paths)
}

func (a *answer) Close() error { return a.body.Close() }

func (a *answer) Next(q []abi.Part) ([]abi.Part, error) {
	b, err := readAnswer(a.body, a.size)
	if err != nil {
		if err == errAnswerCap {
			return q, answerLimit(a.provider)
		}
		return q, err // a cut body: adapter.TransportError, as a cut stream
	}
	if !a.sdk && decodeCompletion(b, &a.cur) {
		return a.replay(q)
	}
	return a.nextSDK(q, b)
}

// nextSDK decodes an answer with the SDK: what the lean decoder declines
// (an error object, wrong types, escaped keys…). Not inlined: the SDK's
// completion is large.
//
//go:noinline
func (a *answer) nextSDK(q []abi.Part, b []byte) ([]abi.Part, error) {
	var cc oai.ChatCompletion
	err := json.Unmarshal(b, &cc)
	if err != nil || len(cc.Choices) == 0 {
		// A 200 with an error object in place of the answer, mapped as
		// the streamed path maps one (adapter.JSONError).
		if e := adapter.BodyError(a.provider, b); e != nil {
			e.Header = a.header
			return q, e
		}
	}
	if err != nil {
		// Retryable, of the network class, as a stream's undecodable event.
		return q, fmt.Errorf("the non-streamed answer is not a chat.completion: %w", err)
	}
	a.cur.fromCompletion(&cc)
	return a.replay(q)
}

// replay maps the decoded completion as one chunk, then ends: a
// completion without a finish reason ends as a stream without one,
// truncated.
func (a *answer) replay(q []abi.Part) ([]abi.Part, error) {
	q, err := a.chunk(q, &a.cur)
	if err != nil {
		return q, err
	}
	return a.end(q)
}

// errAnswerCap is readAnswer's error past MaxAnswer (answerLimit is the
// one the caller sees).
var errAnswerCap = fmt.Errorf("answer body over %d bytes", MaxAnswer)

// answerLimit is the error of a non-streamed answer over MaxAnswer: an
// adapter limit (class server, not retryable), as a stream that breaks
// adapter.MaxHeld.
func answerLimit(provider string) *driver.ProviderError {
	return &driver.ProviderError{
		Provider: provider,
		Type:     adapter.LimitType,
		Message:  fmt.Sprintf("the non-streamed answer exceeded the adapter's limit of %d bytes (openai.MaxAnswer)", MaxAnswer),
		Class:    abi.ClassServer,
	}
}

// readAnswer reads body whole, failing with errAnswerCap as soon as it
// passes MaxAnswer (a Content-Length over it fails before any read). A
// known length sizes the buffer once.
func readAnswer(body io.Reader, size int64) ([]byte, error) {
	if size > MaxAnswer {
		return nil, errAnswerCap
	}
	n := 512
	if size >= 0 {
		n = int(size) + 1 // the extra byte sees EOF without growing
	}
	b := make([]byte, 0, n)
	for {
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)]
		}
		k, err := body.Read(b[len(b):min(cap(b), MaxAnswer+1)])
		b = b[:len(b)+k]
		if len(b) > MaxAnswer {
			return nil, errAnswerCap
		}
		if err == io.EOF {
			return b, nil
		}
		if err != nil {
			return b, err
		}
	}
}

// fromCompletion fills c from a non-streamed completion, as the one chunk
// a stream of the same answer would have been: the message in place of
// the delta, its tool calls indexed in order.
func (c *chunk) fromCompletion(cc *oai.ChatCompletion) {
	c.reset()
	c.id, c.model, c.created = cc.ID, cc.Model, cc.Created
	c.fingerprint, c.tier = cc.SystemFingerprint, string(cc.ServiceTier)
	if cc.JSON.Usage.Valid() {
		c.hasUsage, c.usage = true, usage(&cc.Usage)
	}
	for i := range cc.Choices {
		ch := &cc.Choices[i]
		if ch.Index != 0 {
			continue // n > 1 is not modelled, as in a stream
		}
		msg := &ch.Message
		o := choice{content: msg.Content, refusal: msg.Refusal, reasoning: reasoningText(msg.JSON.ExtraFields), finish: ch.FinishReason}
		if ch.JSON.Logprobs.Valid() {
			o.lp = ch.JSON.Logprobs.Raw()
			if lp := &ch.Logprobs; lp.JSON.Content.Valid() {
				o.lpContent = lp.JSON.Content.Raw()
			}
			if lp := &ch.Logprobs; lp.JSON.Refusal.Valid() {
				o.lpRefusal = lp.JSON.Refusal.Raw()
			}
		}
		for j := range msg.ToolCalls {
			tc := &msg.ToolCalls[j]
			o.tools = append(o.tools, toolDelta{index: int64(j), id: tc.ID, name: tc.Function.Name, args: tc.Function.Arguments})
		}
		c.choices = append(c.choices, o)
	}
}

// isEventStream reports whether a Content-Type is text/event-stream (in
// any case, with or without parameters).
func isEventStream(ct string) bool {
	mt, _, _ := strings.Cut(ct, ";")
	return strings.EqualFold(strings.TrimSpace(mt), "text/event-stream")
}
