package gateway

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestHeaderTimeoutIsTheUpstreamsFailure: an upstream that sends no
// response headers within WithUpstreamHeaderTimeout fails its attempt as a
// cut connection of that upstream: class network, the provider and the URL
// named in the message the client gets (and the URL, through OpenAI's
// client) and a rule on "network" switching
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
			if !anthropic { // its SDK reports the context's end for the transport's error, and its URL with it
				require.Contains(t, body, `Post \"`+r.up["backup"].url())
			}
			require.Eventually(t, func() bool { return len(accessRecords(t, r.logs.String())) == 2 }, 10*time.Second, time.Millisecond)
			recs := accessRecords(t, r.logs.String())
			require.Equal(t, "network", recs[1]["error_class"], recs[1])
		})
	}
}
