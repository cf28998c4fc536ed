package openai_test

import (
	"context"
	"net/http"
	"path/filepath"
	"testing"

	"github.com/retryhost/retryhost/abi"
	"github.com/retryhost/retryhost/driver"
	"github.com/retryhost/retryhost/provider/internal/wiretest"
	"github.com/retryhost/retryhost/provider/openai"
)

// FuzzStreams feeds arbitrary SSE bodies through the real SDK and both
// APIs' mappings, in memory. Whatever the body, the stream ends (with the
// finish last, or an error), never panics, and a clean end leaves no block
// open and no tool call without its start. Seeds: every wire transcript.
func FuzzStreams(f *testing.F) {
	wiretest.SeedSSE(f, filepath.Join("..", "..", "testdata", "wire", "openai"))
	f.Fuzz(func(t *testing.T, body []byte) {
		hc := &http.Client{Transport: wiretest.MemTransport{Body: body}}
		for _, api := range []openai.Option{openai.WithRawChunks(), openai.WithResponsesAPI()} {
			m, err := openai.New("m", openai.WithBaseURL("http://mem/v1"), openai.WithAPIKey("k"), openai.WithHTTPClient(hc), api)
			if err != nil {
				t.Fatal(err)
			}
			st, err := m.Stream(context.Background(), &driver.Request{})
			if err != nil {
				continue // an open error is an answer too
			}
			parts, err := wiretest.Collect(st, 1<<16)
			if err != nil {
				continue
			}
			if len(parts) == 0 || parts[len(parts)-1].Kind != abi.KindFinish {
				t.Fatalf("clean end without a finish last: %s", wiretest.Kinds(parts))
			}
			open := map[string]int{}
			started := map[string]bool{}
			for _, p := range parts {
				switch p.Kind {
				case abi.KindTextStart, abi.KindReasoningStart:
					open[p.Kind.String()+p.ID]++
				case abi.KindTextEnd:
					open["text-start"+p.ID]--
				case abi.KindReasoningEnd:
					open["reasoning-start"+p.ID]--
				case abi.KindToolInputStart:
					started[p.ID] = true
				case abi.KindToolCall:
					if !started[p.ID] {
						t.Fatalf("tool call %q without its start: %s", p.ID, wiretest.Kinds(parts))
					}
				}
			}
			for id, n := range open {
				if n != 0 {
					t.Fatalf("block %s open %d at the finish: %s", id, n, wiretest.Kinds(parts))
				}
			}
		}
	})
}
