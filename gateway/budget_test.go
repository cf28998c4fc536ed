package gateway

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/retryhost/retryhost/policy"
)

// budgetRig is a rig whose bodies are at most 128 KiB and whose body
// budget is 1 MiB: one request of 100 KiB being opened (charged 8 bytes a
// byte) leaves no room for a second.
func budgetRig(t *testing.T, opts ...Option) *rig {
	t.Helper()
	return newRigOf(t, `"rules": []`, []string{"backup"}, append([]Option{WithMaxBodyBytes(128 << 10), WithBodyBudget(1 << 20)}, opts...)...)
}

// textBody is a streaming request of about n bytes with a few JSON values,
// in the chat door's format or, for messages, in the Messages door's.
func textBody(route string, n int, messages bool) string {
	if messages {
		return `{"model":"` + route + `","max_tokens":5,"stream":true,"messages":[{"role":"user","content":"` + strings.Repeat("x", n) + `"}]}`
	}
	return `{"model":"` + route + `","stream":true,"messages":[{"role":"user","content":"` + strings.Repeat("x", n) + `"}]}`
}

func (r *rig) budgetUsed() int64 { return r.gw.budget.used.Load() }

// requireBudgetEmpty waits until no request is charged any of the budget.
func (r *rig) requireBudgetEmpty() {
	r.t.Helper()
	require.Eventually(r.t, func() bool { return r.budgetUsed() == 0 }, 10*time.Second, time.Millisecond,
		"charged after every request ended: %d", r.budgetUsed())
}

// openCost is what a request is charged from its body's end to its commit.
func openCost(body string) int64 {
	return bodyByteCost*int64(len(body)) + bodyValueCost*jsonValues([]byte(body))
}

// A request whose body does not fit in what the bodies in flight leave of
// the budget gets 429 with Retry-After, code gateway_busy, in its door's
// error shape, and reaches no upstream; a small one still fits; once the
// first commits, the decoding's charge is given back, and when it ends,
// the rest.
func TestBodyBudgetRefusesABodyThatDoesNotFit(t *testing.T) {
	r := budgetRig(t)
	release := make(chan struct{})
	r.up["primary"].play(act{hold: release, chunks: []string{"held"}, afterText: release})
	big := textBody("primary", 100<<10, false)
	held := make(chan string, 1)
	go func() {
		resp, out := r.rawStream(big)
		held <- fmt.Sprint(resp.StatusCode, " ", out)
	}()
	require.Eventually(t, func() bool { return len(r.up["primary"].requests()) == 1 }, 10*time.Second, time.Millisecond)
	require.Equal(t, openCost(big), r.budgetUsed(), "charged 8 bytes a byte and 384 a JSON value until commit")

	// Chat Completions' shape.
	resp, out := r.rawStream(textBody("third", 100<<10, false))
	require.Equal(t, http.StatusTooManyRequests, resp.StatusCode, out)
	require.Equal(t, "1", resp.Header.Get("Retry-After"))
	var oe struct {
		Error struct{ Type, Code, Message string }
	}
	require.NoError(t, json.Unmarshal([]byte(out), &oe), out)
	require.Equal(t, "rate_limit_error", oe.Error.Type)
	require.Equal(t, "gateway_busy", oe.Error.Code)
	require.Contains(t, oe.Error.Message, "body budget")
	// The Messages API's shape.
	resp, out = r.rawPost("/v1/messages", textBody("backup", 100<<10, true), "Anthropic-Version", "2023-06-01")
	require.Equal(t, http.StatusTooManyRequests, resp.StatusCode, out)
	require.Equal(t, "1", resp.Header.Get("Retry-After"))
	var ae struct {
		Type  string
		Error struct{ Type, Message string }
	}
	require.NoError(t, json.Unmarshal([]byte(out), &ae), out)
	require.Equal(t, "error", ae.Type)
	require.Equal(t, "rate_limit_error", ae.Error.Type)
	require.Contains(t, ae.Error.Message, "body budget")
	require.Empty(t, r.up["third"].requests())
	require.Empty(t, r.up["backup"].requests())

	// A small body fits beside the big one.
	r.up["third"].play(act{chunks: []string{"small"}})
	resp, out = r.rawStream(streamBody("third"))
	require.Equal(t, http.StatusOK, resp.StatusCode, out)
	require.Contains(t, r.metricsText(), "retryhost_gateway_body_budget_rejections_total 2\n")

	// Committed: what stays charged is 2 bytes a byte.
	release <- struct{}{}
	require.Eventually(t, func() bool { return r.budgetUsed() == bodyHeldCost*int64(len(big)) }, 10*time.Second, time.Millisecond,
		"charged after commit: %d", r.budgetUsed())
	close(release)
	require.True(t, strings.HasPrefix(<-held, "200 "))
	r.requireBudgetEmpty()
	r.up["third"].play(act{chunks: []string{"now"}})
	resp, out = r.rawStream(textBody("third", 100<<10, false))
	require.Equal(t, http.StatusOK, resp.StatusCode, out)
	r.requireBudgetEmpty()
}

// A body that stops fitting while it arrives is refused then, with 429
// and the connection closed, unread past that point; what it was charged
// is given back.
func TestBodyBudgetRefusesABodyMidway(t *testing.T) {
	r := budgetRig(t)
	release := make(chan struct{})
	defer close(release)
	r.up["primary"].play(act{hold: release, chunks: []string{"held"}})
	big := textBody("primary", 120<<10, false)
	go func() { _, _ = r.rawStream(big) }()
	require.Eventually(t, func() bool { return len(r.up["primary"].requests()) == 1 }, 10*time.Second, time.Millisecond)
	before := r.budgetUsed()

	// 64 KiB of a body, charged 2 bytes a byte, is past what is left.
	pr, pw := io.Pipe()
	defer pw.Close()
	go func() { _, _ = io.WriteString(pw, textBody("third", 120<<10, false)[:64<<10]) }()
	req, err := http.NewRequest(http.MethodPost, r.srv.URL+"/v1/chat/completions", pr)
	require.NoError(t, err)
	resp, err := r.hc.Do(req)
	require.NoError(t, err)
	out, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusTooManyRequests, resp.StatusCode, string(out))
	require.Contains(t, string(out), "gateway_busy")
	require.True(t, resp.Close, "the rest of the body is not read: the connection closes")
	require.Eventually(t, func() bool { return r.budgetUsed() == before }, 10*time.Second, time.Millisecond)
}

// A body that would take more than the whole budget to decode (many tiny
// JSON values) gets 413 at once: it could never be served.
func TestBodyBudgetRefusesABodyCostlierThanItAll(t *testing.T) {
	r := budgetRig(t)
	body := `{"model":"primary","messages":[{"role":"user","content":"hi"}],"extra":[` + strings.Repeat("0,", 50<<10) + `0]}`
	resp, out := r.rawStream(body)
	require.Equal(t, http.StatusRequestEntityTooLarge, resp.StatusCode, out)
	require.Contains(t, out, "request_too_large")
	require.Contains(t, out, "JSON values")
	require.Empty(t, r.up["primary"].requests())
	r.requireBudgetEmpty()
}

// New refuses a budget that holds no body of the largest size.
func TestBodyBudgetMustHoldTheLargestBody(t *testing.T) {
	src := Bytes("p.json", []byte(`{"models": [{"name": "m", "provider": "openai", "model": "up", "base_url": "http://127.0.0.1:9/v1", "api_key_env": "K"}]}`),
		policy.Options{Getenv: func(string) string { return "k" }})
	_, err := New(context.Background(), src, WithMaxBodyBytes(1<<20), WithBodyBudget(4<<20))
	require.ErrorContains(t, err, "body budget")
	_, err = New(context.Background(), src, WithBodyBudget(0))
	require.ErrorContains(t, err, "body budget")
}

// Whatever way a request ends, it leaves nothing charged: served, failed,
// refused, its client gone before or after commit, its body abandoned or
// too slow.
func TestBodyBudgetReleasedHoweverARequestEnds(t *testing.T) {
	r := budgetRig(t, WithReadTimeout(300*time.Millisecond))
	t.Run("served", func(t *testing.T) {
		r.up["primary"].play(act{chunks: []string{"a", "b"}})
		resp, out := r.rawStream(textBody("primary", 10<<10, false))
		require.Equal(t, http.StatusOK, resp.StatusCode, out)
		r.requireBudgetEmpty()
	})
	t.Run("failed upstream", func(t *testing.T) {
		r.up["primary"].play(act{status: http.StatusInternalServerError})
		resp, out := r.rawStream(textBody("primary", 10<<10, false))
		require.NotEqual(t, http.StatusOK, resp.StatusCode, out)
		r.requireBudgetEmpty()
	})
	t.Run("bad request", func(t *testing.T) {
		resp, out := r.rawStream(`{"model":"primary","messages":"` + strings.Repeat("x", 10<<10) + `"}`)
		require.Equal(t, http.StatusBadRequest, resp.StatusCode, out)
		r.requireBudgetEmpty()
	})
	t.Run("client gone before commit", func(t *testing.T) {
		release := make(chan struct{})
		defer close(release)
		r.up["primary"].reset()
		r.up["primary"].play(act{hold: release, chunks: []string{"late"}})
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			defer close(done)
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, r.srv.URL+"/v1/chat/completions", strings.NewReader(textBody("primary", 10<<10, false)))
			if resp, err := r.hc.Do(req); err == nil {
				resp.Body.Close()
			}
		}()
		require.Eventually(t, func() bool { return len(r.up["primary"].requests()) == 1 }, 10*time.Second, time.Millisecond)
		require.Positive(t, r.budgetUsed())
		cancel()
		<-done
		r.requireBudgetEmpty()
	})
	t.Run("client gone mid-stream", func(t *testing.T) {
		r.up["primary"].play(act{chunks: []string{"a", "b", "c", "d"}, gap: time.Hour})
		ctx, cancel := context.WithCancel(context.Background())
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, r.srv.URL+"/v1/chat/completions", strings.NewReader(textBody("primary", 10<<10, false)))
		resp, err := r.hc.Do(req)
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, resp.StatusCode)
		require.Positive(t, r.budgetUsed())
		cancel()
		resp.Body.Close()
		r.requireBudgetEmpty()
	})
	t.Run("body abandoned", func(t *testing.T) {
		conn, err := net.Dial("tcp", strings.TrimPrefix(r.srv.URL, "http://"))
		require.NoError(t, err)
		_, err = io.WriteString(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n"+strings.Repeat("x", 50000))
		require.NoError(t, err)
		require.Eventually(t, func() bool { return r.budgetUsed() > 0 }, 10*time.Second, time.Millisecond)
		require.NoError(t, conn.Close())
		r.requireBudgetEmpty()
	})
	t.Run("body too slow", func(t *testing.T) {
		conn, err := net.Dial("tcp", strings.TrimPrefix(r.srv.URL, "http://"))
		require.NoError(t, err)
		defer conn.Close()
		require.NoError(t, conn.SetDeadline(time.Now().Add(10*time.Second))) // a guard against a hang
		_, err = io.WriteString(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n"+strings.Repeat("x", 50000))
		require.NoError(t, err)
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusRequestTimeout, resp.StatusCode)
		r.requireBudgetEmpty()
	})
}

// Hammer: many clients at once through both doors, bodies of every size,
// some gone midway, against a budget that refuses some: each gets an
// answer or its own error, and once all have ended nothing is charged.
func TestBodyBudgetHammerLeavesNothingCharged(t *testing.T) {
	r := budgetRig(t, WithMaxConcurrentPerClient(64), WithMaxConcurrent(64))
	for _, u := range r.up {
		u.forget = true
		script := make([]act, 400)
		for i := range script {
			script[i] = act{chunks: []string{"a", "b"}, gap: time.Millisecond}
		}
		u.play(script...)
	}
	workers, each := 16, 10
	if testing.Short() {
		workers, each = 4, 5
	}
	var (
		mu    sync.Mutex
		codes = map[int]int{}
	)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 1))
			for range each {
				messages := rng.IntN(2) == 0
				path, route := "/v1/chat/completions", "primary"
				if messages {
					path, route = "/v1/messages", "backup"
				}
				body := textBody(route, rng.IntN(110<<10), messages)
				ctx, cancel := context.WithCancel(context.Background())
				if rng.IntN(4) == 0 {
					time.AfterFunc(time.Duration(rng.IntN(5))*time.Millisecond, cancel)
				}
				req, _ := http.NewRequestWithContext(ctx, http.MethodPost, r.srv.URL+path, strings.NewReader(body))
				req.Header.Set("Anthropic-Version", "2023-06-01")
				if resp, err := r.hc.Do(req); err == nil {
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					mu.Lock()
					codes[resp.StatusCode]++
					mu.Unlock()
				}
				cancel()
			}
		}()
	}
	wg.Wait()
	for code := range codes {
		require.Contains(t, []int{http.StatusOK, http.StatusTooManyRequests}, code, "%v", codes)
	}
	r.requireBudgetEmpty()
	t.Logf("answers by status: %v", codes)
}

// jsonValues counts '{', '[' and ',' outside strings, whatever the strings
// hold.
func TestJSONValuesCountsOutsideStrings(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   string
		want int64
	}{
		{name: "empty", in: ``, want: 0},
		{name: "a scalar", in: `"x"`, want: 0},
		{name: "an array", in: `[1,2,3]`, want: 3},
		{name: "nested", in: `{"a":{"b":[1,{}]}}`, want: 5},
		{name: "structure in a string", in: `{"a":"{[,]}","b":1}`, want: 2},
		{name: "an escaped quote", in: `{"a":"x\",y","b":[1,2]}`, want: 4},
		{name: "an escaped backslash before the quote", in: `["a\\",1]`, want: 2},
		{name: "three backslashes", in: `["a\\\",1",2]`, want: 2},
		{name: "an unterminated string", in: `[1,"a,b`, want: 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, jsonValues([]byte(tc.in)))
		})
	}
}
