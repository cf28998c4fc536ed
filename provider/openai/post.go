package openai

import (
	"context"
	"net/http"

	"github.com/openai/openai-go/v3/option"
)

// Post sends body, a JSON request of the model's API, to path under the
// model's base URL ("embeddings", "responses"; on Azure, under the
// deployment's path with its api-version), with the model's key, headers
// and HTTP client, and returns the answer of a 2xx: the caller reads and
// closes its body. h's headers are added to the model's. The body is sent
// as it is: its "model" member is the caller's to set (ModelID), and
// WithParam's fields are not added (they are the chat requests').
//
// It is how a gateway forwards the endpoints the driver does not model
// (embeddings, a stateful Responses request), one attempt a call: the
// caller fails over.
//
// # Errors
//
// An error answer is a *driver.ProviderError, as a Stream that fails to
// open returns it (its Class, Retryable and Header set alike); a transport
// failure is the adapter's, and the context's end its error.
func (m *Model) Post(ctx context.Context, path string, body []byte, h http.Header) (*http.Response, error) {
	var raw *http.Response
	opts := make([]option.RequestOption, 0, 2+len(h))
	opts = append(opts, option.WithRequestBody("application/json", body), option.WithResponseInto(&raw))
	for k, vs := range h {
		for _, v := range vs {
			opts = append(opts, option.WithHeaderAdd(k, v))
		}
	}
	var out *http.Response
	if err := m.client.Post(ctx, path, nil, &out, opts...); err != nil {
		if out != nil && out.Body != nil && out.StatusCode < 400 {
			_ = out.Body.Close()
		}
		return nil, m.openError(ctx, err, raw)
	}
	if ctx.Err() != nil {
		_ = out.Body.Close()
		return nil, m.openError(ctx, ctx.Err(), nil)
	}
	return out, nil
}
