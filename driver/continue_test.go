package driver

import (
	"context"
	"errors"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/retryhost/retryhost/abi"
)

// contModel is a scripted model that keeps the requests it was sent.
type contModel struct {
	*scriptModel
	mu   sync.Mutex
	reqs []*Request
}

func (m *contModel) Stream(ctx context.Context, req *Request) (Stream, error) {
	m.mu.Lock()
	m.reqs = append(m.reqs, req)
	m.mu.Unlock()
	return m.scriptModel.Stream(ctx, req)
}

func (m *contModel) requests() []*Request {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]*Request(nil), m.reqs...)
}

func pUsage(in, out int64) sstep {
	return sstep{part: Part{Kind: abi.KindFinish, Finish: &abi.Finish{Reason: abi.FinishReason{Unified: abi.ReasonStop},
		Usage: Usage{InputTokens: in, OutputTokens: out}}}}
}

// newContHarness builds models a and b (base a) over the scripts, each
// model replaying its scripts call by call, with rules.
func newContHarness(t *testing.T, a, b [][]sstep, rules func(a, b Model) []Condition, sopts ...StreamOption) (*RetryableModel, *contModel, *contModel, *outcomes, *manualClock) {
	t.Helper()
	clk := newManualClock()
	out := &outcomes{}
	ma := &contModel{scriptModel: &scriptModel{key: "p/a", clock: clk, scripts: a}}
	mb := &contModel{scriptModel: &scriptModel{key: "p/b", clock: clk, scripts: b}}
	r, err := New(ma, append(out.runnerOpts(), WithModels(mb), WithRules(rules(ma, mb)...))...)
	require.NoError(t, err)
	rm, err := NewRetryableModel(r, append([]StreamOption{withStreamClock(clk), out.onCommit()}, sopts...)...)
	require.NoError(t, err)
	return rm, ma, mb, out, clk
}

func switchTo(_, b Model) []Condition { return []Condition{Fallback(b)} }

func retrySame(_, _ Model) []Condition { return []Condition{AnyError().Retry().Attempts(5)} }

// spliceText returns the text of the parts and counts the kinds that must come
// once in a spliced answer.
func spliceText(ps []Part) (s string, starts, finishes int) {
	var b strings.Builder
	for _, p := range ps {
		switch p.Kind {
		case abi.KindTextDelta:
			b.WriteString(p.Delta)
		case abi.KindStreamStart:
			starts++
		case abi.KindFinish:
			finishes++
		}
	}
	return b.String(), starts, finishes
}

var errCut = errors.New("connection reset by peer")

func TestContinue_failuresAfterCommitEndInOneAnswer(t *testing.T) {
	inband := sstep{part: Part{Kind: abi.KindError, Err: &ProviderError{Provider: "fake", Status: 529, Type: "overloaded_error", Message: "Overloaded"}}}
	for _, tc := range []struct {
		name  string
		fail  sstep
		sopts []StreamOption
	}{
		{"cut", pErr(errCut), nil},
		{"in-band error part", inband, nil},
		{"gap deadline", pStall(2 * time.Second), []StreamOption{WithGapTimeout(time.Second)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			first := sscript(preamble(), texts("The quick ", "brown fo"), tc.fail)
			// The continuation repeats "brown fo" (trimmed) and carries its
			// own preamble (dropped).
			second := sscript(preamble(), texts("brown fox", " jumps."), pKind(abi.KindTextEnd), pUsage(7, 5))
			rm, _, b, out, _ := newContHarness(t, [][]sstep{first}, [][]sstep{second}, switchTo,
				append([]StreamOption{WithAfterCommit(AfterCommitContinue)}, tc.sopts...)...)
			s, err := rm.Stream(t.Context(), &Request{Messages: []Message{{Role: RoleUser, Content: []Content{{Text: "go"}}}}})
			require.NoError(t, err)
			parts, err := drain(s)
			require.NoError(t, err)
			got, starts, finishes := spliceText(parts)
			require.Equal(t, "The quick brown fox jumps.", got)
			require.Equal(t, 1, starts)
			require.Equal(t, 1, finishes)
			last := parts[len(parts)-1]
			require.Equal(t, abi.KindFinish, last.Kind)
			require.Equal(t, Usage{InputTokens: 7, OutputTokens: 5}, last.Finish.Usage)
			for _, p := range parts {
				if p.Kind == abi.KindTextDelta || p.Kind == abi.KindTextEnd {
					require.Equal(t, "t", p.ID, "one text block")
				}
			}
			reqs := b.requests()
			require.Len(t, reqs, 1)
			require.NotNil(t, reqs[0].Continue)
			require.Equal(t, "The quick brown fo", reqs[0].Continue.Text)
			require.Equal(t, DefaultContinuationPrompt, reqs[0].Continue.Prompt)
			require.Len(t, reqs[0].Messages, 1, "the caller's request is not modified")
			commits, success, failure := out.counts()
			require.Equal(t, [3]int{1, 1, 0}, [3]int{commits, success, failure})
			require.NoError(t, s.Close())
		})
	}
}

func TestContinue_errorModeEndsWithTheError(t *testing.T) {
	first := sscript(preamble(), texts("The quick ", "brown fo"), pErr(errCut))
	rm, _, b, out, _ := newContHarness(t, [][]sstep{first}, [][]sstep{answer("x")}, switchTo)
	s, err := rm.Stream(t.Context(), &Request{})
	require.NoError(t, err)
	parts, err := drain(s)
	require.ErrorIs(t, err, errCut)
	got, _, finishes := spliceText(parts)
	require.Equal(t, "The quick brown fo", got)
	require.Zero(t, finishes)
	require.Zero(t, b.opened())
	_, success, failure := out.counts()
	require.Equal(t, [2]int{0, 1}, [2]int{success, failure})
}

func TestContinue_sameModelWhenTheRulesRetry(t *testing.T) {
	first := sscript(preamble(), texts("Hello "), pErr(errCut))
	second := sscript(preamble(), texts(" world"), pFinish(abi.ReasonStop))
	rm, a, _, _, _ := newContHarness(t, [][]sstep{first, second}, [][]sstep{answer("x")}, retrySame,
		WithAfterCommit(AfterCommitContinue), WithContinuationPrompt("go on"))
	s, err := rm.Stream(t.Context(), &Request{})
	require.NoError(t, err)
	parts, err := drain(s)
	require.NoError(t, err)
	got, _, _ := spliceText(parts)
	require.Equal(t, "Hello world", got, "the repeated space is trimmed")
	reqs := a.requests()
	require.Len(t, reqs, 2)
	require.Nil(t, reqs[0].Continue)
	require.Equal(t, &Continuation{Text: "Hello ", Prompt: "go on"}, reqs[1].Continue)
}

func TestContinue_limitReachedEndsWithTheError(t *testing.T) {
	cut := func(s string) []sstep { return sscript(preamble(), texts(s), pErr(errCut)) }
	rm, a, _, out, _ := newContHarness(t, [][]sstep{cut("one "), cut("two "), cut("three ")}, [][]sstep{answer("x")}, retrySame,
		WithAfterCommit(AfterCommitContinue), WithMaxContinuations(2))
	s, err := rm.Stream(t.Context(), &Request{})
	require.NoError(t, err)
	parts, err := drain(s)
	require.ErrorIs(t, err, errCut)
	got, starts, finishes := spliceText(parts)
	require.Equal(t, "one two three ", got)
	require.Equal(t, [2]int{1, 0}, [2]int{starts, finishes})
	require.Equal(t, 3, a.opened(), "two continuations, no third")
	_, success, failure := out.counts()
	require.Equal(t, [2]int{0, 1}, [2]int{success, failure})
}

func TestContinue_toolCallCutEndsWithTheError(t *testing.T) {
	first := sscript(preamble(), texts("Let me look. "),
		sstep{part: Part{Kind: abi.KindToolInputStart, ID: "call_1", Tool: &abi.ToolInfo{Name: "search"}}},
		sstep{part: Part{Kind: abi.KindToolInputDelta, ID: "call_1", Delta: `{"q":"we`}},
		pErr(errCut))
	rm, _, b, out, _ := newContHarness(t, [][]sstep{first}, [][]sstep{answer("x")}, switchTo, WithAfterCommit(AfterCommitContinue))
	s, err := rm.Stream(t.Context(), &Request{})
	require.NoError(t, err)
	_, err = drain(s)
	require.ErrorIs(t, err, errCut)
	require.Zero(t, b.opened(), "a tool call cut in half is never continued")
	_, success, failure := out.counts()
	require.Equal(t, [2]int{0, 1}, [2]int{success, failure})
}

func TestContinue_refusalInTheContinuationFailsOverAgain(t *testing.T) {
	det, err := NewRefusalDetector()
	require.NoError(t, err)
	first := sscript(preamble(), texts("Paris is the "), pErr(errCut))
	refused := sscript(preamble(), texts("I'm sorry, but I can't help with that."), pFinish(abi.ReasonStop))
	good := sscript(preamble(), texts("capital of France."), pFinish(abi.ReasonStop))
	rm, a, b, out, _ := newContHarness(t, [][]sstep{first, good}, [][]sstep{refused}, func(a, b Model) []Condition {
		return []Condition{OnClass(abi.ClassRefusal).Switch(a).Attempts(3), AnyError().Switch(b)}
	}, WithAfterCommit(AfterCommitContinue), WithTransforms(det))
	s, err := rm.Stream(t.Context(), &Request{})
	require.NoError(t, err)
	parts, err := drain(s)
	require.NoError(t, err)
	got, starts, finishes := spliceText(parts)
	require.Equal(t, "Paris is the capital of France.", got)
	require.Equal(t, [2]int{1, 1}, [2]int{starts, finishes})
	require.Equal(t, 1, b.opened())
	require.Equal(t, 2, a.opened())
	require.NotNil(t, a.requests()[1].Continue, "the model after the refusal continues too")
	_, success, _ := out.counts()
	require.Equal(t, 1, success)
}

func TestContinue_usageSumsEveryAttempt(t *testing.T) {
	first := sscript(preamble(), texts("a b "), pErr(errCut))
	rm, _, _, _, _ := newContHarness(t, [][]sstep{first}, [][]sstep{sscript(preamble(), texts("c"), pUsage(10, 1))}, switchTo,
		WithAfterCommit(AfterCommitContinue))
	// The first attempt's stream reports what it saw before the cut.
	rm.r.base.(*contModel).scriptModel.scripts[0] = first
	s, err := rm.Stream(t.Context(), &Request{})
	require.NoError(t, err)
	s.(*contStream).cur.up = &usageStream{Stream: s.(*contStream).cur.up, u: Usage{InputTokens: 9, OutputTokens: 2}}
	parts, err := drain(s)
	require.NoError(t, err)
	require.Equal(t, Usage{InputTokens: 19, OutputTokens: 3}, parts[len(parts)-1].Finish.Usage)
}

type usageStream struct {
	Stream
	u Usage
}

func (s *usageStream) UsageSoFar() Usage { return s.u }

func TestContinue_throughputFloor(t *testing.T) {
	clk := newManualClock()
	slow := func(d string) sstep {
		return sstep{part: Part{Kind: abi.KindTextDelta, ID: "t", Delta: d}, do: func() { clk.Advance(time.Second) }}
	}
	trickle := sscript(preamble(), texts("Fast start "), slow("t"), slow("r"), slow("i"), slow("c"), pFinish(abi.ReasonStop))
	for _, mode := range []AfterCommit{AfterCommitError, AfterCommitContinue} {
		t.Run(mode.String(), func(t *testing.T) {
			out := &outcomes{}
			a := &contModel{scriptModel: &scriptModel{key: "p/a", clock: clk, scripts: [][]sstep{trickle}}}
			b := &contModel{scriptModel: &scriptModel{key: "p/b", clock: clk, scripts: [][]sstep{answer("kle")}}}
			r, err := New(a, append(out.runnerOpts(), WithRules(Fallback(b)))...)
			require.NoError(t, err)
			rm, err := NewRetryableModel(r, withStreamClock(clk), WithAfterCommit(mode), WithThroughputFloor(5, 2*time.Second))
			require.NoError(t, err)
			s, err := rm.Stream(t.Context(), &Request{})
			require.NoError(t, err)
			parts, err := drain(s)
			got, _, _ := spliceText(parts)
			if mode == AfterCommitError {
				var te *ThroughputError
				require.ErrorAs(t, err, &te)
				require.ErrorIs(t, err, context.DeadlineExceeded)
				require.Equal(t, "Fast start tric", got, "the window that fell below the floor ends it")
				return
			}
			require.NoError(t, err)
			require.Equal(t, "Fast start trickle", got)
		})
	}
}

func TestContinue_closeDuringTheStream(t *testing.T) {
	first := sscript(preamble(), texts("Hello "), pStall(0))
	rm, _, b, out, _ := newContHarness(t, [][]sstep{first}, [][]sstep{answer("x")}, switchTo, WithAfterCommit(AfterCommitContinue))
	s, err := rm.Stream(t.Context(), &Request{})
	require.NoError(t, err)
	p, err := s.Recv()
	require.NoError(t, err)
	require.Equal(t, abi.KindStreamStart, p.Kind)
	done := make(chan error)
	go func() {
		for {
			if _, err := s.Recv(); err != nil {
				done <- err
				return
			}
		}
	}()
	time.Sleep(10 * time.Millisecond)
	require.NoError(t, s.Close())
	require.ErrorIs(t, <-done, ErrStreamClosed)
	require.Zero(t, b.opened(), "a close is never continued")
	_, success, failure := out.counts()
	require.Equal(t, [2]int{0, 1}, [2]int{success, failure})
	_, err = s.Recv()
	require.ErrorIs(t, err, ErrStreamClosed)
}

func TestContinue_optionsCheckTheirValues(t *testing.T) {
	r, err := New(&scriptModel{key: "p/a"})
	require.NoError(t, err)
	for _, o := range []StreamOption{WithAfterCommit(7), WithMaxContinuations(0), WithContinuationPrompt(""),
		WithThroughputFloor(0, time.Second), WithThroughputFloor(1, 0)} {
		_, err := NewRetryableModel(r, o)
		require.Error(t, err)
	}
	a, err := ParseAfterCommit("continue")
	require.NoError(t, err)
	require.Equal(t, AfterCommitContinue, a)
	_, err = ParseAfterCommit("resume")
	require.Error(t, err)
}

var _ = io.EOF

func TestContinue_perStartModel(t *testing.T) {
	first := sscript(preamble(), texts("Hello "), pErr(errCut))
	second := sscript(preamble(), texts("world"), pFinish(abi.ReasonStop))
	for _, tc := range []struct {
		name  string
		opts  func(a, b Model) []StreamOption
		start bool // StartOn(a) explicitly
		want  error
	}{
		{"on the start model", func(a, _ Model) []StreamOption { return []StreamOption{WithAfterCommitOn(a, AfterCommitContinue)} }, true, nil},
		{"wins over the default", func(a, _ Model) []StreamOption {
			return []StreamOption{WithAfterCommit(AfterCommitContinue), WithAfterCommitOn(a, AfterCommitError)}
		}, false, errCut},
		{"another model's", func(_, b Model) []StreamOption { return []StreamOption{WithAfterCommitOn(b, AfterCommitContinue)} }, false, errCut},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := newManualClock()
			a := &contModel{scriptModel: &scriptModel{key: "p/a", clock: clk, scripts: [][]sstep{first}}}
			b := &contModel{scriptModel: &scriptModel{key: "p/b", clock: clk, scripts: [][]sstep{second}}}
			r, err := New(a, WithRules(Fallback(b)))
			require.NoError(t, err)
			rm, err := NewRetryableModel(r, append([]StreamOption{withStreamClock(clk)}, tc.opts(a, b)...)...)
			require.NoError(t, err)
			ctx := t.Context()
			if tc.start {
				ctx = StartOn(ctx, a)
			}
			s, err := rm.Stream(ctx, &Request{})
			require.NoError(t, err)
			parts, err := drain(s)
			if tc.want != nil {
				require.ErrorIs(t, err, tc.want)
				return
			}
			require.NoError(t, err)
			got, _, _ := spliceText(parts)
			require.Equal(t, "Hello world", got)
		})
	}
}

func TestContinue_attemptDeadlineAfterCommit(t *testing.T) {
	clk := newManualClock()
	a := &contModel{scriptModel: &scriptModel{key: "p/a", clock: clk, scripts: [][]sstep{sscript(preamble(), texts("Hello "), pStall(0))}}}
	b := &contModel{scriptModel: &scriptModel{key: "p/b", clock: clk, scripts: [][]sstep{sscript(preamble(), texts("world"), pFinish(abi.ReasonStop))}}}
	r, err := New(a, WithRules(Fallback(b)), WithAttemptTimeout(20*time.Millisecond))
	require.NoError(t, err)
	rm, err := NewRetryableModel(r, withStreamClock(clk), WithAfterCommit(AfterCommitContinue))
	require.NoError(t, err)
	s, err := rm.Stream(t.Context(), &Request{})
	require.NoError(t, err)
	parts, err := drain(s)
	require.NoError(t, err)
	got, _, _ := spliceText(parts)
	require.Equal(t, "Hello world", got)
}
