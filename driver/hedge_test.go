package driver

import (
	"context"
	"errors"
	"io"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/retryhost/retryhost/abi"
)

// hedgeModel is a streaming fake whose first content waits for delay(n)
// (n: the 0-based index of the open) or, when gate is set, for the gate
// to close; fail(n), when set and non-nil, is returned instead.
type hedgeModel struct {
	key    string
	delay  func(n int) time.Duration
	gate   chan struct{}
	fail   func(n int) error
	empty  abi.Reason // when set, the stream ends without content on this finish
	onOpen func()     // runs at each open
	opens  atomic.Int32
	closes atomic.Int32
}

func (m *hedgeModel) Key() string { return m.key }

// Generate waits as a stream's first content does, then answers whole;
// an abandoned call (its ctx done) counts as closed.
func (m *hedgeModel) Generate(ctx context.Context, _ *Request) (*Response, error) {
	n := int(m.opens.Add(1)) - 1
	if m.onOpen != nil {
		m.onOpen()
	}
	var wait <-chan time.Time
	if m.delay != nil {
		t := time.NewTimer(m.delay(n))
		defer t.Stop()
		wait = t.C
	}
	select {
	case <-wait:
	case <-m.gate:
	case <-ctx.Done():
		m.closes.Add(1)
		return nil, ctx.Err()
	}
	if m.fail != nil {
		if err := m.fail(n); err != nil {
			return nil, err
		}
	}
	return &Response{Content: []Part{{Kind: abi.KindTextDelta, ID: "t", Delta: m.key}},
		Finish: FinishReason{Unified: abi.ReasonStop}}, nil
}

func (m *hedgeModel) Stream(ctx context.Context, _ *Request) (Stream, error) {
	n := int(m.opens.Add(1)) - 1
	if m.onOpen != nil {
		m.onOpen()
	}
	return &hedgeStream{m: m, ctx: ctx, n: n, closed: make(chan struct{})}, nil
}

type hedgeStream struct {
	m      *hedgeModel
	ctx    context.Context
	n, i   int
	once   sync.Once
	closed chan struct{}
}

var errHedgeFake = errors.New("fake upstream failure")

func (s *hedgeStream) Recv() (Part, error) {
	i := s.i
	s.i++
	switch i {
	case 0:
		return Part{Kind: abi.KindStreamStart}, nil
	case 1:
		var wait <-chan time.Time
		if s.m.delay != nil {
			t := time.NewTimer(s.m.delay(s.n))
			defer t.Stop()
			wait = t.C
		}
		select {
		case <-wait:
		case <-s.m.gate:
		case <-s.ctx.Done():
			return Part{}, s.ctx.Err()
		case <-s.closed:
			return Part{}, errors.New("closed")
		}
		if s.m.fail != nil {
			if err := s.m.fail(s.n); err != nil {
				return Part{}, err
			}
		}
		if s.m.empty != abi.ReasonUnknown {
			s.i = 3
			return Part{Kind: abi.KindFinish, Finish: &abi.Finish{Reason: abi.FinishReason{Unified: s.m.empty}}}, nil
		}
		return Part{Kind: abi.KindTextDelta, ID: "t", Delta: s.m.key}, nil
	case 2:
		return Part{Kind: abi.KindFinish, Finish: &abi.Finish{Reason: abi.FinishReason{Unified: abi.ReasonStop}}}, nil
	}
	return Part{}, io.EOF
}

func (s *hedgeStream) Close() error {
	s.once.Do(func() { close(s.closed); s.m.closes.Add(1) })
	return nil
}

func stallFor(d time.Duration) func(int) time.Duration { return func(int) time.Duration { return d } }

// hedgeOutcomes counts the outcome callbacks of a Runner.
type hedgeOutcomes struct{ ok, failed, errs atomic.Int32 }

func (o *hedgeOutcomes) opts() []Option {
	return []Option{
		WithOnSuccess(func(context.Context, Outcome) { o.ok.Add(1) }),
		WithOnFailure(func(context.Context, Outcome) { o.failed.Add(1) }),
		WithOnError(func(context.Context, *Attempt) { o.errs.Add(1) }),
	}
}

func hedgedModel(t *testing.T, a, b Model, ropts []Option, sopts ...StreamOption) *RetryableModel {
	t.Helper()
	r, err := New(a, append([]Option{WithRules(Timeout().Switch(b))}, ropts...)...)
	require.NoError(t, err)
	m, err := NewRetryableModel(r, append([]StreamOption{WithHedge(time.Millisecond, 1)}, sopts...)...)
	require.NoError(t, err)
	return m
}

// text drains s and returns its text, failing on any other error.
func text(t *testing.T, s Stream) string {
	t.Helper()
	ps, err := drain(s)
	require.NoError(t, err)
	var out string
	starts := 0
	for _, p := range ps {
		out += p.Delta
		if p.Kind == abi.KindStreamStart {
			starts++
		}
	}
	require.Equal(t, 1, starts, "exactly one preamble")
	return out
}

func TestWithHedge_Invalid(t *testing.T) {
	for _, tc := range []struct {
		after time.Duration
		max   int
	}{{0, 1}, {-time.Second, 1}, {time.Second, 0}, {time.Second, -1}} {
		_, err := NewRetryableModel(hedgeRunner(t), WithHedge(tc.after, tc.max))
		require.Error(t, err, "%v %d", tc.after, tc.max)
	}
}

func hedgeRunner(t *testing.T) *Runner {
	r, err := New(&hedgeModel{key: "a"})
	require.NoError(t, err)
	return r
}

// Both attempts commit at the same instant: only one reaches the caller,
// the other's upstream is closed, and one outcome fires.
func TestHedge_BothCommitAtOnce(t *testing.T) {
	for i := 0; i < 30; i++ {
		gate := make(chan struct{})
		a := &hedgeModel{key: "a", gate: gate}
		b := &hedgeModel{key: "b", gate: gate}
		var o hedgeOutcomes
		m := hedgedModel(t, a, b, o.opts())
		var s Stream
		var err error
		done := make(chan struct{})
		go func() { s, err = m.Stream(context.Background(), &Request{}); close(done) }()
		require.Eventually(t, func() bool { return b.opens.Load() == 1 }, 5*time.Second, 100*time.Microsecond)
		close(gate)
		<-done
		require.NoError(t, err)
		got := text(t, s)
		require.Contains(t, []string{"a", "b"}, got)
		require.Eventually(t, func() bool { return a.closes.Load()+b.closes.Load() == 2 }, 5*time.Second, 100*time.Microsecond)
		require.EqualValues(t, 1, o.ok.Load())
		require.EqualValues(t, 0, o.failed.Load())
		require.EqualValues(t, 0, o.errs.Load(), "the loser is not a failure")
	}
}

func TestHedge_CallerCancels(t *testing.T) {
	a := &hedgeModel{key: "a", gate: make(chan struct{})}
	b := &hedgeModel{key: "b", gate: make(chan struct{})}
	var o hedgeOutcomes
	m := hedgedModel(t, a, b, o.opts())
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		for b.opens.Load() == 0 {
			time.Sleep(100 * time.Microsecond)
		}
		cancel()
	}()
	_, err := m.Stream(ctx, &Request{})
	require.ErrorIs(t, err, context.Canceled)
	require.Eventually(t, func() bool { return a.closes.Load()+b.closes.Load() == 2 }, 5*time.Second, time.Millisecond)
	require.EqualValues(t, 0, o.ok.Load())
	require.EqualValues(t, 1, o.failed.Load())
	goleak.VerifyNone(t)
}

// The hedge fails (no rule matches its error) while the first attempt
// goes on and answers.
func TestHedge_HedgeFailsFirstSucceeds(t *testing.T) {
	gate, open := closer()
	a := &hedgeModel{key: "a", gate: gate}
	b := &hedgeModel{key: "b", fail: func(int) error { return errHedgeFake }, delay: stallFor(0)}
	var o hedgeOutcomes
	m := hedgedModel(t, a, b, append(o.opts(), WithOnError(func(context.Context, *Attempt) { o.errs.Add(1); open() })))
	s, err := m.Stream(context.Background(), &Request{})
	require.NoError(t, err)
	require.Equal(t, "a", text(t, s))
	require.EqualValues(t, 1, b.opens.Load())
	require.EqualValues(t, 1, o.ok.Load())
	require.EqualValues(t, 0, o.failed.Load())
	require.EqualValues(t, 1, o.errs.Load(), "the hedge's failure went to the rules")
}

// The first attempt fails while the hedge runs; the hedge answers.
func TestHedge_FirstFailsHedgeSucceeds(t *testing.T) {
	gateA, openA := closer()
	gateB, openB := closer()
	a := &hedgeModel{key: "a", gate: gateA, fail: func(int) error { return errHedgeFake }}
	b := &hedgeModel{key: "b", gate: gateB, onOpen: openA}
	var o hedgeOutcomes
	var won Model
	m := hedgedModel(t, a, b, append(o.opts(), WithOnSuccess(func(_ context.Context, oc Outcome) { o.ok.Add(1); won = oc.Model }),
		WithOnError(func(context.Context, *Attempt) { o.errs.Add(1); openB() })))
	s, err := m.Stream(context.Background(), &Request{})
	require.NoError(t, err)
	require.Equal(t, "b", text(t, s))
	require.EqualValues(t, 1, o.ok.Load())
	require.Equal(t, "b", won.Key())
	require.EqualValues(t, 0, o.failed.Load())
	require.EqualValues(t, 1, o.errs.Load())
}

// Every attempt fails: one OnFailure, with both attempts on the record.
func TestHedge_BothFail(t *testing.T) {
	fail := func(int) error { return errHedgeFake }
	gate, open := closer()
	a := &hedgeModel{key: "a", gate: gate, fail: fail}
	b := &hedgeModel{key: "b", delay: stallFor(0), onOpen: open, fail: fail}
	var o hedgeOutcomes
	m := hedgedModel(t, a, b, o.opts())
	_, err := m.Stream(context.Background(), &Request{})
	var re *RetryError
	require.ErrorAs(t, err, &re)
	require.Len(t, re.Attempts, 2)
	require.EqualValues(t, 0, o.ok.Load())
	require.EqualValues(t, 1, o.failed.Load())
}

func TestHedge_BudgetStopsHedges(t *testing.T) {
	for _, spent := range []bool{false, true} {
		gate, open := closer()
		a := &hedgeModel{key: "a", gate: gate, delay: stallFor(30 * time.Millisecond)}
		if !spent {
			a.delay = nil
		}
		b := &hedgeModel{key: "b", gate: make(chan struct{}), onOpen: open}
		var o hedgeOutcomes
		m := hedgedModel(t, a, b, append(o.opts(), WithRetryBudget(RetryBudget{})))
		lb := budgetOf(m.r)
		if spent {
			lb.retries.Store(DefaultBudgetMinRetries)
		}
		s, err := m.Stream(context.Background(), &Request{})
		require.NoError(t, err)
		require.Equal(t, "a", text(t, s))
		if spent {
			require.EqualValues(t, 0, b.opens.Load(), "no hedge when the budget is spent")
			require.EqualValues(t, DefaultBudgetMinRetries, lb.retries.Load())
		} else {
			require.EqualValues(t, 1, b.opens.Load())
			require.Eventually(t, func() bool { return b.closes.Load() == 1 }, 5*time.Second, time.Millisecond)
			require.EqualValues(t, 0, lb.retries.Load(), "the hedge's slot is given back")
		}
		require.EqualValues(t, 0, lb.requests.Load())
		require.EqualValues(t, 1, o.ok.Load())
	}
}

func TestHedge_CountsAgainstMaxAttempts(t *testing.T) {
	a := &hedgeModel{key: "a", delay: stallFor(20 * time.Millisecond)}
	b := &hedgeModel{key: "b", gate: make(chan struct{})}
	m := hedgedModel(t, a, b, []Option{WithMaxAttempts(1)})
	s, err := m.Stream(context.Background(), &Request{})
	require.NoError(t, err)
	require.Equal(t, "a", text(t, s))
	require.EqualValues(t, 0, b.opens.Load())
}

// In a group, the hedge runs on the next deployment not yet tried.
func TestHedge_GroupNextDeployment(t *testing.T) {
	gate, open := closer()
	var opened atomic.Int32
	both := func() {
		if opened.Add(1) == 2 {
			open()
		}
	}
	a := &hedgeModel{key: "east", gate: gate, onOpen: both}
	b := &hedgeModel{key: "west", gate: gate, onOpen: both}
	g := Group("gpt", WeightedRandom, a, b).WithSeed(1)
	r, err := New(g, WithRules(Timeout().Retry()))
	require.NoError(t, err)
	m, err := NewRetryableModel(r, WithHedge(time.Millisecond, 1))
	require.NoError(t, err)
	s, err := m.Stream(context.Background(), &Request{})
	require.NoError(t, err)
	got := text(t, s)
	require.EqualValues(t, 1, a.opens.Load()+0, "east tried once")
	require.EqualValues(t, 1, b.opens.Load(), "west tried once")
	require.Contains(t, []string{"east", "west"}, got)
	require.Eventually(t, func() bool { return a.closes.Load()+b.closes.Load() == 2 }, 5*time.Second, time.Millisecond)
}

// The first attempt fails while the hedge runs: the rules' choice for that
// failure starts beside the hedge, and the faster one answers.
func TestHedge_FailureChoiceRunsBesideHedge(t *testing.T) {
	gate, open := closer()
	a := &hedgeModel{key: "a", gate: gate, fail: func(int) error { return errHedgeFake }}
	b := &hedgeModel{key: "b", gate: make(chan struct{}), onOpen: open}
	c := &hedgeModel{key: "c", delay: stallFor(time.Millisecond)}
	var o hedgeOutcomes
	r, err := New(a, append(o.opts(), WithRules(Timeout().Switch(b), OnErrorIs(errHedgeFake).Switch(c)))...)
	require.NoError(t, err)
	m, err := NewRetryableModel(r, WithHedge(time.Millisecond, 1))
	require.NoError(t, err)
	s, err := m.Stream(context.Background(), &Request{})
	require.NoError(t, err)
	require.Equal(t, "c", text(t, s))
	require.EqualValues(t, 1, b.opens.Load())
	require.Eventually(t, func() bool { return b.closes.Load() == 1 }, 5*time.Second, time.Millisecond, "the hedge lost and was closed")
	require.EqualValues(t, 1, o.ok.Load())
	require.EqualValues(t, 0, o.failed.Load())
	require.EqualValues(t, 1, o.errs.Load())
}

// The hedge commits an empty answer the rules reject: the first attempt is
// cancelled, and the attempt the rules chose answers.
func TestHedge_EmptyAnswerRejected(t *testing.T) {
	for i := 0; i < 20; i++ {
		a := &hedgeModel{key: "a", gate: make(chan struct{})}
		b := &hedgeModel{key: "b", delay: stallFor(time.Millisecond), empty: abi.ReasonContentFilter}
		c := &hedgeModel{key: "c", delay: stallFor(time.Millisecond)}
		var o hedgeOutcomes
		r, err := New(a, append(o.opts(), WithRules(Timeout().Switch(b), OnFinish(abi.ReasonContentFilter).Switch(c)))...)
		require.NoError(t, err)
		m, err := NewRetryableModel(r, WithHedge(time.Millisecond, 1))
		require.NoError(t, err)
		s, err := m.Stream(context.Background(), &Request{})
		require.NoError(t, err)
		require.Equal(t, "c", text(t, s))
		require.Eventually(t, func() bool { return a.closes.Load() == 1 }, 5*time.Second, time.Millisecond)
		require.EqualValues(t, 1, o.ok.Load())
		require.EqualValues(t, 0, o.failed.Load())
	}
}

// spanObserver counts attempt spans opened and closed.
type spanObserver struct {
	nopObserver
	starts, ends atomic.Int32
}

func (o *spanObserver) AttemptStart(ctx context.Context, _ AttemptEvent) context.Context {
	o.starts.Add(1)
	return ctx
}
func (o *spanObserver) AttemptEnd(context.Context, AttemptEndEvent) { o.ends.Add(1) }

// Every attempt span an observer sees is ended, the loser's too.
func TestHedge_ObserverSpansBalanced(t *testing.T) {
	a := &hedgeModel{key: "a", gate: make(chan struct{})}
	b := &hedgeModel{key: "b", delay: stallFor(time.Millisecond)}
	var obs spanObserver
	m := hedgedModel(t, a, b, []Option{WithObserver(&obs)})
	s, err := m.Stream(context.Background(), &Request{})
	require.NoError(t, err)
	require.Equal(t, "b", text(t, s))
	require.EqualValues(t, 2, obs.starts.Load())
	require.EqualValues(t, 2, obs.ends.Load())
}

// closer returns a gate and a func that closes it (once).
func closer() (chan struct{}, func()) {
	g := make(chan struct{})
	var once sync.Once
	return g, func() { once.Do(func() { close(g) }) }
}

func TestHedge_GenerateFirstResponseWins(t *testing.T) {
	a := &hedgeModel{key: "a", gate: make(chan struct{})}
	b := &hedgeModel{key: "b", delay: stallFor(time.Millisecond)}
	var o hedgeOutcomes
	m := hedgedModel(t, a, b, o.opts())
	resp, err := m.Generate(context.Background(), &Request{})
	require.NoError(t, err)
	require.Equal(t, "b", resp.Content[0].Delta)
	require.Eventually(t, func() bool { return a.closes.Load() == 1 }, 5*time.Second, time.Millisecond, "the loser's call is cancelled")
	require.EqualValues(t, 1, o.ok.Load())
	require.EqualValues(t, 0, o.failed.Load())
	require.EqualValues(t, 0, o.errs.Load())
}

func TestHedge_GenerateFirstFailsHedgeSucceeds(t *testing.T) {
	gateA, openA := closer()
	gateB, openB := closer()
	a := &hedgeModel{key: "a", gate: gateA, fail: func(int) error { return errHedgeFake }}
	b := &hedgeModel{key: "b", gate: gateB, onOpen: openA}
	var o hedgeOutcomes
	m := hedgedModel(t, a, b, append(o.opts(), WithOnError(func(context.Context, *Attempt) { o.errs.Add(1); openB() })))
	resp, err := m.Generate(context.Background(), &Request{})
	require.NoError(t, err)
	require.Equal(t, "b", resp.Content[0].Delta)
	require.EqualValues(t, 1, o.ok.Load())
	require.EqualValues(t, 1, o.errs.Load())
	require.EqualValues(t, 0, o.failed.Load())
}

func TestHedge_GenerateCallerCancels(t *testing.T) {
	a := &hedgeModel{key: "a", gate: make(chan struct{})}
	b := &hedgeModel{key: "b", gate: make(chan struct{})}
	var o hedgeOutcomes
	m := hedgedModel(t, a, b, o.opts())
	ctx, cancel := context.WithCancel(context.Background())
	b.onOpen = cancel
	_, err := m.Generate(ctx, &Request{})
	require.ErrorIs(t, err, context.Canceled)
	require.Eventually(t, func() bool { return a.closes.Load()+b.closes.Load() == 2 }, 5*time.Second, time.Millisecond)
	require.EqualValues(t, 1, o.failed.Load())
	require.EqualValues(t, 0, o.ok.Load())
	goleak.VerifyNone(t)
}

// A model that panics in a hedged call fails that attempt; it does not
// take the process down.
func TestHedge_GeneratePanicIsAnError(t *testing.T) {
	a := &hedgeModel{key: "a", delay: stallFor(0), fail: func(int) error { panic("boom") }}
	b := &hedgeModel{key: "b", gate: make(chan struct{})}
	m := hedgedModel(t, a, b, []Option{WithMaxAttempts(1)}) // the panic ends the request
	_, err := m.Generate(context.Background(), &Request{})
	require.ErrorContains(t, err, "panicked")
}

// The hedge timer's wake-ups: fires the loop has not read yet, stale ones
// included (a timer stopped just as it fired), never hide the current
// arm's fire, and one fire is acted on once. Before, wake-ups carried
// their generation through a 4-slot buffer and a fifth was dropped.
func TestHedger_staleFiresNeverHideTheCurrentOne(t *testing.T) {
	clk := newManualClock()
	h := &hedger{m: &RetryableModel{cfg: streamConfig{clock: clk, hedgeAfter: time.Second, hedgeMax: 100}},
		fire: make(chan struct{}, 1)}
	for range 6 { // each arm fires, unread, then the next arm replaces it
		h.armTimer()
		clk.Advance(time.Second)
	}
	bounded := func() <-chan time.Time { return time.After(300 * time.Millisecond) }
	_, fired, ok := h.wait(bounded())
	require.True(t, fired && ok, "the current arm's fire is seen")
	_, fired, ok = h.wait(bounded())
	require.False(t, fired, "and acted on once")
	require.False(t, ok, "the wait ends at its due time instead")

	// A timer stopped just as it fires (its callback runs on Stop) belongs
	// to the arm being replaced: it never passes for the new one.
	late := lateStopClock{newManualClock()}
	h = &hedger{m: &RetryableModel{cfg: streamConfig{clock: late, hedgeAfter: time.Second, hedgeMax: 100}},
		fire: make(chan struct{}, 1)}
	h.armTimer()
	h.armTimer() // stops the first, which fires as it stops
	_, fired, _ = h.wait(bounded())
	require.False(t, fired, "a stale fire is ignored")
	late.Advance(time.Second)
	_, fired, _ = h.wait(bounded())
	require.True(t, fired, "the new arm's own fire is seen")
}
