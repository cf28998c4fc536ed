package adapter

import (
	"context"
	"net/http"
)

// HeaderOptions returns an SDK request option a value of h, each made by
// add (the SDK's WithHeaderAdd), so h's headers are added to the model's.
func HeaderOptions[O any](h http.Header, add func(k, v string) O) []O {
	opts := make([]O, 0, len(h))
	for k, vs := range h {
		for _, v := range vs {
			opts = append(opts, add(k, v))
		}
	}
	return opts
}

// Posted settles the answer of an adapter's Post, an SDK's raw POST whose
// result is the *http.Response itself (out), with raw the response the SDK
// saw and err its error. On err it closes the body of a 2xx or 3xx answer
// the SDK left open and returns fail(ctx, err, raw); past the context's end
// it closes the body and returns fail(ctx, ctx.Err(), nil). Otherwise it
// returns out, whose body the caller reads and closes.
func Posted(ctx context.Context, raw, out *http.Response, err error, fail func(context.Context, error, *http.Response) error) (*http.Response, error) {
	if err != nil {
		if out != nil && out.Body != nil && out.StatusCode < 400 {
			_ = out.Body.Close()
		}
		return nil, fail(ctx, err, raw)
	}
	if ctx.Err() != nil {
		_ = out.Body.Close()
		return nil, fail(ctx, ctx.Err(), nil)
	}
	return out, nil
}
