package gateway

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A failed request's access-log line counts each attempt once: the
// attempts of the last link of the chain (the route, or its last
// fallback) were counted twice, so a request that failed on two
// upstreams was logged with four attempts.
func TestFailedRequestLogsEachAttemptOnce(t *testing.T) {
	for _, c := range []struct {
		name, body string
		attempts   int
	}{
		{"route only", `{"model":"primary","messages":[{"role":"user","content":"hi"}]}`, 2},
		{"route and a fallback", `{"model":"primary","fallbacks":["third"],"messages":[{"role":"user","content":"hi"}]}`, 4}, // third, then backup by the rule,
	} {
		t.Run(c.name, func(t *testing.T) {
			r := newRig(t, `"rules": [{"when": {"status": [503]}, "action": "switch", "model": "backup"}]`)
			for _, u := range r.up {
				u.play(act{status: 503})
			}
			resp, out := r.rawStream(c.body)
			require.Equal(t, http.StatusBadGateway, resp.StatusCode, out)
			want := fmt.Sprintf(`"attempts":%d,`, c.attempts)
			require.Eventually(t, func() bool { return strings.Contains(r.logs.String(), `"status":502`) }, 5*time.Second, time.Millisecond)
			require.Contains(t, r.logs.String(), want)
		})
	}
}

// A request that a fail-closed plugin failed is logged with the class the
// driver gave the failure (plugin), not "unknown": with no upstream error
// to read a class from, the access log had none.
func TestFailClosedPluginLogsItsClass(t *testing.T) {
	r := newRig(t, `"rules": [], "transforms": [{"plugin": {"path": "../host/testdata/trap.wasm", "fail": "closed"}}]`)
	r.up["primary"].play(act{chunks: []string{"Paris"}})
	resp, out := r.rawStream(streamBody("primary"))
	require.Equal(t, http.StatusBadGateway, resp.StatusCode, out)
	require.Eventually(t, func() bool { return strings.Contains(r.logs.String(), `"status":502`) }, 5*time.Second, time.Millisecond)
	require.Contains(t, r.logs.String(), `"error_class":"plugin"`)
	var e struct{ Error struct{ Message string } }
	require.NoError(t, json.Unmarshal([]byte(out), &e), out)
	require.Contains(t, e.Error.Message, "transform trap.wasm failed", "the client is told which plugin failed")
	require.NotContains(t, e.Error.Message, "wasm stack trace", "but not the guest's stack")
	require.NotContains(t, e.Error.Message, "\n", "in one line")
}

// Two plugins whose files share a base name (or one built-in used twice)
// are told apart in what names them: the error a client gets, the logs,
// plugin_*_total's series. Both were "upper.wasm", so a failure of the
// second read as one of the first.
func TestPluginsOfOneBaseNameAreToldApart(t *testing.T) {
	trap, err := os.ReadFile("../host/testdata/trap.wasm")
	require.NoError(t, err)
	other := filepath.Join(t.TempDir(), "upper.wasm")
	require.NoError(t, os.WriteFile(other, trap, 0o600))
	r := newRig(t, fmt.Sprintf(`"rules": [], "transforms": [{"plugin": {"path": "../host/testdata/upper.wasm"}}, {"plugin": {"path": %q, "fail": "closed"}}]`, other))
	r.up["primary"].play(act{chunks: []string{"Paris"}})
	resp, out := r.rawStream(streamBody("primary"))
	require.Equal(t, http.StatusBadGateway, resp.StatusCode, out)
	require.Contains(t, out, `transform upper.wasm#2 failed`)
}
