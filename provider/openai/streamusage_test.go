package openai_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/retryhost/retryhost/provider/internal/wiretest"
	"github.com/retryhost/retryhost/provider/openai"
)

// toServer sends every request to srv, whatever the host the model names.
type toServer struct {
	srv *wiretest.Server
	rt  http.RoundTripper
}

func (t toServer) RoundTrip(r *http.Request) (*http.Response, error) {
	u, _ := url.Parse(t.srv.URL)
	r = r.Clone(r.Context())
	r.URL.Scheme, r.URL.Host = u.Scheme, u.Host
	return t.rt.RoundTrip(r)
}

// A stream asks for the usage chunk only where the server is known to
// accept stream_options (OpenAI's own host, Azure), where WithStreamUsage
// says so, or where the request's entry carries it (a gateway's client
// that sent it): a compatible server that refuses the field gets none.
func TestStreamOptionsOnlyWhereKnownOrAsked(t *testing.T) {
	srv := wiretest.ServeFile(t, wire("text"))
	via := &http.Client{Transport: toServer{srv: srv, rt: srv.Client().Transport}}
	cases := []struct {
		name  string
		opts  []openai.Option
		entry map[string]any
		want  any // the body's stream_options; nil: absent
	}{
		{name: "a compatible server: none", opts: []openai.Option{openai.WithBaseURL(srv.URL + "/v1")}},
		{name: "openai's own host", opts: []openai.Option{openai.WithBaseURL("https://api.openai.com/v1"), openai.WithHTTPClient(via)},
			want: map[string]any{"include_usage": true}},
		{name: "azure", opts: []openai.Option{openai.WithAzure("https://x.openai.azure.com", "d", "2024-10-21"), openai.WithHTTPClient(via)},
			want: map[string]any{"include_usage": true}},
		{name: "WithStreamUsage(true)", opts: []openai.Option{openai.WithBaseURL(srv.URL + "/v1"), openai.WithStreamUsage(true)},
			want: map[string]any{"include_usage": true}},
		{name: "WithStreamUsage(false) on openai", opts: []openai.Option{openai.WithBaseURL("https://api.openai.com/v1"), openai.WithHTTPClient(via), openai.WithStreamUsage(false)}},
		{name: "the request's entry asks", opts: []openai.Option{openai.WithBaseURL(srv.URL + "/v1")},
			entry: map[string]any{"stream_options": json.RawMessage(`{"include_usage":true}`)}, want: map[string]any{"include_usage": true}},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			opts := append([]openai.Option{openai.WithAPIKey("sk-test"), openai.WithHTTPClient(srv.Client())}, c.opts...)
			m, err := openai.New("gpt-4o-mini", opts...)
			require.NoError(t, err)
			req := request()
			if c.entry != nil {
				req.ProviderOptions = map[string]any{m.Provider(): c.entry}
			}
			st, err := m.Stream(context.Background(), req)
			require.NoError(t, err)
			_, err = wiretest.Collect(st, 100)
			require.NoError(t, err)
			got := srv.Requests()[i]
			var body map[string]any
			require.NoError(t, json.Unmarshal(got.Body, &body))
			require.Equal(t, c.want, body["stream_options"])
		})
	}
}
