package adapter

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"

	"github.com/retryhost/retryhost/abi"
	"github.com/retryhost/retryhost/driver"
)

// Source is an SDK stream as an adapter decodes it.
type Source interface {
	// Next reads SDK events until it has appended at least one part to q, or
	// the stream ends: io.EOF after the last part (the finish), or another
	// error. It may append parts and return an error in the same call; the
	// parts are delivered first.
	Next(q []abi.Part) ([]abi.Part, error)
	// Close closes the SDK stream and its HTTP body. It is called once, maybe
	// concurrently with Next, which must then return.
	Close() error
}

// Stream is a driver.Stream over a Source: the caller's Recv pulls the
// SDK stream, so the provider is read at the caller's pace. It owns no
// goroutine. Recv is for one goroutine; Close may be called from any.
type Stream struct {
	ctx      context.Context
	provider string
	src      Source
	header   http.Header
	body     leadingJSON // the response body, if it can say it opened with JSON

	q    []abi.Part
	head int
	err  error

	closed    atomic.Bool
	closeOnce sync.Once
}

// NewStream returns a stream that yields first, then the parts of src.
func NewStream(ctx context.Context, provider string, src Source, first ...abi.Part) *Stream {
	// Room for the parts one chunk most often gives (a held stream keeps
	// the queue as grown): a chunk that gives more grows it.
	q := make([]abi.Part, 0, 4)
	return &Stream{ctx: ctx, provider: provider, src: src, q: append(q, first...)}
}

var _ driver.HeaderStream = (*Stream)(nil)

// UsageSoFar returns the usage its source has seen, when the source can
// tell (driver.UsageReporter), else zero.
func (s *Stream) UsageSoFar() abi.Usage {
	if u, ok := s.src.(driver.UsageReporter); ok {
		return u.UsageSoFar()
	}
	return abi.Usage{}
}

// SetHeader records the HTTP response headers that Header returns. Call it
// before the stream is handed out.
func (s *Stream) SetHeader(h http.Header) { s.header = h }

// leadingJSON is a body that can say it opened with JSON in place of
// events (sseBody's LeadingJSON; the gateway's upstream bodies').
type leadingJSON interface{ LeadingJSON() []byte }

// SetBody records the response body whose events the stream reads: when
// it ends before the provider finished it and the body opened with a JSON
// error object in place of events (a 200 text/event-stream whose body is
// {"error":{…}}, or whose first line is), Recv fails with that error, as
// JSONError does for one under a JSON Content-Type, instead of
// ErrTruncated. A body that cannot say (not an event body of ours, or one
// an SDK middleware wrapped) changes nothing. Call it before the stream is
// handed out.
func (s *Stream) SetBody(body io.Reader) { s.body, _ = body.(leadingJSON) }

// leadError is the error of the JSON the body opened with, when the
// stream ended with err before the provider finished it and that JSON, or
// its first line, is an error object; nil otherwise.
func (s *Stream) leadError(err error) error {
	if s.body == nil || !errors.Is(err, ErrTruncated) {
		return nil
	}
	lead := s.body.LeadingJSON()
	pe := BodyError(s.provider, lead)
	if pe == nil {
		if i := bytes.IndexByte(lead, '\n'); i >= 0 {
			pe = BodyError(s.provider, lead[:i])
		}
	}
	if pe == nil {
		return nil
	}
	pe.Header = s.header
	return pe
}

// Header returns the HTTP response headers of the stream (the provider's
// request id, rate-limit counters…), nil when there were none. The map is
// the response's own: read it, do not modify it.
func (s *Stream) Header() http.Header { return s.header }

// Recv returns the next part, io.EOF after the finish part, or the error
// that ended the stream (again on every later call).
func (s *Stream) Recv() (abi.Part, error) {
	if s.err == nil {
		// A done context or a Close stops the stream at once, also when
		// parts are still queued.
		if s.ctx.Err() != nil {
			s.drop()
			s.fail(CtxError(s.ctx))
		} else if s.closed.Load() {
			s.drop()
			s.fail(net.ErrClosed)
		}
	}
	for s.head >= len(s.q) {
		if s.err != nil {
			return abi.Part{}, s.err
		}
		s.q, s.head = s.q[:0], 0
		var err error
		s.q, err = s.src.Next(s.q)
		if err != nil {
			if errors.Is(err, io.EOF) && !errors.Is(err, ErrTruncated) {
				s.fail(io.EOF)
			} else if le := s.leadError(err); le != nil && s.ctx.Err() == nil {
				s.fail(le)
			} else {
				s.fail(TransportError(s.ctx, s.provider, s.closed.Load(), err))
			}
		}
	}
	p := s.q[s.head]
	s.q[s.head] = abi.Part{}
	s.head++
	return p, nil
}

// fail ends the stream with err (after the parts still queued) and
// releases the connection.
func (s *Stream) fail(err error) {
	s.err = err
	s.release()
}

func (s *Stream) drop() {
	clear(s.q[s.head:])
	s.q, s.head = s.q[:0], 0
}

func (s *Stream) release() {
	s.closeOnce.Do(func() { _ = s.src.Close() })
}

// Close releases the stream and its connection; a blocked Recv returns.
func (s *Stream) Close() error {
	s.closed.Store(true)
	s.release()
	return nil
}

// Collect folds the parts of a whole answer, decoded as a stream's, into
// a Response's Content: one delta per text or reasoning block (its
// deltas joined), the tool calls and sources whole; the rest (block
// starts and ends, tool input deltas, finish) is left out.
func Collect(parts []abi.Part) []abi.Part {
	var out []abi.Part
	for _, p := range parts {
		switch p.Kind {
		case abi.KindTextDelta, abi.KindReasoningDelta:
			if n := len(out); n > 0 && out[n-1].Kind == p.Kind && out[n-1].ID == p.ID {
				out[n-1].Delta += p.Delta
				continue
			}
			out = append(out, p)
		case abi.KindToolCall, abi.KindSource:
			out = append(out, p)
		}
	}
	return out
}
