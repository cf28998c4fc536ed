// Package fake is a scripted, in-process driver.Model for the examples
// whose subject is not the provider: each call streams words or fails with
// the next scripted error. Real code uses a provider adapter (see
// examples/openai-loopback).
package fake

import (
	"context"
	"errors"
	"io"
	"strings"
	"sync"

	"github.com/retryhost/retryhost/abi"
	"github.com/retryhost/retryhost/driver"
)

// Model answers every call with Words (streamed one part each), after
// failing its first calls with Failures in order. It is safe for
// concurrent use.
type Model struct {
	ID       string // the key, "provider/model"
	Words    []string
	Failures []error

	mu    sync.Mutex
	calls int
}

// Key returns m.ID.
func (m *Model) Key() string { return m.ID }

// Calls reports how many calls m received.
func (m *Model) Calls() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.calls
}

func (m *Model) next() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.calls++
	if m.calls <= len(m.Failures) {
		return m.Failures[m.calls-1]
	}
	return nil
}

// Generate answers with the words joined.
func (m *Model) Generate(ctx context.Context, _ *driver.Request) (*driver.Response, error) {
	if err := m.next(); err != nil {
		return nil, err
	}
	return &driver.Response{
		Content: []driver.Part{{Kind: abi.KindTextDelta, Delta: strings.Join(m.Words, "")}},
		Finish:  driver.FinishReason{Unified: abi.ReasonStop, Raw: "stop"},
		Meta:    abi.ResponseMeta{ModelID: m.ID},
	}, ctx.Err()
}

// Stream streams a preamble, one text delta per word, and a stop.
func (m *Model) Stream(ctx context.Context, _ *driver.Request) (driver.Stream, error) {
	if err := m.next(); err != nil {
		return nil, err
	}
	ps := []driver.Part{
		{Kind: abi.KindStreamStart},
		{Kind: abi.KindResponseMeta, Meta: &abi.ResponseMeta{ModelID: m.ID}},
		{Kind: abi.KindTextStart, ID: "0"},
	}
	for _, w := range m.Words {
		ps = append(ps, driver.Part{Kind: abi.KindTextDelta, ID: "0", Delta: w})
	}
	ps = append(ps, driver.Part{Kind: abi.KindTextEnd, ID: "0"},
		driver.Part{Kind: abi.KindFinish, Finish: &abi.Finish{Reason: abi.FinishReason{Unified: abi.ReasonStop, Raw: "stop"}}})
	return &stream{ctx: ctx, parts: ps}, nil
}

type stream struct {
	ctx    context.Context
	parts  []driver.Part
	closed bool
}

func (s *stream) Recv() (driver.Part, error) {
	switch {
	case s.closed:
		return driver.Part{}, errors.New("fake: stream closed")
	case s.ctx.Err() != nil:
		return driver.Part{}, s.ctx.Err()
	case len(s.parts) == 0:
		return driver.Part{}, io.EOF
	}
	p := s.parts[0]
	s.parts = s.parts[1:]
	return p, nil
}

func (s *stream) Close() error { s.closed = true; return nil }

// ReadText drains s and returns its text, closing it.
func ReadText(s driver.Stream) (string, error) {
	defer s.Close()
	var b strings.Builder
	for {
		p, err := s.Recv()
		if errors.Is(err, io.EOF) {
			return b.String(), nil
		}
		if err != nil {
			return b.String(), err
		}
		if p.Kind == abi.KindTextDelta {
			b.WriteString(p.Delta)
		}
	}
}
