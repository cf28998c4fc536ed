package anthropic_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/retryhost/retryhost/abi"
	"github.com/retryhost/retryhost/driver"
	"github.com/retryhost/retryhost/provider/anthropic"
)

// A redirect is followed only within the base URL's origin (scheme, host
// and port). anthropic-sdk-go follows any, and net/http keeps x-api-key
// across hosts (it drops only Authorization, and only for another host
// name): a provider's 307 to another port received the prompt and the key.
func TestRedirectStaysInTheOrigin(t *testing.T) {
	const answer = `{"id":"msg_1","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[{"type":"text","text":"moved"}],"stop_reason":"end_turn","usage":{"input_tokens":1,"output_tokens":1}}`
	var elsewhereHits atomic.Int32
	elsewhere := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		elsewhereHits.Add(1)
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, answer)
	}))
	defer elsewhere.Close()
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/v1/messages":
			to := elsewhere.URL + "/v1/messages"
			if r.Header.Get("X-Stay") != "" {
				to = "/moved/v1/messages"
			}
			http.Redirect(w, r, to, http.StatusTemporaryRedirect)
		case "/moved/v1/messages":
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, answer)
		}
	}))
	defer origin.Close()

	for _, c := range []struct {
		name string
		opts []anthropic.Option
	}{
		{"the SDK's client", nil},
		{"a client of the caller's", []anthropic.Option{anthropic.WithHTTPClient(&http.Client{})}},
		{"a client of the caller's with a redirect rule", []anthropic.Option{anthropic.WithHTTPClient(&http.Client{
			CheckRedirect: func(*http.Request, []*http.Request) error { return nil }})}},
	} {
		t.Run(c.name, func(t *testing.T) {
			elsewhereHits.Store(0)
			opts := append([]anthropic.Option{anthropic.WithBaseURL(origin.URL), anthropic.WithAPIKey("sk-ant-secret"), anthropic.WithMaxRetries(0)}, c.opts...)
			m, err := anthropic.New("claude-sonnet-4-5", opts...)
			require.NoError(t, err)
			_, err = m.Generate(context.Background(), request())
			require.Error(t, err)
			require.Contains(t, err.Error(), "redirect to http://"+strings.TrimPrefix(elsewhere.URL, "http://")+" refused")
			var pe *driver.ProviderError
			require.True(t, errors.As(err, &pe), "%v", err)
			require.Equal(t, abi.ClassNetwork, pe.Class, "a refused redirect is a connection's failure")
			require.Zero(t, elsewhereHits.Load(), "the prompt and the key left the origin")

			m, err = anthropic.New("claude-sonnet-4-5", append(opts, anthropic.WithHeader("X-Stay", "1"))...)
			require.NoError(t, err)
			resp, err := m.Generate(context.Background(), request())
			require.NoError(t, err, "a redirect within the origin is followed")
			require.Equal(t, "moved", resp.Text())
		})
	}
}
