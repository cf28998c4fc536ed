package driver

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/retryhost/retryhost/abi"
)

// outcomes counts a request's callbacks.
type outcomes struct {
	mu               sync.Mutex
	commits          []CommitInfo
	success, failure []Outcome
}

func (o *outcomes) runnerOpts() []Option {
	return []Option{
		WithOnSuccess(func(_ context.Context, out Outcome) { o.mu.Lock(); o.success = append(o.success, out); o.mu.Unlock() }),
		WithOnFailure(func(_ context.Context, out Outcome) { o.mu.Lock(); o.failure = append(o.failure, out); o.mu.Unlock() }),
	}
}

func (o *outcomes) onCommit() StreamOption {
	return WithOnCommit(func(_ context.Context, c CommitInfo) { o.mu.Lock(); o.commits = append(o.commits, c); o.mu.Unlock() })
}

func (o *outcomes) counts() (commits, success, failure int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.commits), len(o.success), len(o.failure)
}

type harness struct {
	clk    *manualClock
	out    *outcomes
	rm     *RetryableModel
	models []*scriptModel
}

// newHarness builds a RetryableModel over scripted models a, b, c (base a)
// with rules built from them.
func newHarness(t *testing.T, scripts [3][]sstep, rules func(a, b, c Model) []Condition, ropts []Option, sopts ...StreamOption) *harness {
	t.Helper()
	h := &harness{clk: newManualClock(), out: &outcomes{}}
	for i, k := range []string{"p/a", "p/b", "p/c"} {
		h.models = append(h.models, &scriptModel{key: k, clock: h.clk, scripts: [][]sstep{scripts[i]}})
	}
	a, b, c := h.models[0], h.models[1], h.models[2]
	opts := append(h.out.runnerOpts(), WithRules(rules(a, b, c)...))
	r, err := New(a, append(opts, ropts...)...)
	require.NoError(t, err)
	h.rm, err = NewRetryableModel(r, append([]StreamOption{withStreamClock(h.clk), h.out.onCommit()}, sopts...)...)
	require.NoError(t, err)
	return h
}

func fallbacks(_, b, c Model) []Condition { return []Condition{Fallback(b), Fallback(c)} }

func answer(words ...string) []sstep {
	return sscript(preamble(), texts(words...), pKind(abi.KindTextEnd), pFinish(abi.ReasonStop))
}

func TestRetryableModel_errorBeforeContentFailsOver(t *testing.T) {
	h := newHarness(t, [3][]sstep{
		sscript(preamble(), pErr(errBoom)),
		sscript(preamble(), sstep{part: Part{Kind: abi.KindError, Err: errors.New("in-stream overloaded")}}),
		answer("from c"),
	}, fallbacks, nil)
	s, err := h.rm.Stream(t.Context(), &Request{})
	require.NoError(t, err)
	commits, _, _ := h.out.counts()
	require.Equal(t, 1, commits, "OnCommit fires at commit, before the caller reads")
	parts, err := drain(s)
	require.NoError(t, err)
	require.Equal(t, []string{"stream-start", "response-metadata", "text-start", "text-delta:from c", "text-end", "finish"}, kinds(parts),
		"exactly one preamble: the answering model's")
	require.True(t, h.models[0].stream(0).isClosed())
	require.True(t, h.models[1].stream(0).isClosed())
	commits, success, failure := h.out.counts()
	require.Equal(t, [3]int{1, 1, 0}, [3]int{commits, success, failure})
	require.Equal(t, "p/c", h.out.commits[0].Model.Key())
	require.Len(t, h.out.commits[0].Failed, 2)
}

func TestRetryableModel_errorAfterContentSurfaces(t *testing.T) {
	h := newHarness(t, [3][]sstep{
		sscript(preamble(), pText("Hel"), pText("lo"), pErr(errBoom)),
		answer("never"), answer("never"),
	}, fallbacks, nil)
	s, err := h.rm.Stream(t.Context(), &Request{})
	require.NoError(t, err)
	parts, err := drain(s)
	require.ErrorIs(t, err, errBoom)
	require.Equal(t, []string{"stream-start", "response-metadata", "text-start", "text-delta:Hel", "text-delta:lo"}, kinds(parts))
	require.Equal(t, 0, h.models[1].opened(), "nothing is re-run after commit")
	commits, success, failure := h.out.counts()
	require.Equal(t, [3]int{1, 0, 1}, [3]int{commits, success, failure}, "exactly one outcome, also for a committed stream that errors")
	require.ErrorIs(t, h.out.failure[0].Err, errBoom)
	require.NoError(t, s.Close())
	_, success, failure = h.out.counts()
	require.Equal(t, [2]int{0, 1}, [2]int{success, failure}, "Close after the end fires nothing more")
}

func TestRetryableModel_refusalSwitches(t *testing.T) {
	det := mustRefusal(t)
	h := newHarness(t, [3][]sstep{
		sscript(preamble(), pText("I'm sorry, but I can't help"), pText(" with that")),
		answer("Sure", "!"), nil,
	}, func(_, b, _ Model) []Condition { return []Condition{OnErrorAs[*RefusalError]().Switch(b)} }, nil, WithTransforms(det))
	s, err := h.rm.Stream(t.Context(), &Request{})
	require.NoError(t, err)
	parts, err := drain(s)
	require.NoError(t, err)
	require.Equal(t, []string{"stream-start", "response-metadata", "text-start", "text-delta:Sure", "text-delta:!", "text-end", "finish"}, kinds(parts))
	require.True(t, h.models[0].stream(0).isClosed(), "the refusing upstream is closed")
	require.Equal(t, 4, h.models[0].stream(0).pulledParts(), "and not read past the refusal")
	failed := h.out.commits[0].Failed
	require.Len(t, failed, 1)
	require.Equal(t, abi.ClassRefusal, failed[0].Class)
}

func TestRetryableModel_deadlines(t *testing.T) {
	stall := sscript(preamble(), pStall(0))
	for _, tc := range []struct {
		name        string
		a           []sstep
		ropts       []Option
		sopts       []StreamOption
		deadline    abi.Deadline
		recovered   bool // the request fails over to b
		afterCommit bool // the caller got content, then the error
	}{
		{"first content is recoverable", sscript(preamble(), pStall(2*time.Second)), nil,
			[]StreamOption{WithFirstContentTimeout(time.Second)}, abi.DeadlineFirstContent, true, false},
		{"attempt before commit is recoverable", stall, []Option{WithAttemptTimeout(5 * time.Millisecond)}, nil,
			abi.DeadlineAttempt, true, false},
		{"attempt after commit truncates", sscript(preamble(), pText("Hi"), pStall(0)), []Option{WithAttemptTimeout(5 * time.Millisecond)}, nil,
			abi.DeadlineAttempt, false, true},
		{"gap after commit truncates", sscript(preamble(), pText("Hi"), pStall(2*time.Second)), nil,
			[]StreamOption{WithGapTimeout(time.Second)}, abi.DeadlineGap, false, true},
		{"total is never recovered", stall, []Option{WithBudget(5 * time.Millisecond)}, nil,
			abi.DeadlineTotal, false, false},
		{"total after commit truncates", sscript(preamble(), pText("Hi"), pStall(0)), []Option{WithBudget(5 * time.Millisecond)}, nil,
			abi.DeadlineTotal, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, [3][]sstep{tc.a, answer("from b"), nil},
				func(_, b, _ Model) []Condition { return []Condition{Timeout().Switch(b)} }, tc.ropts, tc.sopts...)
			s, err := h.rm.Stream(t.Context(), &Request{})
			var de *DeadlineError
			switch {
			case tc.recovered:
				require.NoError(t, err)
				parts, err := drain(s)
				require.NoError(t, err)
				require.Contains(t, kinds(parts), "text-delta:from b")
				require.Equal(t, abi.ClassTimeout, h.out.commits[0].Failed[0].Class)
				require.ErrorAs(t, h.out.commits[0].Failed[0].Err, &de)
			case tc.afterCommit:
				require.NoError(t, err)
				parts, err := drain(s)
				require.ErrorAs(t, err, &de)
				require.Equal(t, []string{"stream-start", "response-metadata", "text-start", "text-delta:Hi"}, kinds(parts))
				require.Equal(t, 0, h.models[1].opened())
			default:
				require.ErrorAs(t, err, &de)
				require.Equal(t, 0, h.models[1].opened())
			}
			require.Equal(t, tc.deadline, de.Deadline)
			require.True(t, h.models[0].stream(0).isClosed())
			_, success, failure := h.out.counts()
			require.Equal(t, 1, success+failure, "exactly one outcome")
		})
	}
}

func TestRetryableModel_callerCancelIsAHardStop(t *testing.T) {
	cause := errors.New("user left")
	t.Run("before commit", func(t *testing.T) {
		ctx, cancel := context.WithCancelCause(t.Context())
		defer cancel(nil)
		h := newHarness(t, [3][]sstep{sscript(preamble(), pDo(func() { cancel(cause) })), answer("b"), nil}, fallbacks, nil)
		_, err := h.rm.Stream(ctx, &Request{})
		require.ErrorIs(t, err, cause)
		require.Equal(t, 0, h.models[1].opened(), "a cancel is never a fail-over")
		require.True(t, h.models[0].stream(0).isClosed())
		_, success, failure := h.out.counts()
		require.Equal(t, [2]int{0, 1}, [2]int{success, failure})
	})
	t.Run("after commit", func(t *testing.T) {
		ctx, cancel := context.WithCancelCause(t.Context())
		defer cancel(nil)
		h := newHarness(t, [3][]sstep{sscript(preamble(), pText("Hi"), pDo(func() { cancel(cause) })), answer("b"), nil}, fallbacks, nil)
		s, err := h.rm.Stream(ctx, &Request{})
		require.NoError(t, err)
		parts, err := drain(s)
		require.ErrorIs(t, err, cause)
		require.Len(t, parts, 4)
		require.True(t, h.models[0].stream(0).isClosed())
		_, success, failure := h.out.counts()
		require.Equal(t, [2]int{0, 1}, [2]int{success, failure})
	})
}

func TestRetryableModel_emptyStream(t *testing.T) {
	filtered := sscript(preamble(), pKind(abi.KindTextEnd), pFinish(abi.ReasonContentFilter))
	t.Run("commits at its end when no rule rejects it", func(t *testing.T) {
		h := newHarness(t, [3][]sstep{filtered, answer("b"), nil}, fallbacks, nil)
		s, err := h.rm.Stream(t.Context(), &Request{})
		require.NoError(t, err)
		parts, err := drain(s)
		require.NoError(t, err)
		require.Equal(t, []string{"stream-start", "response-metadata", "text-start", "text-end", "finish"}, kinds(parts))
		require.True(t, h.out.commits[0].Empty)
		_, success, _ := h.out.counts()
		require.Equal(t, 1, success)
	})
	t.Run("a result rule judges its finish", func(t *testing.T) {
		h := newHarness(t, [3][]sstep{filtered, answer("from b"), nil},
			func(_, b, _ Model) []Condition { return []Condition{OnFinish(abi.ReasonContentFilter).Switch(b)} }, nil)
		s, err := h.rm.Stream(t.Context(), &Request{})
		require.NoError(t, err)
		parts, err := drain(s)
		require.NoError(t, err)
		require.Equal(t, []string{"stream-start", "response-metadata", "text-start", "text-delta:from b", "text-end", "finish"}, kinds(parts))
	})
}

func TestRetryableModel_closeBeforeTheEndIsAFailure(t *testing.T) {
	h := newHarness(t, [3][]sstep{answer("a", "b", "c"), nil, nil}, fallbacks, nil)
	s, err := h.rm.Stream(t.Context(), &Request{})
	require.NoError(t, err)
	_, err = s.Recv()
	require.NoError(t, err)
	require.NoError(t, s.Close())
	require.NoError(t, s.Close())
	_, err = s.Recv()
	require.ErrorIs(t, err, ErrStreamClosed)
	require.True(t, h.models[0].stream(0).isClosed())
	_, success, failure := h.out.counts()
	require.Equal(t, [2]int{0, 1}, [2]int{success, failure})
	require.ErrorIs(t, h.out.failure[0].Err, ErrStreamClosed)
}

// TestRetryableModel_composes runs a model layer (refusals recovered per
// model) inside a call layer (its own first-content deadline and fallback).
func TestRetryableModel_composes(t *testing.T) {
	build := func(t *testing.T, a, b, c []sstep) (*RetryableModel, [3]*scriptModel, *outcomes, *outcomes) {
		clk := newManualClock()
		ms := [3]*scriptModel{{key: "p/a", clock: clk, scripts: [][]sstep{a}}, {key: "p/b", clock: clk, scripts: [][]sstep{b}},
			{key: "p/c", clock: clk, scripts: [][]sstep{c}}}
		inner, outer := &outcomes{}, &outcomes{}
		ri, err := New(ms[0], append(inner.runnerOpts(), WithRules(OnErrorAs[*RefusalError]().Switch(ms[1])))...)
		require.NoError(t, err)
		im, err := NewRetryableModel(ri, withStreamClock(clk), WithTransforms(mustRefusal(t)))
		require.NoError(t, err)
		ro, err := New(im, append(outer.runnerOpts(), WithRules(Timeout().Switch(ms[2])))...)
		require.NoError(t, err)
		om, err := NewRetryableModel(ro, withStreamClock(clk), WithFirstContentTimeout(time.Second))
		require.NoError(t, err)
		return om, ms, inner, outer
	}
	t.Run("the inner layer recovers a refusal", func(t *testing.T) {
		om, ms, inner, outer := build(t, sscript(preamble(), pText("As an AI language model, I")), answer("Sure"), answer("never"))
		s, err := om.Stream(t.Context(), &Request{})
		require.NoError(t, err)
		parts, err := drain(s)
		require.NoError(t, err)
		require.Equal(t, []string{"stream-start", "response-metadata", "text-start", "text-delta:Sure", "text-end", "finish"}, kinds(parts))
		require.Equal(t, 0, ms[2].opened())
		_, is, _ := inner.counts()
		_, os, _ := outer.counts()
		require.Equal(t, [2]int{1, 1}, [2]int{is, os}, "each layer reports its own single outcome")
	})
	t.Run("the outer layer recovers a stall the inner one cannot see", func(t *testing.T) {
		om, ms, inner, _ := build(t, sscript(preamble(), pStall(2*time.Second)), answer("never"), answer("from c"))
		s, err := om.Stream(t.Context(), &Request{})
		require.NoError(t, err)
		parts, err := drain(s)
		require.NoError(t, err)
		require.Contains(t, kinds(parts), "text-delta:from c")
		require.True(t, ms[0].stream(0).isClosed(), "the inner upstream is closed")
		require.Equal(t, 0, ms[1].opened(), "the inner layer does not fail over on the outer's deadline")
		_, _, ifail := inner.counts()
		require.Equal(t, 1, ifail)
	})
}

func TestRetryableModel_generate(t *testing.T) {
	filtered := &Response{Finish: FinishReason{Unified: abi.ReasonContentFilter}}
	ok := &Response{Content: []Part{{Kind: abi.KindTextDelta, Delta: "fine"}}, Finish: FinishReason{Unified: abi.ReasonStop}}
	a := &scriptModel{key: "p/a", genResp: []*Response{filtered}}
	b := &scriptModel{key: "p/b", genResp: []*Response{nil}, openErr: []error{errBoom}}
	c := &scriptModel{key: "p/c", genResp: []*Response{ok}}
	r, err := New(a, WithRules(OnFinish(abi.ReasonContentFilter).Switch(b), Fallback(c)))
	require.NoError(t, err)
	rm, err := NewRetryableModel(r)
	require.NoError(t, err)
	resp, err := rm.Generate(t.Context(), &Request{})
	require.NoError(t, err)
	require.Equal(t, "fine", resp.Text())
	require.Equal(t, "p/a", rm.Key())
}

func TestNewRetryableModel_rejectsBadOptions(t *testing.T) {
	r, err := New(&scriptModel{key: "p/a"})
	require.NoError(t, err)
	for _, o := range []StreamOption{nil, WithTransforms(nil), WithCommitRule(7), WithFirstContentTimeout(-1), WithGapTimeout(-1)} {
		_, err := NewRetryableModel(r, o)
		require.Error(t, err)
	}
	_, err = NewRetryableModel(nil)
	require.Error(t, err)
	rm, err := NewRetryableModel(r)
	require.NoError(t, err)
	_, err = rm.Stream(t.Context(), nil)
	require.Error(t, err)
}

func TestRetryableModel_concurrentRequests(t *testing.T) {
	det := mustRefusal(t)
	a := &scriptModel{key: "p/a", scripts: [][]sstep{sscript(preamble(), pText("I'm sorry, but I can't"))}}
	b := &scriptModel{key: "p/b", scripts: [][]sstep{answer("ok")}}
	r, err := New(a, WithRules(OnErrorAs[*RefusalError]().Switch(b)))
	require.NoError(t, err)
	rm, err := NewRetryableModel(r, WithTransforms(det), WithFirstContentTimeout(time.Minute), WithGapTimeout(time.Minute))
	require.NoError(t, err)
	const n = 32
	var wg sync.WaitGroup
	errs := make([]error, n)
	got := make([][]string, n)
	for i := range n {
		wg.Go(func() {
			s, err := rm.Stream(t.Context(), &Request{})
			if err != nil {
				errs[i] = err
				return
			}
			parts, err := drain(s)
			errs[i], got[i] = err, kinds(parts)
		})
	}
	wg.Wait()
	for i := range n {
		require.NoError(t, errs[i])
		require.Equal(t, []string{"stream-start", "response-metadata", "text-start", "text-delta:ok", "text-end", "finish"}, got[i])
	}
	require.Equal(t, n, a.opened())
	for i := range n {
		require.True(t, a.stream(i).isClosed())
	}
}

// FuzzRetryableModel_chaos fails model a's stream at a random point with a
// random kind of failure, and checks the caller never sees a duplicated or
// dropped part: before content the request fails over to b and the caller
// gets exactly b's stream; after it, a's parts up to the failure, then the error.
func FuzzRetryableModel_chaos(f *testing.F) {
	f.Add(uint8(0), uint8(0), uint8(5))
	f.Add(uint8(3), uint8(1), uint8(5))
	f.Add(uint8(4), uint8(2), uint8(2))
	f.Add(uint8(9), uint8(0), uint8(9))
	f.Fuzz(func(t *testing.T, at, how, words uint8) {
		ws := make([]string, int(words)%8)
		for i := range ws {
			ws[i] = string(rune('a' + i))
		}
		full := answer(ws...)
		failAt := int(at) % (len(full) + 1)
		var fail sstep
		switch how % 3 {
		case 0:
			fail = pErr(errBoom)
		case 1:
			fail = sstep{part: Part{Kind: abi.KindError, Err: errBoom}}
		default:
			fail = pStall(2 * time.Second) // the first-content or the gap deadline
		}
		a := sscript(full[:failAt], fail)
		b := answer("from", " b")
		h := newHarness(t, [3][]sstep{a, b, nil}, fallbacks, nil,
			WithFirstContentTimeout(time.Second), WithGapTimeout(time.Second))
		contentBefore := false
		for _, st := range full[:failAt] {
			if CommitOnOutput.IsContent(&st.part) {
				contentBefore = true
			}
		}
		s, err := h.rm.Stream(t.Context(), &Request{})
		require.NoError(t, err)
		parts, err := drain(s)
		want := b
		if contentBefore {
			want = full[:failAt]
			require.Error(t, err)
			require.Equal(t, 0, h.models[1].opened())
		} else {
			require.NoError(t, err)
		}
		require.Len(t, parts, len(want))
		for i := range want {
			require.Equal(t, want[i].part, parts[i])
		}
		require.True(t, h.models[0].stream(0).isClosed())
		_, success, failure := h.out.counts()
		require.Equal(t, 1, success+failure)
	})
}

// Through the stream driver: a cancellation with a cause
// after several failed attempts is both context.Canceled and the cause.
func TestRetryableModel_cancelWithCauseAfterAttempts(t *testing.T) {
	cause := errors.New("user left")
	ctx, cancel := context.WithCancelCause(t.Context())
	defer cancel(nil)
	h := newHarness(t, [3][]sstep{
		sscript(preamble(), pErr(errBoom)),
		sscript(preamble(), pErr(errBoom)),
		sscript(preamble(), pDo(func() { cancel(cause) })),
	}, fallbacks, nil)
	_, err := h.rm.Stream(ctx, &Request{})
	var re *RetryError
	require.ErrorAs(t, err, &re)
	require.Len(t, re.Attempts, 3)
	require.ErrorIs(t, err, context.Canceled)
	require.ErrorIs(t, err, cause)
	_, _, failure := h.out.counts()
	require.Equal(t, 1, failure)
	require.ErrorIs(t, h.out.failure[0].Err, context.Canceled)

	// After commit, Recv's error is both as well.
	ctx2, cancel2 := context.WithCancelCause(t.Context())
	defer cancel2(nil)
	h = newHarness(t, [3][]sstep{sscript(preamble(), pText("Hi"), pDo(func() { cancel2(cause) })), nil, nil}, fallbacks, nil)
	s, err := h.rm.Stream(ctx2, &Request{})
	require.NoError(t, err)
	_, err = drain(s)
	require.ErrorIs(t, err, context.Canceled)
	require.ErrorIs(t, err, cause)
}

// headerModel is a scripted model whose streams carry response headers,
// as the provider adapters' do.
type headerModel struct {
	*scriptModel
	h http.Header
}

type headerStream struct {
	Stream
	h http.Header
}

func (s headerStream) Header() http.Header { return s.h }

func (m *headerModel) Stream(ctx context.Context, req *Request) (Stream, error) {
	s, err := m.scriptModel.Stream(ctx, req)
	if err != nil {
		return nil, err
	}
	return headerStream{s, m.h}, nil
}

// A design difference from ai-retry: a stream exposes the response
// headers of the attempt that answered (the provider's request id).
func TestRetryableModel_streamExposesTheAnsweringAttemptsHeaders(t *testing.T) {
	clk := newManualClock()
	a := &headerModel{&scriptModel{key: "p/a", clock: clk, scripts: [][]sstep{sscript(preamble(), pErr(errBoom))}},
		http.Header{"X-Request-Id": {"req-a"}}}
	b := &headerModel{&scriptModel{key: "p/b", clock: clk, scripts: [][]sstep{answer("hi")}},
		http.Header{"X-Request-Id": {"req-b"}}}
	var commits []CommitInfo
	r := mustNew(t, a, WithRules(Fallback(b)))
	rm, err := NewRetryableModel(r, withStreamClock(clk),
		WithOnCommit(func(_ context.Context, c CommitInfo) { commits = append(commits, c) }))
	require.NoError(t, err)
	s, err := rm.Stream(t.Context(), &Request{})
	require.NoError(t, err)
	hs, ok := s.(HeaderStream)
	require.True(t, ok, "a RetryableModel's stream is a HeaderStream")
	require.Equal(t, "req-b", hs.Header().Get("X-Request-Id"), "the answering attempt's, not the failed one's")
	require.Equal(t, "req-b", commits[0].Header.Get("X-Request-Id"))
	_, err = drain(s)
	require.NoError(t, err)
	require.Equal(t, "req-b", hs.Header().Get("X-Request-Id"), "still there after the end")

	// Composed: the outer RetryableModel passes the inner one's headers on.
	outer, err := NewRetryableModel(mustNew(t, rm))
	require.NoError(t, err)
	s, err = outer.Stream(t.Context(), &Request{})
	require.NoError(t, err)
	require.Equal(t, "req-b", s.(HeaderStream).Header().Get("X-Request-Id"))
	require.NoError(t, s.Close())

	// A model whose streams carry none: nil, not a panic.
	plain := &scriptModel{key: "p/c", clock: clk, scripts: [][]sstep{answer("hi")}}
	rm, err = NewRetryableModel(mustNew(t, plain), withStreamClock(clk))
	require.NoError(t, err)
	s, err = rm.Stream(t.Context(), &Request{})
	require.NoError(t, err)
	require.Nil(t, s.(HeaderStream).Header())
	require.NoError(t, s.Close())
}
