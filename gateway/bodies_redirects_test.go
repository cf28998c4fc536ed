package gateway

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/stretchr/testify/require"
)

// TestUnreadableBodyIsABadRequest: a body that cannot be read whole for a
// reason of its own (chunked framing that is not chunked framing, a
// connection that ends before the declared length while the client still
// reads) is a 400 in the door's shape. Nothing was written, so net/http
// sent the client, still there, a "200 OK" with an empty body (an answer
// that was no answer), logged as 499 client_closed. A body cut by the end
// of the connection is still logged 499: most such clients are gone.
func TestUnreadableBodyIsABadRequest(t *testing.T) {
	r := newRig(t, "")
	const chatHead = "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\n"
	const msgsHead = "POST /v1/messages HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\nAnthropic-Version: 2023-06-01\r\n"
	records := func() []map[string]any {
		if strings.TrimSpace(r.logs.String()) == "" {
			return nil
		}
		return accessRecords(t, r.logs.String())
	}
	for _, tc := range []struct {
		name, req string
		halfClose bool // the client closes its side after the request: it still reads
		anthropic bool
		// logged: the access log's status and outcome (the connection
		// ended: most such clients are gone)
		logged  int
		outcome string
	}{
		{name: "chat, a chunk size that is not hex", req: chatHead + "Transfer-Encoding: chunked\r\n\r\n8\r\n{\"model\"\r\nZZ\r\n"},
		{name: "chat, a chunk longer than its size", req: chatHead + "Transfer-Encoding: chunked\r\n\r\n2\r\n{\"model\"\r\n0\r\n\r\n"},
		{name: "chat, cut before its Content-Length", req: chatHead + "Content-Length: 100\r\n\r\n{\"model\":", halfClose: true, logged: 499, outcome: "client_closed"},
		{name: "messages, a chunk size that is not hex", req: msgsHead + "Transfer-Encoding: chunked\r\n\r\nZZ\r\n", anthropic: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := len(records())
			conn, err := net.Dial("tcp", r.srv.Listener.Addr().String())
			require.NoError(t, err)
			defer conn.Close()
			_, err = io.WriteString(conn, tc.req)
			require.NoError(t, err)
			if tc.halfClose {
				require.NoError(t, conn.(*net.TCPConn).CloseWrite())
			}
			require.NoError(t, conn.SetReadDeadline(time.Now().Add(10*time.Second)))
			resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
			require.NoError(t, err)
			body, err := io.ReadAll(resp.Body)
			require.NoError(t, err)
			resp.Body.Close()
			require.Equal(t, http.StatusBadRequest, resp.StatusCode, "body: %q", body)
			var e struct {
				Type  string `json:"type"`
				Error struct {
					Type    string `json:"type"`
					Code    string `json:"code"`
					Message string `json:"message"`
				} `json:"error"`
			}
			require.NoError(t, json.Unmarshal(body, &e), "body: %q", body)
			require.Equal(t, "invalid_request_error", e.Error.Type)
			require.Contains(t, e.Error.Message, "body")
			if tc.anthropic {
				require.Equal(t, "error", e.Type)
			} else {
				require.Equal(t, "invalid_body", e.Error.Code)
			}
			require.Eventually(t, func() bool { return len(records()) == before+1 }, 5*time.Second, 5*time.Millisecond)
			rec := records()[before]
			if tc.logged == 0 {
				tc.logged, tc.outcome = http.StatusBadRequest, "client_error"
			}
			require.EqualValues(t, tc.logged, rec["status"])
			require.Equal(t, tc.outcome, rec["outcome"])
		})
	}
	for _, u := range r.up {
		require.Empty(t, u.requests())
	}
	require.Empty(t, r.gw.sem)
	r.healthy()
}

// TestUpstreamRedirectStaysInItsOrigin: an upstream's redirect is followed
// only within the origin (scheme, host and port) the request went to. An
// Anthropic upstream's 307 elsewhere was followed (anthropic-sdk-go has no
// origin rule; provider/anthropic now has adapter.SameOriginRedirects, as
// openai-go and the openai direct path have theirs): the prompt went to the
// new address, and to another port of the same host with the gateway's
// upstream key (net/http strips Authorization only for another host name).
// A refused redirect is the attempt's failure, which the rules fail over.
func TestUpstreamRedirectStaysInItsOrigin(t *testing.T) {
	for _, tc := range []struct {
		name     string
		status   int
		sameHost bool // the other origin is another port of 127.0.0.1 (else "localhost")
	}{
		{name: "307, another port of the same host", status: http.StatusTemporaryRedirect, sameHost: true},
		{name: "308, another host name", status: http.StatusPermanentRedirect},
		{name: "302, another port of the same host", status: http.StatusFound, sameHost: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRigOf(t, "", []string{"primary", "backup", "third"})
			elsewhere := r.up["third"].srv.URL
			if !tc.sameHost {
				elsewhere = strings.Replace(elsewhere, "127.0.0.1", "localhost", 1)
			}
			r.up["primary"].play(act{status: tc.status, header: http.Header{"Location": {elsewhere + "/v1/messages"}}})
			r.up["backup"].play(act{chunks: []string{"from", " backup"}})
			got := r.anthStream(anthropic.MessageNewParams{Model: "primary", MaxTokens: 64,
				Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("hi"))}})
			require.NoError(t, got.err)
			require.Equal(t, "from backup", got.text)
			require.Empty(t, r.up["third"].requests(), "the redirect left the upstream's origin")
			require.Len(t, r.up["primary"].requests(), 1)
		})
	}
	t.Run("within the origin", func(t *testing.T) {
		r := newRigOf(t, "", []string{"primary", "backup", "third"})
		r.up["primary"].play(act{status: http.StatusTemporaryRedirect, header: http.Header{"Location": {r.up["primary"].srv.URL + "/moved/v1/messages"}}},
			act{chunks: []string{"moved"}})
		got := r.anthStream(anthropic.MessageNewParams{Model: "primary", MaxTokens: 64,
			Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("hi"))}})
		require.NoError(t, got.err)
		require.Equal(t, "moved", got.text)
		hits := r.up["primary"].requests()
		require.Len(t, hits, 2)
		require.Equal(t, "/moved/v1/messages", hits[1].path)
		require.Empty(t, r.up["backup"].requests())
	})
}

// A compressed request body is a 415 naming its Content-Encoding, on both
// doors, and reaches no upstream: read as JSON it was a 400 about an
// "invalid character '\x1f'". "identity" is no encoding.
func TestCompressedBodyIsUnsupported(t *testing.T) {
	r := newRig(t, "")
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	_, _ = io.WriteString(zw, `{"model":"primary","messages":[{"role":"user","content":"hi"}]}`)
	require.NoError(t, zw.Close())
	for _, c := range []struct{ path, errType string }{
		{"/v1/chat/completions", `"type":"invalid_request_error"`},
		{"/v1/messages", `"type":"invalid_request_error"`},
	} {
		resp, body := r.rawPost(c.path, gz.String(), "Content-Encoding", "gzip", "Anthropic-Version", "2023-06-01")
		require.Equal(t, http.StatusUnsupportedMediaType, resp.StatusCode, body)
		require.Contains(t, body, `Content-Encoding \"gzip\" is not supported`)
		require.Contains(t, body, c.errType)
	}
	require.Empty(t, r.up["primary"].requests())
	resp, body := r.rawPost("/v1/chat/completions", `{"model":"primary","messages":[{"role":"user","content":"hi"}]}`, "Content-Encoding", "identity")
	require.Equal(t, http.StatusOK, resp.StatusCode, body)
	r.healthy()
}
