package adapter

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// isJSON takes JSON media types, in any case and with parameters, and
// nothing else; an event stream allocates nothing.
func TestIsJSON(t *testing.T) {
	for ct, want := range map[string]bool{
		"application/json":                 true,
		"Application/JSON; charset=utf-8":  true,
		" application/problem+json ":       true,
		"text/event-stream":                false,
		"text/event-stream; charset=utf-8": false,
		"application/jsonl":                false,
		"+json":                            false,
		"":                                 false,
	} {
		require.Equal(t, want, isJSON(ct), "%q", ct)
	}
	require.Zero(t, testing.AllocsPerRun(100, func() { isJSON("text/event-stream; charset=utf-8") }))
}

// BodyError takes an object with an error in it and nothing else.
func TestBodyErrorShapes(t *testing.T) {
	for _, tc := range []struct {
		body, typ, msg string
		none           bool
	}{
		{body: `{"error":{"message":"m","type":"server_error","code":null}}`, typ: "server_error", msg: "m"},
		{body: "\xEF\xBB\xBF {\"type\":\"error\",\"error\":{\"type\":\"api_error\",\"message\":\"m\"}}", typ: "api_error", msg: "m"},
		{body: `{"error":{"code":500}}`, typ: "500", msg: EmptyErrorEvent},
		{body: `{"error":"m"}`, msg: "m"},
		{body: `{"error":{}}`, none: true},
		{body: `{"error":null}`, none: true},
		{body: `{"error":3}`, none: true},
		{body: `{"id":"x"}`, none: true},
		{body: `[{"error":{"message":"m"}}]`, none: true},
		{body: `{"error":{"message":"m"}`, none: true},
		{body: ``, none: true},
	} {
		e := BodyError("p", []byte(tc.body))
		if tc.none {
			require.Nil(t, e, "%q", tc.body)
			continue
		}
		require.NotNil(t, e, "%q", tc.body)
		require.Equal(t, tc.typ, e.Type, "%q", tc.body)
		require.Equal(t, tc.msg, e.Message, "%q", tc.body)
		require.ErrorIs(t, e, ErrJSONBody)
	}
}

// JSONError reads at most MaxBody: a JSON body past it (an error object
// padded beyond the cap) is not taken for an error, and the reader after
// it gets every byte, the ones JSONError read first included.
func TestJSONErrorReadsAtMostMaxBody(t *testing.T) {
	body := `{"error":{"message":"m","pad":"` + strings.Repeat("x", MaxBody) + `"}}`
	resp := &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"application/json"}},
		Body: SSEBody(io.NopCloser(strings.NewReader(body)))}
	require.NoError(t, JSONError("p", resp))
	got, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, body, string(got))
	require.Nil(t, BodyError("p", []byte(body[:MaxBody])), "a cut object is no error")
}
