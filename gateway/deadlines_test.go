package gateway

import (
	"bufio"
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestHeaderTimeoutIsTheUpstreamsFailure: an upstream that sends no
// response headers within WithUpstreamHeaderTimeout fails its attempt as a
// cut connection of that upstream: class network, the provider and the URL
// named in the message the client gets, with the URL, and a rule on "network" switching
// over. Ending the attempt (rather than a request context of the
// transport's own) made the failure the bare timeout, class timeout, with
// no upstream named: a policy whose rules switch on network errors no
// longer failed over, and a single attempt's access log said class unknown.
func TestHeaderTimeoutIsTheUpstreamsFailure(t *testing.T) {
	for _, anthropic := range []bool{false, true} {
		name, prov := "openai", "openai"
		var anth []string
		if anthropic {
			name, prov, anth = "anthropic", "anthropic", []string{"primary", "backup"}
		}
		t.Run(name, func(t *testing.T) {
			r := newRigOf(t, `"rules": [{"when": {"class": ["network"]}, "action": "switch", "model": "backup"}]`, anth,
				WithUpstreamHeaderTimeout(200*time.Millisecond))
			post := func(model string) (int, string) {
				req, err := http.NewRequest(http.MethodPost, r.srv.URL+"/v1/chat/completions",
					strings.NewReader(`{"model":"`+model+`","stream":true,"messages":[{"role":"user","content":"hi"}]}`))
				require.NoError(t, err)
				resp, err := r.hc.Do(req)
				require.NoError(t, err)
				defer resp.Body.Close()
				b, err := io.ReadAll(resp.Body)
				require.NoError(t, err)
				return resp.StatusCode, string(b)
			}

			// The rule on network errors switches to the backup.
			r.up["primary"].play(act{holdFor: 3 * time.Second, chunks: []string{"late"}})
			r.up["backup"].play(act{chunks: []string{"on time"}})
			status, body := post("primary")
			require.Equal(t, http.StatusOK, status, body)
			require.Contains(t, body, "on time")

			// Alone, the client is told which upstream did not answer.
			r.up["backup"].play(act{holdFor: 3 * time.Second, chunks: []string{"late"}})
			status, body = post("backup")
			require.Equal(t, http.StatusBadGateway, status, body)
			require.Contains(t, body, prov+": stream interrupted: ")
			require.Contains(t, body, "net/http: timeout awaiting response headers")
			require.Contains(t, body, `Post \"`+r.up["backup"].srv.URL)
			require.Eventually(t, func() bool { return len(accessRecords(t, r.logs.String())) == 2 }, 10*time.Second, time.Millisecond)
			recs := accessRecords(t, r.logs.String())
			require.Equal(t, "network", recs[1]["error_class"], recs[1])
		})
	}
}

// heldLog is a log handler that holds each access-log record until
// release is closed: the request's handler has not returned by then.
type heldLog struct {
	slog.Handler
	release chan struct{}
}

func (h heldLog) Handle(ctx context.Context, r slog.Record) error {
	if r.Message == "request" {
		<-h.release
	}
	return h.Handler.Handle(ctx, r)
}

// TestShutdownReturnsWithStreamsEndsSent: once Shutdown has returned, a
// stream that finished during the drain has its end ([DONE]) on the wire,
// as the package example relies on (it does not wait for the
// http.Server's own Shutdown). The end went out unflushed, for net/http to
// write after the handler returned; Shutdown returns as the request leaves,
// before that, and a process that exits then (or a server Close) cut the
// [DONE]. The access log held here widens that window to make it certain.
func TestShutdownReturnsWithStreamsEndsSent(t *testing.T) {
	release := make(chan struct{})
	r := newRig(t, "", WithLogger(slog.New(heldLog{Handler: slog.NewJSONHandler(io.Discard, nil), release: release})))
	defer func() {
		select {
		case <-release:
		default:
			close(release)
		}
	}()
	atEnd := make(chan struct{})
	r.up["primary"].play(act{chunks: []string{"Par", "is"}, afterText: atEnd})
	req, err := http.NewRequest(http.MethodPost, r.srv.URL+"/v1/chat/completions", strings.NewReader(streamBody("primary")))
	require.NoError(t, err)
	resp, err := r.hc.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	br := bufio.NewReader(resp.Body)
	for { // the first content is out: the stream is in flight
		line, err := br.ReadString('\n')
		require.NoError(t, err)
		if strings.Contains(line, "Par") {
			break
		}
	}

	shut := make(chan error, 1)
	go func() { shut <- r.gw.Shutdown(context.Background()) }()
	require.Eventually(t, func() bool {
		rec := httptest.NewRecorder()
		r.gw.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
		return rec.Code == http.StatusServiceUnavailable
	}, 10*time.Second, time.Millisecond, "draining")
	close(atEnd) // the upstream finishes: the stream ends during the drain
	require.NoError(t, <-shut)
	r.srv.CloseClientConnections() // what a process exiting now does
	close(release)

	rest, _ := io.ReadAll(br) // cut: no chunked terminator, maybe
	require.Contains(t, string(rest), "data: [DONE]\n\n", "the end was on the wire when Shutdown returned")
}
