package anthropic_test

import (
	"context"
	"net/http"
	"path/filepath"
	"testing"

	"github.com/retryhost/retryhost/abi"
	"github.com/retryhost/retryhost/driver"
	"github.com/retryhost/retryhost/provider/anthropic"
	"github.com/retryhost/retryhost/provider/internal/wiretest"
)

// FuzzStream feeds arbitrary SSE bodies through the real SDK and the
// adapter's mapping, in memory. Whatever the body, the stream ends (with
// the finish last, or an error), never panics, and a clean end leaves no
// block open and no tool call without its start. Seeds: every wire
// transcript.
func FuzzStream(f *testing.F) {
	wiretest.SeedSSE(f, filepath.Join("..", "..", "testdata", "wire", "anthropic"))
	f.Fuzz(func(t *testing.T, body []byte) {
		hc := &http.Client{Transport: wiretest.MemTransport{Body: body}}
		m, err := anthropic.New("m", anthropic.WithBaseURL("http://mem"), anthropic.WithAPIKey("k"), anthropic.WithHTTPClient(hc))
		if err != nil {
			t.Fatal(err)
		}
		st, err := m.Stream(context.Background(), &driver.Request{})
		if err != nil {
			return
		}
		parts, err := wiretest.Collect(st, 1<<16)
		if err != nil {
			return
		}
		if len(parts) == 0 || parts[len(parts)-1].Kind != abi.KindFinish {
			t.Fatalf("clean end without a finish last: %s", wiretest.Kinds(parts))
		}
		started := map[string]bool{}
		for _, p := range parts {
			switch p.Kind {
			case abi.KindToolInputStart:
				started[p.ID] = true
			case abi.KindToolCall:
				if !started[p.ID] {
					t.Fatalf("tool call %q without its start: %s", p.ID, wiretest.Kinds(parts))
				}
			}
		}
	})
}
