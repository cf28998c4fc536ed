package e2e_test

import (
	"context"
	"io"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/retryhost/retryhost/abi"
	"github.com/retryhost/retryhost/driver"
	"github.com/retryhost/retryhost/host"
	"github.com/retryhost/retryhost/plugins"
	"github.com/retryhost/retryhost/plugins/internal/plugintest"
)

// streamer is a model whose Stream sends fixed parts; it counts streams
// opened and closed.
type streamer struct {
	key            string
	parts          []abi.Part
	opened, closed atomic.Int32
}

func (m *streamer) Key() string { return m.key }
func (m *streamer) Generate(context.Context, *driver.Request) (*driver.Response, error) {
	panic("streamed only")
}
func (m *streamer) Stream(ctx context.Context, _ *driver.Request) (driver.Stream, error) {
	m.opened.Add(1)
	return &sliceStream{ctx: ctx, m: m, parts: m.parts}, nil
}

type sliceStream struct {
	ctx    context.Context
	m      *streamer
	parts  []abi.Part
	closed atomic.Bool
}

func (s *sliceStream) Recv() (abi.Part, error) {
	if err := s.ctx.Err(); err != nil {
		return abi.Part{}, err
	}
	if len(s.parts) == 0 {
		return abi.Part{}, io.EOF
	}
	p := s.parts[0]
	s.parts = s.parts[1:]
	return p, nil
}

func (s *sliceStream) Close() error {
	if s.closed.CompareAndSwap(false, true) {
		s.m.closed.Add(1)
	}
	return nil
}

func readAll(t *testing.T, s driver.Stream) []abi.Part {
	t.Helper()
	defer s.Close()
	var out []abi.Part
	for {
		p, err := s.Recv()
		if err == io.EOF {
			return out
		}
		require.NoError(t, err)
		out = append(out, p)
	}
}

// TestStreamRefusalFailsOver: through the stream driver, with the refusal
// detector and the switch rule both Wasm plugins in the host (Go and C
// guests, guarded and trusted), a refusal on the first model fails over to
// the second before the caller sees a part, and the second model's answer
// reaches the caller complete and once; a divergent first answer passes
// untouched with no fail-over.
func TestStreamRefusalFailsOver(t *testing.T) {
	ctx := context.Background()
	for mode, rt := range runtimes(t) {
		rule, err := rt.Load(ctx, "errmatch", plugins.ErrMatch, host.WithConfig([]byte(
			`{"rules":[{"class":["refusal"],"switch":{"model":"q/b"}}]}`)))
		require.NoError(t, err)
		t.Cleanup(func() { _ = rule.Close(ctx) })
		for guest, wasm := range map[string][]byte{"go": plugintest.GoRef("refusal"), "c": plugins.Refusal} {
			detector, err := rt.Load(ctx, "refusal", wasm)
			require.NoError(t, err)
			t.Cleanup(func() { _ = detector.Close(ctx) })
			for _, tc := range []struct {
				name   string
				first  string
				failed bool
			}{
				{"refusal fails over", "I’m sorry, but I can’t help with that.", true},
				{"divergent answer passes untouched", "I'm sorry to hear that! Here is a plan.", false},
			} {
				t.Run(mode+"/"+guest+"/"+tc.name, func(t *testing.T) {
					a := &streamer{key: "p/a", parts: plugintest.TextStream(tc.first, 3)}
					b := &streamer{key: "q/b", parts: plugintest.TextStream("Here is the answer you asked for.", 5)}
					var switched []string
					r, err := driver.New(a, driver.WithModels(b), driver.WithRules(rule),
						driver.WithOnRetry(func(_ context.Context, info driver.RetryInfo) *driver.Overrides {
							switched = append(switched, info.Failed.Class.String()+"->"+info.Next.Key())
							return nil
						}))
					require.NoError(t, err)
					m, err := driver.NewRetryableModel(r, driver.WithTransforms(detector))
					require.NoError(t, err)
					s, err := m.Stream(ctx, &driver.Request{})
					require.NoError(t, err)
					got := readAll(t, s)
					if tc.failed {
						require.Equal(t, b.parts, got, "the second model's answer, complete and once")
						require.Equal(t, []string{"refusal->q/b"}, switched)
						require.EqualValues(t, 1, b.opened.Load())
					} else {
						require.Equal(t, a.parts, got, "the first answer, untouched")
						require.Empty(t, switched)
						require.Zero(t, b.opened.Load())
					}
					require.Equal(t, a.opened.Load(), a.closed.Load(), "every upstream closed")
					require.Equal(t, b.opened.Load(), b.closed.Load(), "every upstream closed")
				})
			}
		}
	}
}
