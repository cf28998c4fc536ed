package scenario

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/retryhost/retryhost/abi"
	"github.com/retryhost/retryhost/driver"
)

// scripted is the provider of a scenario's model: its n-th stream plays the
// n-th attempt script (or a seeded chaos attempt).
type scripted struct {
	name string
	spec *ModelScript

	mu      sync.Mutex
	n       int
	streams []*scriptStream
}

func (m *scripted) Key() string { return "scripted/" + m.name }

func (m *scripted) Generate(ctx context.Context, req *driver.Request) (*driver.Response, error) {
	st, err := m.Stream(ctx, req)
	if err != nil {
		return nil, err
	}
	defer st.Close()
	res := &driver.Response{}
	for {
		p, err := st.Recv()
		if err == io.EOF {
			return res, nil
		}
		if err != nil {
			return nil, err
		}
		switch p.Kind {
		case abi.KindTextDelta:
			res.Content = append(res.Content, p)
		case abi.KindFinish:
			res.Finish, res.Usage = p.Finish.Reason, p.Finish.Usage
		}
	}
}

func (m *scripted) Stream(ctx context.Context, _ *driver.Request) (driver.Stream, error) {
	m.mu.Lock()
	n := m.n
	m.n++
	m.mu.Unlock()
	script, err := m.spec.attempt(n)
	if err != nil {
		return nil, err
	}
	if script.OpenError != nil {
		if err := sleep(ctx, nil, dur(script.OpenError.After)); err != nil {
			return nil, err
		}
		return nil, script.OpenError.err()
	}
	s := &scriptStream{ctx: ctx, model: m.name, steps: script.Steps, closed: make(chan struct{})}
	m.mu.Lock()
	m.streams = append(m.streams, s)
	m.mu.Unlock()
	return s, nil
}

// leaks counts streams neither closed nor read to their end.
func (m *scripted) leaks() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := 0
	for _, s := range m.streams {
		s.mu.Lock()
		if !s.isClosed && s.done == nil {
			n++
		}
		s.mu.Unlock()
	}
	return n
}

func (spec *ModelScript) attempt(n int) (*AttemptScript, error) {
	if c := spec.Chaos; c != nil {
		return c.attempt(n), nil
	}
	if n >= len(spec.Attempts) {
		return nil, fmt.Errorf("scenario: no script for attempt %d of this model (it has %d)", n+1, len(spec.Attempts))
	}
	return &spec.Attempts[n], nil
}

// attempt draws the n-th chaos attempt: a seeded generator decides whether
// it fails and where: a 503 before any content, or a cut after k chunks.
func (c *Chaos) attempt(n int) *AttemptScript {
	r := rand.New(rand.NewPCG(c.Seed, uint64(n)))
	chunks := splitText(c.Text, c.Chunks)
	var steps []Step
	fail := r.Float64() < c.FailRate
	at := 0 // half of the failures come before any content
	if r.IntN(2) == 1 {
		at = 1 + r.IntN(len(chunks)) // the other half cut after 1..len chunks
	}
	for i, ch := range chunks {
		if fail && i == at {
			break
		}
		steps = append(steps, Step{Text: &ch})
	}
	if fail {
		if at == 0 {
			return &AttemptScript{Steps: append(steps, Step{Error: &ErrorSpec{Status: 503, Message: "chaos: unavailable"}})}
		}
		steps = append(steps, Step{Cut: true})
	}
	return &AttemptScript{Steps: steps}
}

func splitText(s string, n int) []string {
	n = max(n, 1)
	size := max((len(s)+n-1)/n, 1)
	var out []string
	for len(s) > size {
		out = append(out, s[:size])
		s = s[size:]
	}
	return append(out, s)
}

func (e *ErrorSpec) err() error {
	h := http.Header{}
	for k, v := range e.Headers {
		h.Set(k, v)
	}
	retryable := driver.DefaultRetryable(e.Status)
	if e.Retryable != nil {
		retryable = *e.Retryable
	}
	msg := e.Message
	if msg == "" {
		msg = "scripted error"
	}
	return &driver.ProviderError{Provider: "scripted", Status: e.Status, Type: e.Type, Message: msg, Header: h, Retryable: retryable}
}

// errCut is what a cut connection looks like.
var errCut = fmt.Errorf("scripted: connection cut: %w", io.ErrUnexpectedEOF)

type scriptStream struct {
	ctx    context.Context
	model  string
	steps  []Step
	closed chan struct{}

	// only Recv's goroutine
	i        int
	preamble int
	textOpen bool
	finished bool

	mu       sync.Mutex
	done     error // the terminal error (io.EOF included)
	isClosed bool
}

func (s *scriptStream) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.isClosed {
		s.isClosed = true
		close(s.closed)
	}
	return nil
}

func (s *scriptStream) end(err error) (driver.Part, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.done == nil {
		s.done = err
	}
	return driver.Part{}, s.done
}

func (s *scriptStream) Recv() (driver.Part, error) {
	s.mu.Lock()
	done, closed := s.done, s.isClosed
	s.mu.Unlock()
	if done != nil {
		return driver.Part{}, done
	}
	if closed {
		return s.end(errors.New("scripted: stream closed"))
	}
	if err := context.Cause(s.ctx); err != nil {
		return s.end(err)
	}
	switch s.preamble {
	case 0:
		s.preamble++
		return driver.Part{Kind: abi.KindStreamStart}, nil
	case 1:
		s.preamble++
		return driver.Part{Kind: abi.KindResponseMeta, ID: "resp-" + s.model, Meta: &abi.ResponseMeta{ID: "resp-" + s.model, ModelID: s.model}}, nil
	}
	for s.i < len(s.steps) {
		st := &s.steps[s.i]
		if st.Text != nil && !s.textOpen {
			s.textOpen = true
			return driver.Part{Kind: abi.KindTextStart, ID: "t"}, nil
		}
		s.i++
		switch {
		case st.Delay != nil:
			if err := sleep(s.ctx, s.closed, time.Duration(*st.Delay)); err != nil {
				return s.end(err)
			}
		case st.Stall:
			if err := sleep(s.ctx, s.closed, -1); err != nil {
				return s.end(err)
			}
		case st.Cut:
			return s.end(errCut)
		case st.Error != nil:
			return s.end(st.Error.err())
		case st.ErrorPart != nil:
			return driver.Part{Kind: abi.KindError, Err: st.ErrorPart.err()}, nil
		case st.Text != nil:
			return driver.Part{Kind: abi.KindTextDelta, ID: "t", Delta: *st.Text}, nil
		case st.Finish != "":
			return s.finish(st.Finish)
		default:
			return st.part(), nil
		}
	}
	if s.textOpen {
		s.textOpen = false
		return driver.Part{Kind: abi.KindTextEnd, ID: "t"}, nil
	}
	if !s.finished {
		return s.finish("stop")
	}
	return s.end(io.EOF)
}

func (s *scriptStream) finish(reason string) (driver.Part, error) {
	if s.textOpen { // close the text block first, then come back here
		s.textOpen = false
		s.i--
		return driver.Part{Kind: abi.KindTextEnd, ID: "t"}, nil
	}
	s.finished = true
	r, _ := abi.ParseReason(reason)
	return driver.Part{Kind: abi.KindFinish, Finish: &abi.Finish{Reason: abi.FinishReason{Unified: r, Raw: reason}}}, nil
}

// part builds a part named by its protocol kind.
func (st *Step) part() driver.Part {
	p := driver.Part{ID: "x", Delta: st.Delta}
	for k := abi.PartKind(1); k.Valid(); k++ {
		if k.String() == st.Part {
			p.Kind = k
		}
	}
	switch p.Kind {
	case abi.KindToolInputStart, abi.KindToolCall, abi.KindToolResult:
		p.Tool = &abi.ToolInfo{Name: st.Name, Input: st.Delta}
		if p.Kind != abi.KindToolInputStart {
			p.Delta = ""
		}
	case abi.KindFile:
		p.File = &abi.File{MediaType: "text/plain", Data: []byte(st.Delta)}
		p.Delta = ""
	case abi.KindSource:
		p.Source = &abi.Source{URL: st.Delta}
		p.Delta = ""
	case abi.KindReasoningStart, abi.KindReasoningDelta, abi.KindReasoningEnd:
		p.ID = "r"
	}
	return p
}

// sleep waits d (forever if d < 0), or until ctx is done or closed closes.
func sleep(ctx context.Context, closed <-chan struct{}, d time.Duration) error {
	if d == 0 {
		return nil
	}
	var tc <-chan time.Time
	if d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		tc = t.C
	}
	select {
	case <-tc:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-closed:
		return errors.New("scripted: stream closed")
	}
}

func dur(d *Duration) time.Duration {
	if d == nil {
		return 0
	}
	return time.Duration(*d)
}

// stepKinds lists the part kinds a step may name.
func stepKinds() string {
	var names []string
	for k := abi.PartKind(1); k.Valid(); k++ {
		if k != abi.KindError && k != abi.KindFinish && k != abi.KindStreamStart {
			names = append(names, k.String())
		}
	}
	return strings.Join(names, ", ")
}
