package driver

import (
	"context"
	"errors"
	"io"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/retryhost/retryhost/abi"
)

type attemptOpts struct {
	ts           []abi.Transformer
	firstContent time.Duration
	gap          time.Duration
	commit       CommitRule
}

func runOne(ctx context.Context, m *scriptModel, o attemptOpts) attemptResult {
	if m.clock == nil {
		m.clock = newManualClock()
	}
	return runAttempt(ctx, &attemptSpec{
		model: m, req: &Request{}, number: 1, transformers: o.ts, commit: o.commit,
		firstContent: o.firstContent, gap: o.gap, clock: m.clock,
	})
}

func mustRefusal(t *testing.T) *RefusalDetector {
	t.Helper()
	d, err := NewRefusalDetector()
	require.NoError(t, err)
	return d
}

var errBoom = &ProviderError{Provider: "fake", Status: 503, Message: "overloaded"}

func TestRunAttempt_commit(t *testing.T) {
	m := &scriptModel{key: "p/a", scripts: [][]sstep{sscript(preamble(), pText("Hi"), pText(" there"),
		pKind(abi.KindTextEnd), pFinish(abi.ReasonStop))}}
	r := runOne(t.Context(), m, attemptOpts{})
	require.NoError(t, r.err)
	require.False(t, r.empty)
	// Back-pressure: commit pulled nothing past the first content part.
	require.Equal(t, 4, m.stream(0).pulledParts())
	parts, err := drain(r.stream)
	require.NoError(t, err)
	require.Equal(t, []string{"stream-start", "response-metadata", "text-start", "text-delta:Hi",
		"text-delta: there", "text-end", "finish"}, kinds(parts))
	require.True(t, m.stream(0).isClosed(), "the upstream is closed at the end")
	_, err = r.stream.Recv()
	require.ErrorIs(t, err, io.EOF, "Recv after the end returns io.EOF again")
}

func TestRunAttempt_failsBeforeContent(t *testing.T) {
	partErr := errors.New("in-stream overloaded")
	for _, tc := range []struct {
		name string
		sc   []sstep
		want error
	}{
		{"provider error", sscript(preamble(), pErr(errBoom)), errBoom},
		{"error part", sscript(preamble(), sstep{part: Part{Kind: abi.KindError, Err: partErr}}), partErr},
		{"error part without an error", sscript(sstep{part: Part{Kind: abi.KindError}}), errEmptyErrorPart},
		{"empty deltas do not commit", sscript(preamble(), pText(""), pErr(errBoom)), errBoom},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := &scriptModel{key: "p/a", scripts: [][]sstep{tc.sc}}
			r := runOne(t.Context(), m, attemptOpts{})
			require.ErrorIs(t, r.err, tc.want)
			require.Nil(t, r.stream)
			require.True(t, m.stream(0).isClosed(), "the failed upstream is closed at once")
		})
	}
	t.Run("open error", func(t *testing.T) {
		m := &scriptModel{key: "p/a", openErr: []error{errBoom}, scripts: [][]sstep{nil}}
		r := runOne(t.Context(), m, attemptOpts{})
		require.ErrorIs(t, r.err, errBoom)
	})
}

func TestRunAttempt_errorAfterContentSurfaces(t *testing.T) {
	partErr := errors.New("in-stream error")
	for _, tc := range []struct {
		name string
		last sstep
		want error
	}{
		{"provider error", pErr(errBoom), errBoom},
		{"error part", sstep{part: Part{Kind: abi.KindError, Err: partErr}}, partErr},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := &scriptModel{key: "p/a", scripts: [][]sstep{sscript(preamble(), pText("Hi"), pText("!"), tc.last, pText("never"))}}
			r := runOne(t.Context(), m, attemptOpts{})
			require.NoError(t, r.err)
			parts, err := drain(r.stream)
			require.ErrorIs(t, err, tc.want)
			require.Equal(t, []string{"stream-start", "response-metadata", "text-start", "text-delta:Hi", "text-delta:!"}, kinds(parts))
			require.True(t, m.stream(0).isClosed())
			_, err = r.stream.Recv()
			require.ErrorIs(t, err, tc.want, "the error sticks")
		})
	}
}

func TestRunAttempt_emptyStreamCommits(t *testing.T) {
	for _, tc := range []struct {
		name   string
		sc     []sstep
		kinds  []string
		finish abi.Reason
	}{
		{"nothing at all", nil, []string{}, 0},
		{"preamble and a content-filter finish", sscript(preamble(), pKind(abi.KindTextEnd), pFinish(abi.ReasonContentFilter)),
			[]string{"stream-start", "response-metadata", "text-start", "text-end", "finish"}, abi.ReasonContentFilter},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := &scriptModel{key: "p/a", scripts: [][]sstep{tc.sc}}
			r := runOne(t.Context(), m, attemptOpts{ts: []abi.Transformer{mustRefusal(t)}})
			require.NoError(t, r.err)
			require.True(t, r.empty)
			if tc.finish != 0 {
				require.Equal(t, tc.finish, r.finish.Reason.Unified)
			} else {
				require.Nil(t, r.finish)
			}
			parts, err := drain(r.stream)
			require.NoError(t, err)
			require.Equal(t, tc.kinds, kinds(parts))
		})
	}
}

func TestRunAttempt_refusal(t *testing.T) {
	m := &scriptModel{key: "p/a", scripts: [][]sstep{sscript(preamble(), pText("I’m sorry, "), pText("but I  can't"),
		pText(" help with that."), pText("never pulled"))}}
	r := runOne(t.Context(), m, attemptOpts{ts: []abi.Transformer{mustRefusal(t)}})
	var re *RefusalError
	require.ErrorAs(t, r.err, &re)
	require.Equal(t, "i'm sorry, but i can't", re.Phrase)
	require.Equal(t, "I’m sorry, but I  can't", re.Text)
	require.Equal(t, "refusal", re.Transform)
	require.True(t, m.stream(0).isClosed(), "a refusal closes the upstream at once")
	require.Equal(t, 5, m.stream(0).pulledParts(), "nothing is pulled after the decision")
}

func TestRunAttempt_divergenceFlushesInOrder(t *testing.T) {
	m := &scriptModel{key: "p/a", scripts: [][]sstep{sscript(preamble(), pText("I'm "), pText("happy"), pText(" to help"))}}
	r := runOne(t.Context(), m, attemptOpts{ts: []abi.Transformer{mustRefusal(t)}})
	require.NoError(t, r.err)
	parts, err := drain(r.stream)
	require.NoError(t, err)
	require.Equal(t, []string{"stream-start", "response-metadata", "text-start", "text-delta:I'm ",
		"text-delta:happy", "text-delta: to help"}, kinds(parts))
}

func TestRunAttempt_toolCallIsNeverBufferedToTheEnd(t *testing.T) {
	// The upstream stalls for good after the tool input starts: a detector
	// that buffered to the end would hang here.
	m := &scriptModel{key: "p/a", scripts: [][]sstep{sscript(pKind(abi.KindStreamStart), pKind(abi.KindResponseMeta),
		sstep{part: Part{Kind: abi.KindToolInputStart, ID: "c1", Tool: &abi.ToolInfo{Name: "get"}}},
		sstep{part: Part{Kind: abi.KindToolInputDelta, ID: "c1", Delta: `{"q":1}`}}, pStall(0))}}
	r := runOne(t.Context(), m, attemptOpts{ts: []abi.Transformer{mustRefusal(t)}})
	require.NoError(t, r.err)
	require.Equal(t, 3, m.stream(0).pulledParts())
	p1, _ := r.stream.Recv()
	p2, _ := r.stream.Recv()
	p3, _ := r.stream.Recv()
	p4, _ := r.stream.Recv()
	require.Equal(t, []string{"stream-start", "response-metadata", "tool-input-start", `tool-input-delta:{"q":1}`},
		kinds([]Part{p1, p2, p3, p4}))
	require.NoError(t, r.stream.Close())
	require.True(t, m.stream(0).isClosed())
}

func TestRunAttempt_firstContentDeadline(t *testing.T) {
	m := &scriptModel{key: "p/a", scripts: [][]sstep{sscript(preamble(), pStall(2*time.Second))}}
	r := runOne(t.Context(), m, attemptOpts{firstContent: time.Second})
	var de *DeadlineError
	require.ErrorAs(t, r.err, &de)
	require.Equal(t, abi.DeadlineFirstContent, de.Deadline)
	require.True(t, de.Timeout())
	require.True(t, m.stream(0).isClosed())
}

func TestRunAttempt_firstContentDeadlineStopsAtCommit(t *testing.T) {
	m := &scriptModel{key: "p/a", scripts: [][]sstep{sscript(preamble(), pText("Hi"),
		sstep{do: func() {}, part: Part{Kind: abi.KindTextDelta, Delta: "!"}})}}
	clk := newManualClock()
	m.clock = clk
	r := runOne(t.Context(), m, attemptOpts{firstContent: time.Second})
	require.NoError(t, r.err)
	clk.Advance(time.Hour)
	parts, err := drain(r.stream)
	require.NoError(t, err)
	require.Len(t, parts, 5)
}

func TestRunAttempt_gapDeadlineTruncates(t *testing.T) {
	m := &scriptModel{key: "p/a", scripts: [][]sstep{sscript(preamble(), pText("Hi"), pText("!"), pStall(2*time.Second), pText("never"))}}
	r := runOne(t.Context(), m, attemptOpts{gap: time.Second})
	require.NoError(t, r.err)
	parts, err := drain(r.stream)
	var de *DeadlineError
	require.ErrorAs(t, err, &de)
	require.Equal(t, abi.DeadlineGap, de.Deadline)
	require.Equal(t, []string{"stream-start", "response-metadata", "text-start", "text-delta:Hi", "text-delta:!"}, kinds(parts))
	require.True(t, m.stream(0).isClosed())
}

func TestRunAttempt_callerCancelIsItsCause(t *testing.T) {
	cause := errors.New("user went away")
	ctx, cancel := context.WithCancelCause(t.Context())
	defer cancel(nil)
	t.Run("before commit", func(t *testing.T) {
		m := &scriptModel{key: "p/a", scripts: [][]sstep{sscript(preamble(), pDo(func() { cancel(cause) }))}}
		r := runOne(ctx, m, attemptOpts{firstContent: time.Second})
		require.ErrorIs(t, r.err, cause)
		var de *DeadlineError
		require.False(t, errors.As(r.err, &de))
		require.True(t, m.stream(0).isClosed())
	})
}

func TestRunAttempt_closeUnblocksRecv(t *testing.T) {
	m := &scriptModel{key: "p/a", scripts: [][]sstep{sscript(pText("Hi"), pStall(0))}}
	r := runOne(t.Context(), m, attemptOpts{})
	require.NoError(t, r.err)
	_, err := r.stream.Recv()
	require.NoError(t, err)
	var wg sync.WaitGroup
	var recvErr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		_, recvErr = r.stream.Recv() // blocks in the stalled upstream
	}()
	require.Eventually(t, func() bool { return m.stream(0).reached() == 2 }, 5*time.Second, time.Millisecond)
	require.NoError(t, r.stream.Close())
	wg.Wait()
	require.ErrorIs(t, recvErr, ErrStreamClosed)
	require.True(t, m.stream(0).isClosed())
}

func TestRunAttempt_gapDeadlinePrecision(t *testing.T) {
	spaced := func(clk *manualClock, every time.Duration, n int) []sstep {
		out := preamble()
		for i := range n {
			out = append(out, sstep{do: func() { clk.Advance(every) }, part: Part{Kind: abi.KindTextDelta, Delta: string(rune('a' + i))}})
		}
		return out
	}
	t.Run("content every 0.9 gap keeps the stream alive", func(t *testing.T) {
		clk := newManualClock()
		m := &scriptModel{key: "p/a", clock: clk, scripts: [][]sstep{spaced(clk, 900*time.Millisecond, 12)}}
		r := runOne(t.Context(), m, attemptOpts{gap: time.Second})
		require.NoError(t, r.err)
		parts, err := drain(r.stream)
		require.NoError(t, err)
		require.Len(t, parts, 15)
	})
	t.Run("silence past 1.25 gap truncates", func(t *testing.T) {
		clk := newManualClock()
		m := &scriptModel{key: "p/a", clock: clk, scripts: [][]sstep{spaced(clk, 1300*time.Millisecond, 5)}}
		r := runOne(t.Context(), m, attemptOpts{gap: time.Second})
		require.NoError(t, r.err)
		parts, err := drain(r.stream)
		var de *DeadlineError
		require.ErrorAs(t, err, &de)
		require.Equal(t, abi.DeadlineGap, de.Deadline)
		require.Len(t, parts, 4, "the preamble and the first content, then the gap")
	})
}
