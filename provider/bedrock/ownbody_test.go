package bedrock

import (
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// closable is a request body whose reads fail once it is closed, as the
// SDK's is.
type closable struct {
	r      *strings.Reader
	closed bool
}

func (c *closable) Read(p []byte) (int, error) {
	if c.closed {
		return 0, errors.New("read on closed body")
	}
	return c.r.Read(p)
}

func (c *closable) Close() error { c.closed = true; return nil }

// The SDK closes the request body once the response is in, while the
// transport may still read it: the transport reads a copy, whole.
func TestOwnedBodyTransportReadsTheBodyAfterTheCallerClosedIt(t *testing.T) {
	sent := make(chan *http.Request, 1)
	rt := &ownedBody{base: roundTripFunc(func(r *http.Request) (*http.Response, error) {
		sent <- r // read later, after the caller closed its body
		return &http.Response{StatusCode: http.StatusOK, Header: http.Header{}, Body: http.NoBody}, nil
	})}
	body := &closable{r: strings.NewReader(`{"messages":[]}`)}
	req, err := http.NewRequest(http.MethodPost, "http://127.0.0.1:1/model/m/converse", body)
	require.NoError(t, err)
	resp, err := rt.RoundTrip(req)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	require.NoError(t, body.Close())
	b, err := io.ReadAll((<-sent).Body)
	require.NoError(t, err)
	require.JSONEq(t, `{"messages":[]}`, string(b))
}
