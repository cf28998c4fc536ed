package gateway

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// trailOf returns the attempts of the trail comment that ends body, after
// checking it is the stream's last line.
func trailOf(t *testing.T, body string) []map[string]any {
	t.Helper()
	lines := strings.Split(strings.TrimRight(body, "\n"), "\n")
	last := lines[len(lines)-1]
	v, ok := strings.CutPrefix(last, ": retryhost ")
	require.True(t, ok, "the stream's last line is the trail comment: %q", last)
	var tr struct {
		Attempts []map[string]any `json:"attempts"`
	}
	require.NoError(t, json.Unmarshal([]byte(v), &tr), v)
	return tr.Attempts
}

// logRecords returns the JSON records of logs whose msg is msg.
func logRecords(t *testing.T, logs, msg string) []map[string]any {
	t.Helper()
	var recs []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(logs), "\n") {
		var rec map[string]any
		require.NoError(t, json.Unmarshal([]byte(line), &rec), line)
		if rec["msg"] == msg {
			recs = append(recs, rec)
		}
	}
	return recs
}

// A stream ends with an SSE comment naming every attempt it took, and
// the access log has one "attempt" record per attempt beside the
// request's own, with the request's ids.
func TestStreamEndsWithAttemptTrail(t *testing.T) {
	r := newPassRig(t, "", nil)
	r.up["primary"].play(act{status: 503})
	r.up["backup"].play(act{preamble: true, chunks: []string{"Paris."}})
	resp, body := r.rawStream(streamBody("any-model"))
	require.Equal(t, http.StatusOK, resp.StatusCode, body)
	require.Contains(t, body, "data: [DONE]\n\n: retryhost ", "the trail follows the end marker")
	tr := trailOf(t, body)
	require.Len(t, tr, 2)
	require.Equal(t, "primary", tr[0]["model"])
	require.Equal(t, "failed", tr[0]["outcome"])
	require.Equal(t, "overloaded", tr[0]["class"], "a 503 is an overloaded upstream")
	require.EqualValues(t, 503, tr[0]["status"])
	require.Equal(t, "backup", tr[1]["model"])
	require.Equal(t, "success", tr[1]["outcome"])
	require.NotContains(t, tr[1], "class")

	var atts, reqs []map[string]any
	require.Eventually(t, func() bool {
		logs := r.logs.String()
		atts, reqs = logRecords(t, logs, "attempt"), logRecords(t, logs, "request")
		return len(reqs) == 1
	}, 5e9, 1e7)
	require.Len(t, atts, 2)
	for i, a := range atts {
		require.EqualValues(t, i+1, a["attempt"])
		require.Equal(t, reqs[0]["id"], a["id"])
		require.Equal(t, reqs[0]["request_id"], a["request_id"])
	}
	require.Equal(t, "primary", atts[0]["model"])
	require.Equal(t, "failed", atts[0]["outcome"])
	require.EqualValues(t, 503, atts[0]["status"])
	require.Equal(t, "backup", atts[1]["model"])
	require.Equal(t, "success", atts[1]["outcome"])
	require.EqualValues(t, 2, reqs[0]["attempts"])
}

// A stream cut after commit ends with its in-band error, then the trail:
// the cut attempt is truncated; with after_commit: continue the
// continuation is one more attempt and the stream ends whole.
func TestTrailAfterCommit(t *testing.T) {
	cut := act{preamble: true, chunks: []string{"The capital ", "of Fra"}, cut: true}
	t.Run("error", func(t *testing.T) {
		r := newPassRig(t, "", nil)
		r.up["primary"].play(cut)
		_, body := r.rawStream(streamBody("any-model"))
		tr := trailOf(t, body)
		require.Len(t, tr, 1)
		require.Equal(t, "truncated", tr[0]["outcome"])
		require.NotContains(t, body, "[DONE]")
	})
	t.Run("continue", func(t *testing.T) {
		r := newPassRig(t, continueOn, nil)
		r.up["primary"].play(cut)
		r.up["backup"].play(act{preamble: true, chunks: []string{"of France", " is Paris."}})
		_, body := r.rawStream(streamBody("any-model"))
		require.Contains(t, body, "[DONE]")
		tr := trailOf(t, body)
		require.Len(t, tr, 2)
		require.Equal(t, "primary", tr[0]["model"])
		require.Equal(t, "backup", tr[1]["model"])
		require.Equal(t, "success", tr[1]["outcome"])
	})
}

// The Messages door's stream ends with the trail too, and
// anthropic-sdk-go reads the message whole past it.
func TestTrailOnMessagesDoor(t *testing.T) {
	r := newPassRig(t, "", []string{"primary", "backup"})
	r.up["primary"].play(act{status: 529})
	r.up["backup"].play(act{preamble: true, chunks: []string{"Paris."}})
	got := r.messagesSaw("any-model")
	require.NoError(t, got.err)
	require.Equal(t, "Paris.", got.text)
	r.up["primary"].play(act{status: 529})
	r.up["backup"].play(act{preamble: true, chunks: []string{"Paris."}})
	_, body := r.rawPost("/v1/messages", `{"model":"any-model","max_tokens":16,"stream":true,"messages":[{"role":"user","content":"hi"}]}`)
	require.Contains(t, body, "event: message_stop")
	tr := trailOf(t, body)
	require.Equal(t, "backup", tr[len(tr)-1]["model"])
}

// withoutTrail is a stream's body without the trail comment that ends it.
func withoutTrail(body string) string {
	i := strings.LastIndex(body, "\n: retryhost {")
	if i < 0 || !strings.HasSuffix(body, "}\n\n") {
		return body
	}
	return body[:i+1]
}
