package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"testing"
	"time"

	oai "github.com/openai/openai-go/v3"
	"github.com/stretchr/testify/require"

	"github.com/retryhost/retryhost/policy"
)

// streamAsked returns what each request of u said of "stream".
func streamAsked(u *upstream) []string {
	var out []string
	for _, h := range u.requests() {
		out = append(out, cmpOrS(string(h.body["stream"]), "absent"))
	}
	return out
}

func cmpOrS(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// A non-streaming client gets the same answer, on both front doors, from a
// model with "upstream_json" (asked for a non-streamed answer) as from one
// without (asked for a stream): the text, finish, usage, logprobs, fields
// and model names, byte for byte; a streaming client's request stays
// streamed.
func TestUpstreamJSONSameAnswerAsStreamed(t *testing.T) {
	streamed, nonStreamed := newRig(t, ""), newRigJSON(t, "")
	for _, c := range []struct {
		name string
		a    act
	}{
		{"text, logprobs, tier", act{preamble: true, chunks: []string{"Par", "is", " it is"}, logprobs: true, tier: "flex"}},
		{"refusal after text", act{chunks: []string{"Well"}, refusal: "I can't help with that."}},
		{"length", act{chunks: []string{"cut sh"}, finish: "length"}},
	} {
		for _, door := range []struct{ path, body string }{
			{"/v1/chat/completions", `{"model":"primary","messages":[{"role":"user","content":"hi"}],"logprobs":true}`},
			{"/v1/messages", `{"model":"primary","max_tokens":100,"messages":[{"role":"user","content":"hi"}]}`},
		} {
			t.Run(c.name+" "+door.path, func(t *testing.T) {
				var answers [2]map[string]any
				for i, r := range []*rig{streamed, nonStreamed} {
					r.up["primary"].reset()
					r.up["primary"].play(c.a)
					resp, body := r.rawPost(door.path, door.body)
					require.Equal(t, http.StatusOK, resp.StatusCode, body)
					require.Contains(t, body, c.a.chunks[0])
					require.NoError(t, json.Unmarshal([]byte(body), &answers[i]))
					// The gateway's own, per request.
					require.NotEmpty(t, answers[i]["id"])
					delete(answers[i], "id")
					delete(answers[i], "created")
				}
				require.Equal(t, answers[0], answers[1])
				require.Equal(t, []string{"true"}, streamAsked(streamed.up["primary"]))
				require.Equal(t, []string{"false"}, streamAsked(nonStreamed.up["primary"]))
			})
		}
	}
	nonStreamed.up["primary"].reset()
	nonStreamed.up["primary"].play(act{chunks: []string{"str", "eamed"}})
	got := nonStreamed.stream("primary")
	require.NoError(t, got.err)
	require.Equal(t, "streamed", got.text)
	require.Equal(t, []string{"true"}, streamAsked(nonStreamed.up["primary"]), "a streaming client's request stays streamed")
	nonStreamed.healthy()
}

// The non-streaming fault tests' JSON twins: with "upstream_json", a fault
// of the non-streamed answer fails over as the streamed answer's does, and
// the client gets the fallback's answer alone.
func TestUpstreamJSONFaultsFailOver(t *testing.T) {
	r := newRigJSON(t, "")
	for _, c := range []struct {
		name string
		a    act
	}{
		{"connection reset mid-body", act{chunks: []string{"Par", "tial"}, cut: true, logprobs: true}},
		{"5xx", act{status: http.StatusInternalServerError}},
		{"200 with an error object", act{errorEvent: "overloaded"}},
		{"truncated body", act{status: http.StatusOK, body: `{"id":"chatcmpl-primary","object":"chat.completion","choices":[{"index":0,"message":{"content":"Par`}},
		{"bad JSON body", act{status: http.StatusOK, body: `{"id": oops not json}`}},
		{"no finish", act{chunks: []string{"Par"}, noFinish: true}},
		{"slow body past first_content", act{chunks: []string{"Par"}, afterText: make(chan struct{})}},
		{"body over openai.MaxAnswer", act{pad: 32<<20 + 1}},
	} {
		t.Run(c.name, func(t *testing.T) {
			r.up["primary"].play(c.a)
			r.up["backup"].play(act{chunks: []string{"from", " backup"}, logprobs: true, tier: "default"})
			p := params("primary")
			p.Logprobs = oai.Bool(true)
			cc, err := r.client.Chat.Completions.New(context.Background(), p)
			require.NoError(t, err)
			require.Equal(t, "from backup", cc.Choices[0].Message.Content, "exactly the fallback's answer")
			require.Equal(t, "backup", cc.Model)
			require.Equal(t, "fp_backup", cc.SystemFingerprint)
			require.EqualValues(t, "default", cc.ServiceTier)
			require.Len(t, cc.Choices[0].Logprobs.Content, 2)
			require.Equal(t, []string{"false"}, streamAsked(r.up["primary"]))
			require.Equal(t, []string{"false"}, streamAsked(r.up["backup"]))
			r.healthy()
		})
	}
}

// A 429 with Retry-After on a non-streamed answer is retried on the same
// model after it, as on a streamed one.
func TestUpstreamJSONRateLimitHonoursRetryAfter(t *testing.T) {
	r := newRigJSON(t, "")
	r.up["primary"].play(act{status: http.StatusTooManyRequests, header: http.Header{"Retry-After": {"1"}}}, act{chunks: []string{"ok"}})
	cc, err := r.client.Chat.Completions.New(context.Background(), params("primary"))
	require.NoError(t, err)
	require.Equal(t, "ok", cc.Choices[0].Message.Content)
	hits := r.up["primary"].requests()
	require.Len(t, hits, 2)
	require.GreaterOrEqual(t, hits[1].at.Sub(hits[0].at), time.Second-50*time.Millisecond, "the retry came before the Retry-After")
	require.Empty(t, r.up["backup"].requests())
	require.Equal(t, []string{"false", "false"}, streamAsked(r.up["primary"]))
	r.healthy()
}

// When every model's non-streamed answer fails, the client gets a clean
// error answer naming the cause, never partial text.
func TestUpstreamJSONAllFail(t *testing.T) {
	r := newRigJSON(t, "")
	for _, u := range r.up {
		u.play(act{chunks: []string{"Par"}, cut: true})
	}
	_, err := r.client.Chat.Completions.New(context.Background(), params("primary"))
	var apiErr *oai.Error
	require.True(t, errors.As(err, &apiErr), "%v", err)
	require.Equal(t, http.StatusBadGateway, apiErr.StatusCode)
	require.Equal(t, "upstream_failed", apiErr.Code)
	require.NotContains(t, apiErr.RawJSON(), "Par", "no partial text")
	r.healthy()
}

// With "upstream_json" the gap deadline does not apply to a non-streamed
// answer (nothing comes between its parts), where the streamed answer's
// gaps fail it; first_content bounds the whole answer.
func TestUpstreamJSONGapDoesNotApply(t *testing.T) {
	const rules = `"rules": [{"when": {"any": true}, "action": "switch", "model": "backup"}],
		"deadlines": {"first_content": "30s", "gap": "100ms"}`
	slow := act{chunks: []string{"a", "b", "c"}, gap: 300 * time.Millisecond}
	for _, c := range []struct {
		name string
		r    *rig
		want string
	}{
		{"streamed upstream", newRig(t, rules), "from backup"},
		{"non-streamed upstream", newRigJSON(t, rules), "abc"},
	} {
		t.Run(c.name, func(t *testing.T) {
			c.r.up["primary"].play(slow)
			c.r.up["backup"].play(act{chunks: []string{"from backup"}})
			cc, err := c.r.client.Chat.Completions.New(context.Background(), params("primary"))
			require.NoError(t, err)
			require.Equal(t, c.want, cc.Choices[0].Message.Content)
		})
	}
}

// upstream_json is refused where it cannot apply: the gateway does not
// start on such a policy, and says why.
func TestUpstreamJSONPolicyErrors(t *testing.T) {
	for _, m := range []string{
		`{"name": "a", "provider": "anthropic", "model": "c", "api_key_env": "K", "upstream_json": true}`,
		`{"name": "a", "provider": "openai", "model": "g", "api_key_env": "K", "api": "responses", "upstream_json": true}`,
	} {
		_, err := New(context.Background(), Bytes("p.json", []byte(`{"models": [`+m+`]}`), policy.Options{Getenv: func(string) string { return "k" }}))
		require.ErrorContains(t, err, "models[0].upstream_json: only for")
	}
}
