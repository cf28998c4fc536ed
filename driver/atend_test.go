package driver

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/retryhost/retryhost/abi"
	"github.com/stretchr/testify/require"
)

// CommitAtEnd: a failure after the first content part, up to the end of
// the stream, fails the attempt over like one before it, and the caller
// gets exactly the answering attempt's parts (a gateway's
// non-streaming client).
func TestCommitAtEnd_failuresUpToTheEndFailOver(t *testing.T) {
	lateNo := errors.New("late verdict: no")
	for _, tc := range []struct {
		name  string
		a     []sstep
		ropts []Option
		sopts []StreamOption
		class abi.ErrorClass
	}{
		{"an error after content", sscript(preamble(), pText("Hel"), pText("lo"), pErr(errBoom)), nil, nil, abi.ClassUnknown},
		{"an error part after content", sscript(preamble(), pText("Hel"), sstep{part: Part{Kind: abi.KindError, Err: errBoom}}), nil, nil, abi.ClassUnknown},
		{"the gap deadline mid-answer", sscript(preamble(), pText("Hel"), pStall(2*time.Second)), nil,
			[]StreamOption{WithGapTimeout(time.Second)}, abi.ClassTimeout},
		{"the attempt deadline mid-answer", sscript(preamble(), pText("Hel"), pStall(0)), []Option{WithAttemptTimeout(5 * time.Millisecond)}, nil, abi.ClassTimeout},
		{"a transform's verdict at the end", answer("Hel", "lo"), nil,
			[]StreamOption{WithTransforms(lateVerdict(lateNo))}, abi.ClassUnknown},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, [3][]sstep{tc.a, answer("from", " b"), nil},
				func(_, b, _ Model) []Condition { return []Condition{AnyError().Switch(b)} }, tc.ropts, tc.sopts...)
			s, err := h.rm.Stream(CommitAtEnd(t.Context()), &Request{})
			require.NoError(t, err)
			require.True(t, h.models[0].stream(0).isClosed(), "the failed attempt's upstream is closed")
			parts, err := drain(s)
			require.NoError(t, err)
			require.Equal(t, []string{"stream-start", "response-metadata", "text-start", "text-delta:from", "text-delta: b", "text-end", "finish"},
				kinds(parts), "only the answering attempt's parts, never the failed one's partial text")
			require.Len(t, h.out.commits, 1)
			require.Equal(t, "p/b", h.out.commits[0].Model.Key())
			require.Len(t, h.out.commits[0].Failed, 1)
			if tc.class != abi.ClassUnknown {
				require.Equal(t, tc.class, h.out.commits[0].Failed[0].Class)
			}
			_, success, failure := h.out.counts()
			require.Equal(t, [2]int{1, 0}, [2]int{success, failure})
		})
	}
}

// lateVerdict is a fail-closed transform that passes every part and fails
// its first instance at the end.
func lateVerdict(err error) *funcTransform {
	n := 0
	return &funcTransform{name: "late", policy: abi.TransformPolicy{Fail: abi.FailClosed},
		part: func(int, *Part) (abi.Verdict, error) { return verdict(abi.PartPass), nil },
		end: func() (abi.Verdict, error) {
			if n++; n == 1 {
				return abi.Verdict{}, err
			}
			return abi.Verdict{}, nil
		}}
}

// Without CommitAtEnd the same failure after content ends the committed
// stream: the option is what moves the commit.
func TestCommitAtEnd_isPerRequest(t *testing.T) {
	h := newHarness(t, [3][]sstep{sscript(preamble(), pText("Hel"), pErr(errBoom)), answer("b"), nil},
		func(_, b, _ Model) []Condition { return []Condition{AnyError().Switch(b)} }, nil)
	s, err := h.rm.Stream(t.Context(), &Request{})
	require.NoError(t, err)
	parts, err := drain(s)
	require.ErrorIs(t, err, errBoom)
	require.Contains(t, kinds(parts), "text-delta:Hel")
	require.Equal(t, 0, h.models[1].opened())
}

// Every attempt failing after its first content is the request's error,
// with no stream: nothing partial reaches the caller.
func TestCommitAtEnd_allFail(t *testing.T) {
	cut := sscript(preamble(), pText("Hel"), pErr(errBoom))
	h := newHarness(t, [3][]sstep{cut, cut, cut}, fallbacks, nil)
	s, err := h.rm.Stream(CommitAtEnd(t.Context()), &Request{})
	require.Nil(t, s)
	require.ErrorIs(t, err, errBoom)
	var re *RetryError
	require.ErrorAs(t, err, &re)
	require.Len(t, re.Attempts, 3)
	for _, m := range h.models {
		require.True(t, m.stream(0).isClosed())
	}
	commits, success, failure := h.out.counts()
	require.Equal(t, [3]int{0, 0, 1}, [3]int{commits, success, failure})
}

// The whole answer is judged as a result, as Generate judges a response.
func TestCommitAtEnd_judgesTheResult(t *testing.T) {
	filtered := sscript(preamble(), pText("Hel"), pKind(abi.KindTextEnd), pFinish(abi.ReasonContentFilter))
	h := newHarness(t, [3][]sstep{filtered, answer("b"), nil},
		func(_, b, _ Model) []Condition { return []Condition{OnFinish(abi.ReasonContentFilter).Switch(b)} }, nil)
	s, err := h.rm.Stream(CommitAtEnd(t.Context()), &Request{})
	require.NoError(t, err)
	parts, err := drain(s)
	require.NoError(t, err)
	require.Contains(t, kinds(parts), "text-delta:b")
	require.NotContains(t, kinds(parts), "text-delta:Hel")
	require.True(t, h.models[0].stream(0).isClosed())
}

// The first-content deadline still bounds the wait for the first content;
// once it came, a long answer is bounded by the gap deadline only.
func TestCommitAtEnd_firstContentDeadline(t *testing.T) {
	h := newHarness(t, [3][]sstep{sscript(preamble(), pStall(2*time.Second)), answer("b"), nil},
		func(_, b, _ Model) []Condition { return []Condition{Timeout().Switch(b)} }, nil, WithFirstContentTimeout(time.Second))
	s, err := h.rm.Stream(CommitAtEnd(t.Context()), &Request{})
	require.NoError(t, err)
	parts, err := drain(s)
	require.NoError(t, err)
	require.Contains(t, kinds(parts), "text-delta:b")
	var de *DeadlineError
	require.ErrorAs(t, h.out.commits[0].Failed[0].Err, &de)
	require.Equal(t, abi.DeadlineFirstContent, de.Deadline)

	// Content that arrives before the first-content deadline disarms it:
	// the rest of the answer may take longer than it.
	var h2 *harness
	later := sstep{part: pText("b").part, do: func() { h2.clk.Advance(5 * time.Second) }}
	h2 = newHarness(t, [3][]sstep{sscript(preamble(), pText("a"), later, pKind(abi.KindTextEnd), pFinish(abi.ReasonStop)), answer("c"), nil},
		func(_, b, _ Model) []Condition { return []Condition{Timeout().Switch(b)} }, nil, WithFirstContentTimeout(time.Second))
	s, err = h2.rm.Stream(CommitAtEnd(t.Context()), &Request{})
	require.NoError(t, err)
	parts, err = drain(s)
	require.NoError(t, err)
	require.Equal(t, []string{"stream-start", "response-metadata", "text-start", "text-delta:a", "text-delta:b", "text-end", "finish"}, kinds(parts))
	require.Equal(t, 0, h2.models[1].opened())
}

// With hedging on, the hedged loop commits at the end too: an attempt that
// fails after its first content goes to the rules, and the caller gets the
// next attempt's whole answer.
func TestCommitAtEnd_hedged(t *testing.T) {
	a := &scriptModel{key: "p/a", scripts: [][]sstep{sscript(preamble(), pText("Hel"), pErr(errBoom))}}
	b := &scriptModel{key: "p/b", scripts: [][]sstep{answer("from", " b")}}
	r, err := New(a, WithRules(AnyError().Switch(b)))
	require.NoError(t, err)
	m, err := NewRetryableModel(r, WithHedge(time.Hour, 1))
	require.NoError(t, err)
	s, err := m.Stream(CommitAtEnd(t.Context()), &Request{})
	require.NoError(t, err)
	parts, err := drain(s)
	require.NoError(t, err)
	require.Equal(t, []string{"stream-start", "response-metadata", "text-start", "text-delta:from", "text-delta: b", "text-end", "finish"}, kinds(parts))
	require.True(t, a.stream(0).isClosed())

	// The same request without CommitAtEnd commits on "Hel".
	a2 := &scriptModel{key: "p/a", scripts: a.scripts}
	r, err = New(a2, WithRules(AnyError().Switch(b)))
	require.NoError(t, err)
	m, err = NewRetryableModel(r, WithHedge(time.Hour, 1))
	require.NoError(t, err)
	s, err = m.Stream(t.Context(), &Request{})
	require.NoError(t, err)
	_, err = drain(s)
	require.ErrorIs(t, err, errBoom)
}

// What an attempt committing at its end holds is bounded: past
// WithMaxAnswerBytes it fails with ErrAnswerTooLarge (its upstream closed,
// not read further) and the rules decide. A stream that commits at its
// first content is not bounded by it.
func TestCommitAtEnd_maxAnswerBytes(t *testing.T) {
	long := strings.Repeat("x", 200)
	// Each part counts its payload plus 256: the preamble 770, each long
	// delta 457, so the third one passes 2,000; "short" fits.
	big := sscript(preamble(), texts(long, long, long, long), pKind(abi.KindTextEnd), pFinish(abi.ReasonStop))
	rules := func(_, b, _ Model) []Condition { return []Condition{AnyError().Switch(b)} }

	h := newHarness(t, [3][]sstep{big, answer("short"), nil}, rules, nil, WithMaxAnswerBytes(2000))
	s, err := h.rm.Stream(CommitAtEnd(t.Context()), &Request{})
	require.NoError(t, err)
	parts, err := drain(s)
	require.NoError(t, err)
	require.Contains(t, kinds(parts), "text-delta:short")
	require.ErrorIs(t, h.out.commits[0].Failed[0].Err, ErrAnswerTooLarge)
	require.True(t, h.models[0].stream(0).isClosed())
	require.Equal(t, 6, h.models[0].stream(0).pulledParts(), "not read past the limit")

	h = newHarness(t, [3][]sstep{big, big, nil}, rules, nil, WithMaxAnswerBytes(2000))
	_, err = h.rm.Stream(CommitAtEnd(t.Context()), &Request{})
	require.ErrorIs(t, err, ErrAnswerTooLarge)

	h = newHarness(t, [3][]sstep{big, nil, nil}, rules, nil, WithMaxAnswerBytes(2000))
	s, err = h.rm.Stream(t.Context(), &Request{})
	require.NoError(t, err)
	parts, err = drain(s)
	require.NoError(t, err, "a stream committed at its first content holds nothing")
	require.Len(t, parts, 9)

	for _, n := range []int64{0, -1} {
		_, err = NewRetryableModel(mustNew(t, base), WithMaxAnswerBytes(n))
		require.ErrorContains(t, err, "max answer bytes must be positive")
	}
}

// An answer held to its end is held in segments past its first 16 parts
// (atEndSegment): the replay gives every part once and in order — also
// when a transform releases parts in batches, which overfill a segment —
// a finish part that a segment boundary separated from the end still
// reaches the rules, and Close mid-replay ends the stream.
func TestCommitAtEnd_longAnswerHeldInSegments(t *testing.T) {
	const n = 3000 // past 16+32+…+1024: segments of every size, the largest more than once
	words := make([]string, n)
	want := []string{"stream-start", "response-metadata", "text-start"}
	for i := range words {
		words[i] = strconv.Itoa(i) + " "
		want = append(want, "text-delta:"+words[i])
	}
	want = append(want, "text-end", "finish")
	rules := func(_, b, _ Model) []Condition { return []Condition{AnyError().Switch(b)} }
	batches := &funcTransform{name: "batches", policy: abi.TransformPolicy{Fail: abi.FailClosed},
		part: func(i int, _ *Part) (abi.Verdict, error) {
			if i%7 != 6 {
				return verdict(abi.PartHold), nil
			}
			return verdict(abi.PartPass), nil
		}}
	for _, tc := range []struct {
		name  string
		sopts []StreamOption
	}{
		{"without transforms", nil},
		{"through a transform releasing batches", []StreamOption{WithTransforms(batches)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, [3][]sstep{answer(words...), answer("b"), nil}, rules, nil, tc.sopts...)
			s, err := h.rm.Stream(CommitAtEnd(t.Context()), &Request{})
			require.NoError(t, err)
			parts, err := drain(s)
			require.NoError(t, err)
			require.Equal(t, want, kinds(parts))
			require.Equal(t, 0, h.models[1].opened())
		})
	}

	// The finish is the 16th part, the last of the first segment; the
	// answer goes on past it. The rules still judge it.
	filtered := sscript(preamble(), texts(words[:11]...), pKind(abi.KindTextEnd), pFinish(abi.ReasonContentFilter), texts(words[11:100]...))
	h := newHarness(t, [3][]sstep{filtered, answer("b"), nil},
		func(_, b, _ Model) []Condition { return []Condition{OnFinish(abi.ReasonContentFilter).Switch(b)} }, nil)
	s, err := h.rm.Stream(CommitAtEnd(t.Context()), &Request{})
	require.NoError(t, err)
	parts, err := drain(s)
	require.NoError(t, err)
	require.Contains(t, kinds(parts), "text-delta:b")
	require.Equal(t, 1, h.models[1].opened())

	// Close in the middle of the replay.
	h = newHarness(t, [3][]sstep{answer(words...), nil, nil}, rules, nil)
	s, err = h.rm.Stream(CommitAtEnd(t.Context()), &Request{})
	require.NoError(t, err)
	for range 100 {
		_, err = s.Recv()
		require.NoError(t, err)
	}
	require.NoError(t, s.Close())
	_, err = s.Recv()
	require.ErrorIs(t, err, ErrStreamClosed)
}

// atEndModel records what CommitsAtEnd said of each Stream call's context.
type atEndModel struct {
	*scriptModel
	mu   sync.Mutex
	seen []bool
}

func (m *atEndModel) Stream(ctx context.Context, req *Request) (Stream, error) {
	m.mu.Lock()
	m.seen = append(m.seen, CommitsAtEnd(ctx))
	m.mu.Unlock()
	return m.scriptModel.Stream(ctx, req)
}

// A model's Stream learns from its context whether the request commits at
// its end (an adapter may then ask its upstream for the whole answer, as
// openai.WithUpstreamJSON does), through the plain and the hedged loop,
// and a request that commits at its first content says it does not.
func TestCommitsAtEnd_reachesTheModel(t *testing.T) {
	for _, tc := range []struct {
		name  string
		atEnd bool
		opts  []StreamOption
	}{
		{"plain", false, nil},
		{"at end", true, nil},
		{"hedged, at end", true, []StreamOption{WithHedge(time.Hour, 1)}},
		{"hedged", false, []StreamOption{WithHedge(time.Hour, 1)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := &atEndModel{scriptModel: &scriptModel{key: "p/a", scripts: [][]sstep{answer("ok")}}}
			r, err := New(m)
			require.NoError(t, err)
			rm, err := NewRetryableModel(r, tc.opts...)
			require.NoError(t, err)
			ctx := t.Context()
			if tc.atEnd {
				ctx = CommitAtEnd(ctx)
			}
			require.Equal(t, tc.atEnd, CommitsAtEnd(ctx))
			s, err := rm.Stream(ctx, &Request{})
			require.NoError(t, err)
			_, err = drain(s)
			require.NoError(t, err)
			m.mu.Lock()
			defer m.mu.Unlock()
			require.Equal(t, []bool{tc.atEnd}, m.seen)
		})
	}
}

// WithEmptyAnswerFails: a stream that finishes for stop with no content is
// a failure of class server before commit, streamed or committed at the
// end, and the rules fail it over; a finish for length with no content is
// the answer it is; off (the default), an empty answer commits.
func TestEmptyAnswerFails(t *testing.T) {
	empty := sscript(preamble(), pKind(abi.KindTextEnd), pFinish(abi.ReasonStop))
	for _, tc := range []struct {
		name   string
		a      []sstep
		on     bool
		atEnd  bool
		answer string // the model that answered
	}{
		{"streamed", empty, true, false, "p/b"},
		{"committed at the end", empty, true, true, "p/b"},
		{"a finish for length is an answer", sscript(preamble(), pFinish(abi.ReasonLength)), true, false, "p/a"},
		{"off", empty, false, false, "p/a"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, [3][]sstep{tc.a, answer("from", " b"), nil},
				func(_, b, _ Model) []Condition { return []Condition{OnClass(abi.ClassServer).Switch(b)} }, nil,
				WithEmptyAnswerFails(tc.on))
			ctx := t.Context()
			if tc.atEnd {
				ctx = CommitAtEnd(ctx)
			}
			s, err := h.rm.Stream(ctx, &Request{})
			require.NoError(t, err)
			_, err = drain(s)
			require.NoError(t, err)
			require.Len(t, h.out.commits, 1)
			require.Equal(t, tc.answer, h.out.commits[0].Model.Key())
			if tc.answer == "p/b" {
				require.ErrorIs(t, h.out.commits[0].Failed[0].Err, ErrEmptyAnswer)
				require.Equal(t, abi.ClassServer, h.out.commits[0].Failed[0].Class)
			}
		})
	}
}
