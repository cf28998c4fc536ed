package gateway

import (
	"context"
	"net/http"
	"testing"

	aoption "github.com/anthropics/anthropic-sdk-go/v2/option"
	oai "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/stretchr/testify/require"
)

// A 4xx that is not the client's fault (the model is not on that
// upstream, the region or the key is refused) moves a request on to its
// own fallbacks, through real clients on both doors; the context-length
// 400, which is the request's, is the client's answer.
func TestRequestFallbacksFailOverUpstream4xx(t *testing.T) {
	notYours := []struct {
		name string
		up   act
	}{
		{"404 model not found", act{status: 404, body: `{"error":{"message":"The model does not exist","type":"invalid_request_error","code":"model_not_found"}}`}},
		{"403 region", act{status: 403, body: `{"error":{"message":"Country, region, or territory not supported","type":"request_forbidden","code":"unsupported_country_region_territory"}}`}},
		{"401 the gateway's key", act{status: 401, body: `{"error":{"message":"Incorrect API key provided","type":"invalid_request_error","code":"invalid_api_key"}}`}},
	}
	for _, c := range notYours {
		t.Run(c.name, func(t *testing.T) {
			r := newRig(t, `"rules": []`)
			r.up["primary"].play(c.up)
			r.up["backup"].play(act{chunks: []string{"Paris."}})
			var raw *http.Response
			cc, err := r.client.Chat.Completions.New(context.Background(), params("primary"),
				option.WithJSONSet("fallbacks", []string{"backup"}), option.WithResponseInto(&raw))
			require.NoError(t, err)
			require.Equal(t, "Paris.", cc.Choices[0].Message.Content)
			require.Equal(t, "backup", raw.Header.Get("X-Retryhost-Model"))
			require.Equal(t, "2", raw.Header.Get("X-Retryhost-Attempts"))

			r.up["primary"].play(c.up)
			r.up["backup"].play(act{chunks: []string{"Paris."}})
			got := r.anthStream(msgParams("primary"), aoption.WithJSONSet("fallbacks", []string{"backup"}), aoption.WithResponseInto(&raw))
			require.NoError(t, got.err)
			require.Equal(t, "Paris.", got.text)
			require.Equal(t, "backup", raw.Header.Get("X-Retryhost-Model"))
		})
	}
	t.Run("context length 400 is the client's", func(t *testing.T) {
		r := newRig(t, `"rules": []`)
		r.up["primary"].play(act{status: 400, body: `{"error":{"message":"This model's maximum context length is 128000 tokens","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}`})
		r.up["backup"].play(act{chunks: []string{"Paris."}})
		_, err := r.client.Chat.Completions.New(context.Background(), params("primary"), option.WithJSONSet("fallbacks", []string{"backup"}))
		var apiErr *oai.Error
		require.ErrorAs(t, err, &apiErr)
		require.Equal(t, http.StatusBadRequest, apiErr.StatusCode)
		require.Equal(t, "context_length_exceeded", apiErr.Code)
		require.Empty(t, r.up["backup"].requests(), "the request itself is too long: no fallback can take it")
	})
}
