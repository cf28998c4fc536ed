package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/retryhost/retryhost/internal/testkit"
)

// geminiUpstream answers every call with the SSE events of a recorded
// Gemini transcript.
func geminiUpstream(t *testing.T, transcript string) *httptest.Server {
	t.Helper()
	body := geminiSSE(t, transcript)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = w.Write([]byte(body))
	}))
	t.Cleanup(srv.Close)
	return srv
}

// geminiSSE is the SSE body of a recorded Gemini transcript.
func geminiSSE(t *testing.T, transcript string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "testdata", "wire", "gemini", transcript+".json"))
	require.NoError(t, err)
	var tr struct {
		Events []struct {
			Data json.RawMessage `json:"data"`
		} `json:"events"`
	}
	require.NoError(t, json.Unmarshal(b, &tr))
	var body strings.Builder
	for _, e := range tr.Events {
		var c bytes.Buffer
		require.NoError(t, json.Compact(&c, e.Data))
		fmt.Fprintf(&body, "data: %s\r\n\r\n", c.String())
	}
	return body.String()
}

// geminiRig serves a policy whose route name is a Gemini model answering
// transcript, beside the OpenAI-compatible primary and backup.
func geminiRig(t *testing.T, name, transcript string) *rig {
	t.Helper()
	r := &rig{t: t, up: map[string]*upstream{}, logs: &testkit.LogBuffer{}}
	var models []string
	for _, n := range []string{"primary", "backup"} {
		if n == name {
			models = append(models, fmt.Sprintf(`{"name": %q, "provider": "gemini", "model": "gemini-2.5-flash", "base_url": %q, "api_key_env": "UPSTREAM_KEY"}`,
				n, geminiUpstream(t, transcript).URL))
			continue
		}
		u := newUpstream(n)
		r.up[n] = u
		models = append(models, fmt.Sprintf(`{"name": %q, "provider": "openai", "model": "up-%s", "base_url": %q, "api_key_env": "UPSTREAM_KEY"}`, n, n, u.url()))
	}
	r.serve(fmt.Sprintf(`{"models": [%s], %s}`, strings.Join(models, ", "), defaultRules))
	return r
}

// A Gemini model whose answer is withheld for safety fails over, as a
// refusal, to an OpenAI-compatible model, for an OpenAI client.
func TestGeminiSafetyBlockFailsOverToOpenAI(t *testing.T) {
	r := geminiRig(t, "primary", "safety")
	r.up["backup"].play(act{chunks: []string{"Paris", "."}})
	got := r.stream("primary")
	require.NoError(t, got.err)
	require.Equal(t, "Paris.", got.text)
	require.Equal(t, map[string]bool{"backup": true}, got.models)
}

// An OpenAI-compatible model's overload fails over to a Gemini model, for
// an OpenAI client and for an Anthropic one.
func TestOpenAIFailsOverToGemini(t *testing.T) {
	r := geminiRig(t, "backup", "text")
	r.up["primary"].play(act{status: 503})
	got := r.stream("primary")
	require.NoError(t, got.err)
	require.Equal(t, "Hello, world.", got.text)
	require.Equal(t, map[string]bool{"backup": true}, got.models)
	require.Equal(t, "stop", got.finish)

	r.up["primary"].play(act{status: 503})
	m, err := r.anth.Messages.New(context.Background(), msgParams("primary"))
	require.NoError(t, err)
	require.Equal(t, "backup", string(m.Model))
	require.Equal(t, "Hello, world.", m.Content[0].Text)
}
