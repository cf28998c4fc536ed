package bedrock

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"

	"github.com/aws/smithy-go"

	"github.com/retryhost/retryhost/abi"
	"github.com/retryhost/retryhost/driver"
	"github.com/retryhost/retryhost/provider/internal/adapter"
)

// ownBody returns a copy of hc whose transport (hc's, or
// http.DefaultTransport when it has none) sends a copy of the request body
// the SDK cannot close.
func ownBody(hc *http.Client) *http.Client {
	c := *hc
	base := hc.Transport
	if base == nil {
		base = http.DefaultTransport
	}
	c.Transport = &ownedBody{base: base}
	return &c
}

// ownedBody is the transport ownBody sets.
type ownedBody struct{ base http.RoundTripper }

func (t *ownedBody) RoundTrip(req *http.Request) (*http.Response, error) {
	// The SDK closes the request body as soon as the response is in, and
	// the transport may still be reading it then (the one byte past
	// Content-Length it reads to check the length): its read fails, it
	// closes the connection, and the response body being read fails with
	// "use of closed network connection". The transport gets a copy the
	// SDK cannot close; request bodies are small JSON.
	if req.Body != nil && req.Body != http.NoBody {
		b, err := io.ReadAll(req.Body)
		_ = req.Body.Close()
		if err != nil {
			return nil, err
		}
		req = req.Clone(req.Context())
		req.Body = io.NopCloser(bytes.NewReader(b))
		req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil }
	}
	return t.base.RoundTrip(req)
}

// callError turns the SDK's error for a call into the driver's.
func (m *Model) callError(ctx context.Context, rec *adapter.Record, err error) error {
	if ctx.Err() != nil {
		return adapter.CtxError(ctx)
	}
	var ae smithy.APIError
	if errors.As(err, &ae) && rec.Status >= 400 {
		pe := adapter.HTTPError(m.provider, rec.Status, rec.Header, rec.Body, ae.ErrorCode(), "", ae.ErrorMessage(), err)
		pe.Class, pe.Retryable = classify(rec.Status, ae.ErrorCode(), ae.ErrorMessage())
		return pe
	}
	var pe *driver.ProviderError
	if errors.As(err, &pe) {
		return pe
	}
	return adapter.TransportError(ctx, m.provider, false, err)
}

// classify maps a Bedrock exception (its name, the HTTP status when it
// came as a response, its message) to an error class and whether waiting
// and asking again may succeed. The name wins over the status.
func classify(status int, name, msg string) (abi.ErrorClass, bool) {
	switch name {
	case "ThrottlingException", "ServiceQuotaExceededException":
		return abi.ClassRateLimit, true
	case "ServiceUnavailableException", "ModelNotReadyException":
		return abi.ClassOverloaded, true
	case "InternalServerException", "ModelStreamErrorException", "ModelTimeoutException", "ModelErrorException":
		return abi.ClassServer, true
	case "AccessDeniedException", "UnrecognizedClientException", "InvalidSignatureException",
		"ExpiredTokenException", "MissingAuthenticationTokenException", "IncompleteSignatureException":
		return abi.ClassAuth, false
	case "ValidationException":
		if contextLength(msg) {
			return abi.ClassContextLength, false
		}
		return abi.ClassClient, false
	case "ResourceNotFoundException", "ConflictException":
		return abi.ClassClient, false
	}
	c := adapter.Classify(status, "", "", msg)
	if status == 0 && c == abi.ClassUnknown {
		c = abi.ClassServer // an exception in a stream the SDK does not know
	}
	return c, c == abi.ClassRateLimit || c == abi.ClassOverloaded || c == abi.ClassServer
}

// contextLength tells Bedrock's words for a prompt that does not fit
// ("Input is too long for requested model.", "prompt is too long: 210000
// tokens > 200000 maximum", "…exceeds the context window…").
func contextLength(msg string) bool {
	m := strings.ToLower(msg)
	for _, s := range [...]string{"too long", "context window", "context length", "maximum context", "too many input tokens"} {
		if strings.Contains(m, s) {
			return true
		}
	}
	return false
}

// streamError maps an error met inside a stream: an exception event (the
// service's) or the transport's.
func streamError(prov string, err error) error {
	var ae smithy.APIError
	if !errors.As(err, &ae) {
		return err
	}
	raw, _ := json.Marshal(map[string]string{"__type": ae.ErrorCode(), "message": ae.ErrorMessage()})
	pe := adapter.EventError(prov, ae.ErrorCode(), "", ae.ErrorMessage(), raw, err)
	pe.Class, pe.Retryable = classify(0, ae.ErrorCode(), ae.ErrorMessage())
	return pe
}

// blocked is the error of an answer withheld before any content of the
// model's: a guardrail's intervention, or the model's content filter. It
// is classed ClassRefusal and wraps an *abi.RefusalError, as a declared
// refusal is, so the rules that fail a refusal over to another model
// cover it.
func blocked(prov, reason string) *driver.ProviderError {
	pe := adapter.Refusal(prov, reason, "the model's answer was blocked: "+reason)
	pe.Type = reason
	return pe
}
