package driver

import (
	"context"
	"sync"
	"testing"

	"github.com/retryhost/retryhost/abi"
	"github.com/stretchr/testify/require"
)

// genModel answers Generate from a script, one entry per call (the last
// entry repeats), and records the requests it got.
type genModel struct {
	key    string
	script []genAnswer

	mu   sync.Mutex
	reqs []*Request
}

type genAnswer struct {
	finish abi.Reason
	err    error
	nilnil bool
	text   string // the answer's text; default "from <key>"
}

func (m *genModel) Key() string { return m.key }

func (m *genModel) Generate(_ context.Context, req *Request) (*Response, error) {
	m.mu.Lock()
	n := len(m.reqs)
	m.reqs = append(m.reqs, req)
	m.mu.Unlock()
	a := m.script[min(n, len(m.script)-1)]
	switch {
	case a.nilnil:
		return nil, nil
	case a.err != nil:
		return nil, a.err
	}
	text := a.text
	if text == "" {
		text = "from " + m.key
	}
	return &Response{
		Content: []Part{{Kind: abi.KindTextDelta, Delta: text}},
		Finish:  FinishReason{Unified: a.finish},
	}, nil
}

func (m *genModel) Stream(context.Context, *Request) (Stream, error) { return nil, nil }

func TestRunner_Generate(t *testing.T) {
	stop := genAnswer{finish: abi.ReasonStop}
	filtered := genAnswer{finish: abi.ReasonContentFilter}
	temp := 0.3
	tests := []struct {
		name      string
		primary   []genAnswer
		secondary []genAnswer
		rules     func(secondary Model) []Condition
		wantText  string
		wantErr   string
		wantCalls [2]int
	}{
		{
			name: "a content-filter finish switches model", primary: []genAnswer{filtered}, secondary: []genAnswer{stop},
			rules:    func(m Model) []Condition { return []Condition{OnFinish(abi.ReasonContentFilter).Switch(m)} },
			wantText: "from test/g2", wantCalls: [2]int{1, 1},
		},
		{
			name: "a rejected result with no model left is the answer", primary: []genAnswer{filtered}, secondary: []genAnswer{filtered},
			rules:    func(m Model) []Condition { return []Condition{OnFinish(abi.ReasonContentFilter).Switch(m)} },
			wantText: "from test/g2", wantCalls: [2]int{1, 1},
		},
		{
			name: "a fallback ignores results", primary: []genAnswer{filtered}, secondary: []genAnswer{stop},
			rules:    func(m Model) []Condition { return []Condition{Fallback(m)} },
			wantText: "from test/g1", wantCalls: [2]int{1, 0},
		},
		{
			name: "an error switches with the rule's overrides", primary: []genAnswer{{err: status(429)}}, secondary: []genAnswer{stop},
			rules: func(m Model) []Condition {
				return []Condition{OnStatus(429).Switch(m).Override(Overrides{Temperature: &temp})}
			},
			wantText: "from test/g2", wantCalls: [2]int{1, 1},
		},
		{
			name: "neither response nor error is a failure", primary: []genAnswer{{nilnil: true}}, secondary: []genAnswer{stop},
			rules:   func(m Model) []Condition { return nil },
			wantErr: "returned neither a response nor an error", wantCalls: [2]int{1, 0},
		},
		{
			name: "give up on a result", primary: []genAnswer{{finish: abi.ReasonLength}}, secondary: []genAnswer{stop},
			rules:   func(m Model) []Condition { return []Condition{OnFinish(abi.ReasonLength).GiveUp()} },
			wantErr: "result rejected, finish length", wantCalls: [2]int{1, 0},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			g1 := &genModel{key: "test/g1", script: tc.primary}
			g2 := &genModel{key: "test/g2", script: tc.secondary}
			r := mustNew(t, g1, WithRules(tc.rules(g2)...), WithModels(g2))
			req := &Request{System: "sys"}
			resp, err := r.Generate(context.Background(), req)
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
				require.Nil(t, resp)
			} else {
				require.NoError(t, err)
				require.Equal(t, tc.wantText, resp.Text())
			}
			require.Equal(t, tc.wantCalls, [2]int{len(g1.reqs), len(g2.reqs)})
			require.Same(t, req, g1.reqs[0], "no overrides: the caller's request as is")
			if len(g2.reqs) > 0 && tc.name == "an error switches with the rule's overrides" {
				require.Equal(t, &temp, g2.reqs[0].Temperature)
				require.Nil(t, req.Temperature, "the caller's request is untouched")
			}
		})
	}
	_, err := mustNew(t, base).Generate(context.Background(), nil)
	require.ErrorContains(t, err, "needs a request")
}

// RetryableModel.Generate runs every response through
// the transform chain, so a refusal in a whole answer fails the attempt over
// exactly as a streamed one does.
func TestRetryableModel_GenerateRunsTheTransforms(t *testing.T) {
	refusal := genAnswer{finish: abi.ReasonStop, text: "I'm sorry, but I can't help with that."}
	det, err := NewRefusalDetector()
	require.NoError(t, err)

	t.Run("a refusal fails over", func(t *testing.T) {
		g1 := &genModel{key: "test/g1", script: []genAnswer{refusal}}
		g2 := &genModel{key: "test/g2", script: []genAnswer{{finish: abi.ReasonStop, text: "Paris."}}}
		var out []Outcome
		r := mustNew(t, g1, WithRules(OnClass(abi.ClassRefusal).Switch(g2)),
			WithOnSuccess(func(_ context.Context, o Outcome) { out = append(out, o) }))
		rm, err := NewRetryableModel(r, WithTransforms(det))
		require.NoError(t, err)
		resp, err := rm.Generate(t.Context(), &Request{})
		require.NoError(t, err)
		require.Equal(t, "Paris.", resp.Text())
		require.Len(t, out, 1)
		require.Len(t, out[0].Attempts, 2)
		require.Equal(t, abi.ClassRefusal, out[0].Attempts[0].Class)
		var re *RefusalError
		require.ErrorAs(t, out[0].Attempts[0].Err, &re)
		require.Equal(t, refusal.text, re.Text)
	})
	t.Run("a refusal with no rule is the request's error", func(t *testing.T) {
		g1 := &genModel{key: "test/g1", script: []genAnswer{refusal}}
		rm, err := NewRetryableModel(mustNew(t, g1), WithTransforms(det))
		require.NoError(t, err)
		resp, err := rm.Generate(t.Context(), &Request{})
		require.Nil(t, resp)
		var re *RefusalError
		require.ErrorAs(t, err, &re)
	})
	t.Run("an answer that is not a refusal passes untouched", func(t *testing.T) {
		g1 := &genModel{key: "test/g1", script: []genAnswer{{finish: abi.ReasonStop, text: "I'm happy to help."}}}
		rm, err := NewRetryableModel(mustNew(t, g1), WithTransforms(det))
		require.NoError(t, err)
		resp, err := rm.Generate(t.Context(), &Request{})
		require.NoError(t, err)
		require.Equal(t, "I'm happy to help.", resp.Text())
	})
	t.Run("replace and drop change the content; the model's response is not modified", func(t *testing.T) {
		orig := &Response{Content: []Part{{Kind: abi.KindTextDelta, Delta: "secret"}, {Kind: abi.KindReasoningDelta, Delta: "hmm"}},
			Finish: FinishReason{Unified: abi.ReasonStop}}
		m := &scriptModel{key: "test/g1", genResp: []*Response{orig}}
		redact := &funcTransform{name: "redact", part: func(_ int, p *Part) (abi.Verdict, error) {
			switch p.Kind {
			case abi.KindTextDelta:
				return abi.Verdict{Action: abi.PartReplace, Replace: []Part{{Kind: abi.KindTextDelta, Delta: "[redacted]"}}}, nil
			case abi.KindReasoningDelta:
				return verdict(abi.PartDrop), nil
			}
			return verdict(abi.PartPass), nil
		}}
		rm, err := NewRetryableModel(mustNew(t, m), WithTransforms(redact))
		require.NoError(t, err)
		resp, err := rm.Generate(t.Context(), &Request{})
		require.NoError(t, err)
		require.Equal(t, []string{"text-delta:[redacted]"}, kinds(resp.Content))
		require.Equal(t, "secret", orig.Content[0].Delta)
		require.Len(t, orig.Content, 2)
		opened, closed := redact.counts()
		require.Equal(t, [2]int{1, 1}, [2]int{opened, closed}, "one instance per attempt, closed")
	})
	t.Run("a fail-closed transform that cannot open fails the attempt", func(t *testing.T) {
		g1 := &genModel{key: "test/g1", script: []genAnswer{{finish: abi.ReasonStop}}}
		g2 := &genModel{key: "test/g2", script: []genAnswer{{finish: abi.ReasonStop}}}
		n := 0
		broken := &funcTransform{name: "broken", policy: abi.TransformPolicy{Fail: abi.FailClosed},
			open: func() error {
				if n++; n == 1 {
					return errBoom
				}
				return nil
			},
			part: func(int, *Part) (abi.Verdict, error) { return verdict(abi.PartPass), nil }}
		rm, err := NewRetryableModel(mustNew(t, g1, WithRules(OnClass(abi.ClassPlugin).Switch(g2))), WithTransforms(broken))
		require.NoError(t, err)
		resp, err := rm.Generate(t.Context(), &Request{})
		require.NoError(t, err)
		require.Equal(t, "from test/g2", resp.Text())
	})
}
