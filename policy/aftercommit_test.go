package policy_test

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/retryhost/retryhost/abi"
	"github.com/retryhost/retryhost/driver"
	"github.com/retryhost/retryhost/policy"
)

// partsModel streams its parts, then fails with err (nil: a clean end).
type partsModel struct {
	key   string
	parts []abi.Part
	err   error
}

func (m partsModel) Key() string { return m.key }
func (m partsModel) Generate(context.Context, *driver.Request) (*driver.Response, error) {
	return nil, errors.New("stream only")
}
func (m partsModel) Stream(context.Context, *driver.Request) (driver.Stream, error) {
	return &partsStream{m: m}, nil
}

type partsStream struct {
	m partsModel
	i int
}

func (s *partsStream) Recv() (abi.Part, error) {
	if s.i < len(s.m.parts) {
		s.i++
		return s.m.parts[s.i-1], nil
	}
	if s.m.err != nil {
		return abi.Part{}, s.m.err
	}
	return abi.Part{}, io.EOF
}
func (s *partsStream) Close() error { return nil }

func TestAfterCommit_policyAndPerModel(t *testing.T) {
	cut := errors.New("connection reset")
	opts := bound()
	opts.Models = map[string]driver.Model{
		"a": partsModel{key: "s/a", parts: []abi.Part{{Kind: abi.KindStreamStart}, {Kind: abi.KindTextStart, ID: "0"}, {Kind: abi.KindTextDelta, ID: "0", Delta: "Hello "}}, err: cut},
		"b": partsModel{key: "s/b", parts: []abi.Part{{Kind: abi.KindStreamStart}, {Kind: abi.KindTextStart, ID: "0"}, {Kind: abi.KindTextDelta, ID: "0", Delta: "world"},
			{Kind: abi.KindTextEnd, ID: "0"}, {Kind: abi.KindFinish, Finish: &abi.Finish{}}}},
	}
	rules := `, "rules": [{"when": {"any": true}, "action": "switch", "model": "b"}]`
	for _, tc := range []struct {
		name, doc string
		want      string
		err       error
	}{
		{"default", `{` + models + rules + `}`, "Hello ", cut},
		{"policy-wide", `{` + models + rules + `, "after_commit": "continue", "max_continuations": 1, "continuation_prompt": "go on"}`, "Hello world", nil},
		{"on the model", `{"models": [{"name": "a", "provider": "scripted", "after_commit": "continue"}, {"name": "b", "provider": "scripted"}]` + rules + `}`, "Hello world", nil},
		{"the model's wins", `{"models": [{"name": "a", "provider": "scripted", "after_commit": "error"}, {"name": "b", "provider": "scripted"}]` + rules + `, "after_commit": "continue"}`, "Hello ", cut},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := policy.Parse(t.Context(), []byte(tc.doc), opts)
			require.NoError(t, err)
			defer p.Close(context.Background())
			s, err := p.Model.Stream(driver.StartOn(t.Context(), p.Models["a"]), &driver.Request{})
			require.NoError(t, err)
			var b strings.Builder
			for {
				part, err := s.Recv()
				if err != nil {
					if tc.err == nil {
						require.ErrorIs(t, err, io.EOF)
					} else {
						require.ErrorIs(t, err, tc.err)
					}
					break
				}
				b.WriteString(part.Delta)
			}
			require.Equal(t, tc.want, b.String())
		})
	}
}
