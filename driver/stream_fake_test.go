package driver

import (
	"context"
	"errors"
	"io"
	"sync"
	"time"

	"github.com/retryhost/retryhost/abi"
)

// manualClock is a manual clock: timers fire only when Advance passes them,
// synchronously, on the goroutine that advances.
type manualClock struct {
	mu     sync.Mutex
	now    time.Time
	timers []*manualTimer
}

type manualTimer struct {
	c    *manualClock
	at   time.Time
	f    func()
	live bool
}

func newManualClock() *manualClock { return &manualClock{now: time.Unix(1_700_000_000, 0)} }

func (c *manualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *manualClock) AfterFunc(d time.Duration, f func()) stopper {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &manualTimer{c: c, at: c.now.Add(d), f: f, live: true}
	c.timers = append(c.timers, t)
	return t
}

func (t *manualTimer) Stop() bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	was := t.live
	t.live = false
	return was
}

func (t *manualTimer) Reset(d time.Duration) bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	was := t.live
	t.live, t.at = true, t.c.now.Add(d)
	return was
}

// Advance moves the clock on by d, running every timer that comes due on
// the way, in order, each at its own time (so a timer that re-arms itself
// ticks as it would in real time).
func (c *manualClock) Advance(d time.Duration) {
	c.mu.Lock()
	target := c.now.Add(d)
	c.mu.Unlock()
	for {
		c.mu.Lock()
		var next *manualTimer
		for _, t := range c.timers {
			if t.live && !t.at.After(target) && (next == nil || t.at.Before(next.at)) {
				next = t
			}
		}
		if next == nil {
			c.now = target
			c.mu.Unlock()
			return
		}
		next.live = false
		if next.at.After(c.now) {
			c.now = next.at
		}
		c.mu.Unlock()
		next.f()
	}
}

// sstep is one scripted event of a fake stream.
type sstep struct {
	part Part
	err  error // Recv returns it (io.EOF ends the stream cleanly)
	// wait advances the model's fake clock by wait, then (like a stalled
	// provider) blocks until the stream's ctx is done or it is closed.
	wait  time.Duration
	stall bool
	do    func() // runs when the sstep is reached, before anything else
}

func pText(s string) sstep   { return sstep{part: Part{Kind: abi.KindTextDelta, ID: "t", Delta: s}} }
func pKind(k PartKind) sstep { return sstep{part: Part{Kind: k, ID: "t"}} }
func pErr(err error) sstep   { return sstep{err: err} }
func pStall(d time.Duration) sstep {
	return sstep{wait: d, stall: true}
}
func pFinish(r abi.Reason) sstep {
	return sstep{part: Part{Kind: abi.KindFinish, Finish: &abi.Finish{Reason: abi.FinishReason{Unified: r}}}}
}

// preamble is what a provider sends before its first text.
func preamble() []sstep {
	return []sstep{pKind(abi.KindStreamStart), pKind(abi.KindResponseMeta), pKind(abi.KindTextStart)}
}

func sscript(parts ...any) []sstep {
	var out []sstep
	for _, p := range parts {
		switch v := p.(type) {
		case sstep:
			out = append(out, v)
		case []sstep:
			out = append(out, v...)
		default:
			panic("script: bad element")
		}
	}
	return out
}

// scriptModel replays one script per attempt (Stream call); calls past the
// last script replay the last one. It records every stream it opened.
type scriptModel struct {
	key     string
	clock   *manualClock
	scripts [][]sstep
	openErr []error // per call; nil entries open normally

	mu      sync.Mutex
	streams []*scriptStream
	gens    int
	genResp []*Response
}

func (m *scriptModel) Key() string { return m.key }

func (m *scriptModel) Generate(ctx context.Context, _ *Request) (*Response, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	i := min(m.gens, len(m.genResp)-1)
	m.gens++
	if i < len(m.openErr) && m.openErr[i] != nil {
		return nil, m.openErr[i]
	}
	return m.genResp[i], nil
}

func (m *scriptModel) Stream(ctx context.Context, _ *Request) (Stream, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := len(m.streams)
	if n < len(m.openErr) && m.openErr[n] != nil {
		m.streams = append(m.streams, nil)
		return nil, m.openErr[n]
	}
	sc := m.scripts[min(n, len(m.scripts)-1)]
	s := &scriptStream{ctx: ctx, clock: m.clock, script: sc, closed: make(chan struct{})}
	m.streams = append(m.streams, s)
	return s, nil
}

func (m *scriptModel) opened() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.streams)
}

func (m *scriptModel) stream(i int) *scriptStream {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.streams[i]
}

// scriptStream honours the Stream contract: bound to ctx, Close unblocks Recv.
type scriptStream struct {
	ctx    context.Context
	clock  *manualClock
	script []sstep

	mu       sync.Mutex
	i        int
	err      error
	pulled   int // parts handed out
	closed   chan struct{}
	closeOne sync.Once
}

var errFakeClosed = errors.New("fake stream closed")

func (s *scriptStream) Recv() (Part, error) {
	s.mu.Lock()
	if s.err != nil {
		defer s.mu.Unlock()
		return Part{}, s.err
	}
	select {
	case <-s.closed:
		s.err = errFakeClosed
		s.mu.Unlock()
		return Part{}, errFakeClosed
	default:
	}
	if s.i >= len(s.script) {
		s.err = io.EOF
		s.mu.Unlock()
		return Part{}, io.EOF
	}
	st := s.script[s.i]
	s.i++
	if st.do != nil {
		s.mu.Unlock()
		st.do()
		s.mu.Lock()
	}
	if err := s.ctx.Err(); err != nil && !st.stall {
		s.err = err // bound to ctx: a done ctx ends the stream
		s.mu.Unlock()
		return Part{}, err
	}
	if st.stall {
		s.mu.Unlock()
		if st.wait > 0 && s.clock != nil {
			s.clock.Advance(st.wait)
		}
		select {
		case <-s.ctx.Done():
		case <-s.closed:
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		s.err = s.ctx.Err()
		if s.err == nil {
			s.err = errFakeClosed
		}
		return Part{}, s.err
	}
	defer s.mu.Unlock()
	if st.err != nil {
		s.err = st.err
		return Part{}, st.err
	}
	s.pulled++
	return st.part, nil
}

func (s *scriptStream) Close() error {
	s.closeOne.Do(func() { close(s.closed) })
	return nil
}

func (s *scriptStream) isClosed() bool {
	select {
	case <-s.closed:
		return true
	default:
		return false
	}
}

func (s *scriptStream) pulledParts() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pulled
}

// drain reads s to its end and returns the parts and the terminal error
// (nil for io.EOF).
func drain(s Stream) ([]Part, error) {
	var out []Part
	for {
		p, err := s.Recv()
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return out, err
		}
		out = append(out, p)
	}
}

func kinds(ps []Part) []string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = p.Kind.String()
		if p.Delta != "" {
			out[i] += ":" + p.Delta
		}
	}
	return out
}

func pDo(f func()) sstep { return sstep{do: f, stall: true} }

// funcTransform is a transform scripted by functions; it counts its
// instances' lifecycles.
type funcTransform struct {
	name   string
	policy abi.TransformPolicy
	open   func() error
	part   func(n int, p *Part) (abi.Verdict, error) // n counts the parts seen, from 0
	end    func() (abi.Verdict, error)

	mu             sync.Mutex
	opened, closed int
}

func (f *funcTransform) Name() string                { return f.name }
func (f *funcTransform) Policy() abi.TransformPolicy { return f.policy }
func (f *funcTransform) Open(context.Context, abi.StreamInfo) (abi.StreamTransform, error) {
	if f.open != nil {
		if err := f.open(); err != nil {
			return nil, err
		}
	}
	f.mu.Lock()
	f.opened++
	f.mu.Unlock()
	return &funcStream{f: f}, nil
}

func (f *funcTransform) counts() (opened, closed int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.opened, f.closed
}

type funcStream struct {
	f      *funcTransform
	n      int
	closed bool
}

func (s *funcStream) Part(_ context.Context, p *Part) (abi.Verdict, error) {
	n := s.n
	s.n++
	return s.f.part(n, p)
}

func (s *funcStream) End(context.Context) (abi.Verdict, error) {
	if s.f.end == nil {
		return abi.Verdict{}, nil
	}
	return s.f.end()
}

func (s *funcStream) Close() {
	if s.closed {
		panic("closed twice")
	}
	s.closed = true
	s.f.mu.Lock()
	s.f.closed++
	s.f.mu.Unlock()
}

// reached is the number of script steps Recv has started.
func (s *scriptStream) reached() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.i
}
