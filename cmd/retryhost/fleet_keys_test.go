package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
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
