package anthropic

import (
	"context"
	"net/http"

	"github.com/anthropics/anthropic-sdk-go/v2/option"
)

// Post sends body, a JSON request of Anthropic's API, to path under the
// model's base URL (such as "v1/messages/count_tokens"), with the model's
// key, headers, anthropic-version and HTTP client, and returns the answer
// of a 2xx: the caller reads and closes its body. h's headers are added to
// the model's (a client's anthropic-beta). The body is sent as it is: its
// "model" member is the caller's to set (ModelID), and WithParam's fields
// are not added (they are the Messages requests').
//
// It is how a gateway forwards the endpoints the driver does not model
// (count_tokens), one attempt a call: the caller fails over.
//
// # Errors
//
// An error answer is a *driver.ProviderError, as a Stream that fails to
// open returns it; a transport failure is the adapter's, and the context's
// end its error.
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
		return nil, openError(ctx, err, raw)
	}
	if ctx.Err() != nil {
		_ = out.Body.Close()
		return nil, openError(ctx, ctx.Err(), nil)
	}
	return out, nil
}
