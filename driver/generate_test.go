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
	return &Response{
		Content: []Part{{Kind: abi.KindTextDelta, Delta: "from " + m.key}},
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
