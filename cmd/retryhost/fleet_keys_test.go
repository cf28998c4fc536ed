package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	oai "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/stretchr/testify/require"

	"github.com/retryhost/retryhost/gateway/vkey"
	"github.com/retryhost/retryhost/internal/testkit/redistest"
)

// TestFleetHoldsAKeysRPM: two `retryhost serve` processes keep one
// virtual key's RPM on one redis-server: of the requests sent through
// both, no more are admitted than the limit and what the rate adds over
// the test's time, each replica refuses some with 429, and the Redis
// round trip holds the counters.
func TestFleetHoldsAKeysRPM(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and runs two replicas and a redis-server")
	}
	srv := redistest.Start(t)
	up := &fleetUpstream{hits: map[string]int{}}
	prov := httptest.NewServer(up)
	defer prov.Close()
	dir := t.TempDir()
	pol := filepath.Join(dir, "fleet.json")
	require.NoError(t, os.WriteFile(pol, []byte(fmt.Sprintf(`{
	"models": [{"name": "b", "provider": "openai", "model": "model-b", "base_url": %q, "api_key_env": "UPSTREAM_KEY"}],
	"rules": []
}`, prov.URL+"/v1")), 0o600))
	const rpm = 20
	secret, hash := vkey.NewSecret()
	keys := filepath.Join(dir, "keys.json")
	require.NoError(t, vkey.WriteFile(keys, &vkey.File{Keys: []*vkey.Key{{ID: "team-a", Hash: hash, RPM: rpm}}}))

	var reps []*servedBinary
	for range 2 {
		reps = append(reps, startServeBinary(t, "--policy", pol, "--watch=false", "--drain", "2s",
			"--keys-file", keys, "--limits-redis", srv.URL()))
	}
	start := time.Now()
	admitted, refused := 0, [2]int{}
	for i := range 3 * rpm {
		c := oai.NewClient(option.WithBaseURL(reps[i%2].base()+"/v1"), option.WithAPIKey(secret), option.WithMaxRetries(0))
		_, err := c.Chat.Completions.New(context.Background(), oai.ChatCompletionNewParams{Model: "b",
			Messages: []oai.ChatCompletionMessageParamUnion{oai.UserMessage("hi")}})
		var e *oai.Error
		switch {
		case err == nil:
			admitted++
		case errors.As(err, &e) && e.StatusCode == http.StatusTooManyRequests:
			refused[i%2]++
			require.Equal(t, "rate_limit_exceeded", e.Code)
			require.NotEmpty(t, e.Response.Header.Get("Retry-After"))
		default:
			require.NoError(t, err, reps[i%2].stderr.String())
		}
	}
	slack := int(time.Since(start).Minutes()*rpm) + 1 // what the rate refills while the test runs
	require.GreaterOrEqual(t, admitted, rpm, "the limit admits its minute's requests")
	require.LessOrEqual(t, admitted, rpm+slack, "two replicas admitted more than the key's RPM")
	require.Positive(t, refused[0])
	require.Positive(t, refused[1])
	require.Equal(t, admitted, up.count("model-b"))
	ttl, err := srv.Do("PTTL", "{retryhost:}vk:team-a:r")
	require.NoError(t, err)
	require.Regexp(t, `^:[1-9][0-9]*$`, ttl, "the key's rate is in Redis, with a TTL")
}

// spendUpstream answers every chat request with a stream whose usage is
// 1000 input and 100 output tokens.
type spendUpstream struct {
	mu   sync.Mutex
	hits int
}

func (u *spendUpstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	u.mu.Lock()
	u.hits++
	u.mu.Unlock()
	w.Header().Set("Content-Type", "text/event-stream")
	_, _ = io.WriteString(w, `data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"model-b","choices":[{"index":0,"delta":{"role":"assistant","content":"hi"},"finish_reason":"stop"}]}`+"\n\n"+
		`data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"model-b","choices":[],"usage":{"prompt_tokens":1000,"completion_tokens":100,"total_tokens":1100}}`+"\n\n"+
		"data: [DONE]\n\n")
}

func (u *spendUpstream) count() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.hits
}

// TestFleetSumsAKeysSpend: two `retryhost serve` processes on one
// redis-server add up one virtual key's spend at the policy's prices;
// the request that crosses its day's budget is served, and the next, on
// either replica, is refused with 429 insufficient_quota before reaching
// the upstream.
func TestFleetSumsAKeysSpend(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and runs two replicas and a redis-server")
	}
	srv := redistest.Start(t)
	up := &spendUpstream{}
	prov := httptest.NewServer(up)
	defer prov.Close()
	dir := t.TempDir()
	pol := filepath.Join(dir, "fleet.json")
	// 1000 input and 100 output tokens at 10 and 50 a million: 0.015 a request.
	require.NoError(t, os.WriteFile(pol, []byte(fmt.Sprintf(`{
	"models": [{"name": "b", "provider": "openai", "model": "model-b", "base_url": %q, "api_key_env": "UPSTREAM_KEY",
		"price": {"input": 10, "output": 50}}],
	"rules": []
}`, prov.URL+"/v1")), 0o600))
	secret, hash := vkey.NewSecret()
	keys := filepath.Join(dir, "keys.json")
	require.NoError(t, vkey.WriteFile(keys, &vkey.File{Keys: []*vkey.Key{{ID: "team-a", Hash: hash, Budget: vkey.Budget{CostPerDay: 0.04}}}}))
	var reps []*servedBinary
	for range 2 {
		reps = append(reps, startServeBinary(t, "--policy", pol, "--watch=false", "--drain", "2s",
			"--keys-file", keys, "--limits-redis", srv.URL()))
	}
	ask := func(i int) error {
		c := oai.NewClient(option.WithBaseURL(reps[i%2].base()+"/v1"), option.WithAPIKey(secret), option.WithMaxRetries(0))
		_, err := c.Chat.Completions.New(context.Background(), oai.ChatCompletionNewParams{Model: "b",
			Messages: []oai.ChatCompletionMessageParamUnion{oai.UserMessage("hi")}})
		return err
	}
	day, _, _, _ := vkey.Period(time.Now())
	counter := "{retryhost:}vk:team-a:cd" + strconv.FormatInt(day, 10)
	spent := func() float64 {
		r, err := srv.Query("GET", counter)
		if err != nil || len(r) != 1 || r[0] == "" {
			return 0
		}
		f, _ := strconv.ParseFloat(r[0], 64)
		return f
	}
	for i := range 3 { // 0, 0.015 and 0.03 spent: under 0.04
		require.NoError(t, ask(i), reps[i%2].stderr.String())
		want := float64(i+1) * 0.015
		require.Eventually(t, func() bool { return math.Abs(spent()-want) < 1e-9 }, 10*time.Second, 5*time.Millisecond,
			"the replicas' spend on Redis: %v, want %v", spent(), want)
	}
	for i := 3; i < 5; i++ {
		err := ask(i)
		var e *oai.Error
		require.True(t, errors.As(err, &e), "%v", err)
		require.Equal(t, http.StatusTooManyRequests, e.StatusCode)
		require.Equal(t, "insufficient_quota", e.Code)
		require.Contains(t, e.Message, "spend budget")
	}
	require.Equal(t, 3, up.count(), "a refused request reaches no upstream")
	require.InDelta(t, 0.045, spent(), 1e-9)
}
