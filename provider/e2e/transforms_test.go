package e2e_test

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	oai "github.com/openai/openai-go/v3"
	"github.com/stretchr/testify/require"

	"github.com/retryhost/retryhost/abi"
	"github.com/retryhost/retryhost/driver"
	"github.com/retryhost/retryhost/host"
	"github.com/retryhost/retryhost/provider/internal/wiretest"
	"github.com/retryhost/retryhost/provider/openai"
)

// hostFixture loads one of host/testdata's transforms through the host,
// under each of wazero's engines.
func hostFixture(t *testing.T, name string, opts ...host.Option) driver.Transformer {
	t.Helper()
	ctx := context.Background()
	wasm, err := os.ReadFile(filepath.Join("..", "..", "host", "testdata", name+".wasm"))
	require.NoError(t, err)
	rt, err := host.New(ctx, append([]host.Option{host.WithCallTimeout(10 * time.Second)}, opts...)...)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, rt.Close(ctx)) })
	p, err := rt.Load(ctx, name, wasm)
	require.NoError(t, err)
	return p
}

func engines(t *testing.T, f func(t *testing.T, opts ...host.Option)) {
	t.Run("compiler", func(t *testing.T) { f(t) })
	t.Run("interpreter", func(t *testing.T) { f(t, host.WithInterpreter()) })
}

// single is a retryable model of one model with the stream options sopts.
func single(t *testing.T, m driver.Model, sopts ...driver.StreamOption) *driver.RetryableModel {
	t.Helper()
	r, err := driver.New(m)
	require.NoError(t, err)
	rm, err := driver.NewRetryableModel(r, sopts...)
	require.NoError(t, err)
	return rm
}

// streamParts streams a request through rm and returns every part.
func streamParts(t *testing.T, rm *driver.RetryableModel) []abi.Part {
	t.Helper()
	s, err := rm.Stream(t.Context(), request())
	require.NoError(t, err)
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

// A transform that lets the finish go and adds text at the end of the
// stream (REPLACE from retryhost_end) gets its text in before the finish:
// the finish is the stream's last part, whatever the guest answers.
func TestFinishIsLastWhenATransformAddsTextAtTheEnd(t *testing.T) {
	engines(t, func(t *testing.T, opts ...host.Option) {
		srv := wiretest.Serve(t, transcript(t, "openai", "text"))
		rm := single(t, openaiModel(t, srv.URL, srv.Client()), driver.WithTransforms(hostFixture(t, "endreplace", opts...)))
		parts := streamParts(t, rm)
		require.NotEmpty(t, parts)
		require.Equal(t, abi.KindFinish, parts[len(parts)-1].Kind, "the finish is last")
		var text strings.Builder
		finishes := 0
		for _, p := range parts {
			text.WriteString(p.Delta)
			if p.Kind == abi.KindFinish {
				finishes++
			}
		}
		require.Equal(t, 1, finishes)
		require.True(t, strings.HasSuffix(text.String(), "LATE"), "the text added at the end: %q", text.String())
	})
}

// A transform that rewrites every text delta (upper.wasm) leaves none of
// the provider's raw chunks of the original text to the caller: a raw
// chunk goes where the text it was decoded with goes, and is discarded
// with it.
func TestRawChunkOfRewrittenTextNeverReachesTheCaller(t *testing.T) {
	engines(t, func(t *testing.T, opts ...host.Option) {
		tr := transcript(t, "openai", "text")
		srv := wiretest.Serve(t, tr)
		m, err := openai.New("gpt-4o-mini", openai.WithBaseURL(srv.URL+"/v1"), openai.WithAPIKey("sk-test"),
			openai.WithHTTPClient(srv.Client()), openai.WithRawChunks())
		require.NoError(t, err)
		rm := single(t, m, driver.WithTransforms(hostFixture(t, "upper", opts...)))
		parts := streamParts(t, rm)
		var text strings.Builder
		raws := 0
		for _, p := range parts {
			text.WriteString(p.Delta)
			if p.Kind != abi.KindRaw {
				continue
			}
			raws++
			var content string
			switch c := p.Raw.(type) {
			case oai.ChatCompletionChunk:
				for _, ch := range c.Choices {
					content += ch.Delta.Content
				}
			case openai.ChunkFields:
				content = c.Content
			default:
				t.Fatalf("raw part of type %T", p.Raw)
			}
			require.Empty(t, content, "a raw chunk of the text the transform rewrote reached the caller")
		}
		require.Positive(t, raws, "the chunks without text still come through")
		require.Equal(t, strings.ToUpper(openaiText(t, tr)), text.String())
	})
}
