package openai

import (
	"context"
	"net/http"

	"github.com/openai/openai-go/v3/option"

	"github.com/retryhost/retryhost/provider/internal/adapter"
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
	return m.Send(ctx, http.MethodPost, path, body, h)
}

// Send is Post with any method, and a nil body for none: how a gateway
// forwards the calls on a stored response (GET, DELETE, POST …/cancel of
// responses/{id}) to the account that stores it. path may carry a query.
func (m *Model) Send(ctx context.Context, method, path string, body []byte, h http.Header) (*http.Response, error) {
	var raw, out *http.Response
	opts := append([]option.RequestOption{option.WithResponseInto(&raw)}, adapter.HeaderOptions(h, option.WithHeaderAdd)...)
	if body != nil {
		opts = append(opts, option.WithRequestBody("application/json", body))
	}
	err := m.client.Execute(ctx, method, path, nil, &out, opts...)
	return adapter.Posted(ctx, raw, out, err, m.openError)
}
