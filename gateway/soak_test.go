package gateway

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	oai "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/retryhost/retryhost/internal/testkit"
	"github.com/retryhost/retryhost/plugins"
	"github.com/retryhost/retryhost/policy"
)

// The soak test: many concurrent clients, through a
// gateway over a three-model policy with cooldown, against upstreams that
// choose a fault at random for every attempt. It asserts that every
// request is answered (a whole answer, or a clean error: an HTTP error
// before anything was sent, or an in-band error event and no [DONE] after),
// that no answer that ends normally is truncated, duplicated or spliced
// from two attempts (every chunk is tagged by the upstream), and that
// nothing leaks: goroutines, connections on the gateway's listener or on
// the upstreams'. Then the gateway must be healthy and its metrics must
// count every request.
//
// It runs three variants of 3 s of load each (1 s with -short). RETRYHOST_SOAK=2m runs longer;
// RETRYHOST_SOAK_SEED=N replays the faults of a failed run (each attempt's
// fault is a function of the seed, the request, the model and the
// attempt's number, so a replay has the same faults even though the
// scheduling differs).
func TestSoak(t *testing.T) {
	load := 3 * time.Second // each variant
	if testing.Short() {
		load = time.Second
	}
	if v := os.Getenv("RETRYHOST_SOAK"); v != "" {
		d, err := time.ParseDuration(v)
		require.NoError(t, err, "RETRYHOST_SOAK")
		load = d
	}
	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv("RETRYHOST_SOAK_SEED"); v != "" {
		s, err := strconv.ParseUint(v, 10, 64)
		require.NoError(t, err, "RETRYHOST_SOAK_SEED")
		seed = s
	}
	t.Logf("soak: seed %d, %v of load per variant (replay: RETRYHOST_SOAK_SEED=%d)", seed, load, seed)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("soak FAILED with seed %d: replay with RETRYHOST_SOAK_SEED=%d", seed, seed)
		}
	})
	// The native path, then the policy's Wasm transform on every part
	// (the built-in refusal plugin) with the policy reloaded under load.
	t.Run("native", func(t *testing.T) { soakRun(t, seed, load, "", false) })
	t.Run("wasm-transform-and-reloads", func(t *testing.T) {
		soakRun(t, seed+1, load, `"transforms": [{"plugin": {"builtin": "refusal", "fail": "open"}}],`, true)
	})
	// Hedged attempts: a second attempt beside one without first content
	// after 150 ms; the loser must be cancelled and its connection freed.
	t.Run("hedge", func(t *testing.T) { soakRun(t, seed+2, load, `"hedge": {"after": "150ms", "max": 2},`, false) })
}

func soakRun(t *testing.T, seed uint64, load time.Duration, transforms string, reloads bool) {
	before := goleak.IgnoreCurrent()
	up := newFaultServer(seed)
	pol := fmt.Sprintf(`{
		"models": [
			{"name": "a", "provider": "openai", "model": "a", "base_url": %[1]q, "api_key_env": "K"},
			{"name": "b", "provider": "openai", "model": "b", "base_url": %[1]q, "api_key_env": "K"},
			{"name": "c", "provider": "openai", "model": "c", "base_url": %[1]q, "api_key_env": "K"}
		],
		"rules": [
			{"when": {"status": [429]}, "action": "retry", "attempts": 2},
			{"when": {"class": ["server", "overloaded", "network", "timeout", "rate-limit"]}, "action": "switch", "model": "b"},
			{"when": {"class": ["server", "overloaded", "network", "timeout", "rate-limit"]}, "action": "switch", "model": "c"},
			{"when": {"class": ["server", "overloaded", "network", "timeout", "rate-limit"]}, "action": "switch", "model": "a"}
		],
		"backoff": {"delay": "50ms", "factor": 2, "max_delay": "400ms", "jitter": "full"},
		"deadlines": {"first_content": "400ms", "gap": "300ms", "budget": "5s"},
		%[2]s
		"cooldown": {"failures": 3, "for": "300ms"}
	}`, up.srv.URL+"/v1", transforms)
	logs := &testkit.LogBuffer{}
	gw, err := New(context.Background(), Bytes("soak.json", []byte(pol), policy.Options{Getenv: func(string) string { return "sk" }, Builtin: plugins.Module}),
		WithLogger(newJSONLogger(logs)), WithUpstreamHeaderTimeout(300*time.Millisecond), WithMaxConcurrent(20))
	require.NoError(t, err)
	gsrv := httptest.NewUnstartedServer(gw)
	gln := &trackingListener{Listener: gsrv.Listener}
	gsrv.Listener = gln
	gsrv.Start()
	closed := false
	shutdown := func() {
		if closed {
			return
		}
		closed = true
		gsrv.Close()
		require.NoError(t, gw.Close(context.Background()))
		up.srv.Close()
	}
	defer shutdown()

	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	client := oai.NewClient(option.WithBaseURL(gsrv.URL+"/v1"), option.WithAPIKey("k"),
		option.WithMaxRetries(0), option.WithHTTPClient(hc))
	s := &soak{t: t, url: gsrv.URL, hc: hc, client: client, up: up}

	const workers = 24
	stop := time.Now().Add(load)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, uint64(w)))
			for i := 0; time.Now().Before(stop); i++ {
				s.one(fmt.Sprintf("w%d-%d", w, i), rng)
			}
		}()
	}
	var reloaded atomic.Int64
	if reloads {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(stop) {
				if err := gw.Reload(context.Background()); err != nil {
					s.fail("reload", "%v", err)
				}
				reloaded.Add(1)
				time.Sleep(200 * time.Millisecond)
			}
		}()
	}
	wg.Wait()
	if reloads {
		require.Positive(t, reloaded.Load())
		t.Logf("soak: %d reloads under load", reloaded.Load())
	}
	total := s.sent.Load()
	t.Logf("soak: %d requests: %d whole, %d clean errors before commit (%d of them the gateway's 429: full), %d in-band errors, %d cancelled by the client mid-stream, %d impatient (gone at a random moment); %d upstream attempts",
		total, s.whole.Load(), s.httpErr.Load(), s.busy.Load(), s.inBand.Load(), s.cancelled.Load(), s.impatient.Load(), up.attempts.Load())
	t.Logf("soak: faults chosen: %v", up.counts())
	s.report()
	require.Positive(t, s.whole.Load(), "no request succeeded at all")

	// Nothing is left open on the gateway's listener once clients close
	// their idle connections.
	require.Eventually(t, func() bool {
		hc.CloseIdleConnections()
		return gln.open.Load() == 0
	}, 10*time.Second, 10*time.Millisecond,
		"connections left open on the gateway's listener: %d", gln.open.Load())

	// The gateway is healthy after it all.
	up.calm.Store(true)
	cc, err := client.Chat.Completions.New(context.Background(), soakParams("after"))
	require.NoError(t, err, "the gateway is not healthy after the soak")
	require.NoError(t, checkTagged(cc.Choices[0].Message.Content, true))
	total++

	// Metrics: one request counted per request sent, nothing in flight.
	var body string
	require.Eventually(t, func() bool {
		resp, err := hc.Get(gsrv.URL + "/metrics")
		require.NoError(t, err)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		body = string(b)
		return strings.Contains(body, "retryhost_gateway_inflight_requests 0\n") &&
			strings.Contains(body, "retryhost_gateway_inflight_streams 0\n")
	}, 10*time.Second, 10*time.Millisecond, "requests still in flight after every client has its answer")
	// An impatient client may give up before its request reached the
	// gateway: every other request is counted once.
	counted := sumSeries(body, "retryhost_gateway_requests_total{")
	require.LessOrEqual(t, counted, float64(total), "requests_total counts more requests than were sent")
	require.GreaterOrEqual(t, counted, float64(total-s.impatient.Load()), "requests_total misses requests")
	okCount := sumSeries(body, `retryhost_gateway_requests_total{code="200",outcome="ok"`)
	require.GreaterOrEqual(t, okCount, float64(s.whole.Load()), "every whole answer is counted as ok")
	require.LessOrEqual(t, okCount, float64(s.whole.Load()+s.cancelled.Load()+s.impatient.Load()), "an ok the client did not get whole")
	require.GreaterOrEqual(t, sumSeries(body, "retryhost_gateway_commits_total{"), okCount, "ok answers without a commit")
	// A client that cancels mid-stream leaves some malformed events unread.
	if sent := up.malformedSent.Load(); sent > 0 {
		skipped := sumSeries(body, "retryhost_gateway_upstream_malformed_events_total")
		require.Positive(t, skipped, "malformed events skipped but not counted")
		require.LessOrEqual(t, skipped, float64(sent), "more malformed events counted than sent")
	}

	// Nothing is left open on the upstream's listener once the gateway
	// closes its idle upstream connections: a response body the gateway
	// forgot to close would hold its connection.
	require.Eventually(t, func() bool {
		// Again and again: a connection dialled for a request that gave up
		// joins the idle pool when its dial completes.
		hc.CloseIdleConnections()
		gw.client.CloseIdleConnections()
		return up.ln.open.Load() == 0
	}, 10*time.Second, 10*time.Millisecond,
		"connections left open on the upstream's listener: %d (handlers running: %v; they served last: %q)", up.ln.open.Load(), up.running(), up.ln.lasts())

	shutdown()
	goleak.VerifyNone(t, before)
}

// soak is the clients' side of TestSoak.
type soak struct {
	t      *testing.T
	url    string
	hc     *http.Client
	client oai.Client
	up     *faultServer

	sent, whole, httpErr, busy, inBand, cancelled, impatient atomic.Int64

	mu       sync.Mutex
	failures []string
}

func (s *soak) fail(id, format string, args ...any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failures = append(s.failures, fmt.Sprintf("%s: %s (faults: %s)", id, fmt.Sprintf(format, args...), s.up.history(id)))
}

// report fails the test with the first failures, each with its faults.
func (s *soak) report() {
	s.t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.failures) == 0 {
		return
	}
	n := min(len(s.failures), 25)
	s.t.Fatalf("%d of %d requests went wrong; the first %d:\n%s", len(s.failures), s.sent.Load(), n,
		strings.Join(s.failures[:n], "\n"))
}

// busyWait checks the gateway's own 429 (it is full) has a Retry-After,
// and waits a little before the client's next request, as a client would
// (not the whole Retry-After: the soak wants load).
func (s *soak) busyWait(id string, status int, h http.Header, body []byte) {
	if status != http.StatusTooManyRequests || !strings.Contains(string(body), "gateway_busy") {
		return
	}
	s.busy.Add(1)
	if h.Get("Retry-After") == "" {
		s.fail(id, "the gateway's 429 has no Retry-After")
	}
	time.Sleep(50 * time.Millisecond)
}

func soakParams(id string) oai.ChatCompletionNewParams {
	return oai.ChatCompletionNewParams{Model: "a", Messages: []oai.ChatCompletionMessageParamUnion{oai.UserMessage(id)}}
}

// one sends one request the way a randomly chosen client would.
func (s *soak) one(id string, rng *rand.Rand) {
	s.sent.Add(1)
	// A request not answered in this long was never answered: the policy's
	// budget is 5 s and the longest Retry-After 2 s.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	route := []string{"a", "b", "c"}[rng.IntN(3)]
	switch k := rng.IntN(11); {
	case k == 10:
		// An impatient client: gone at a random moment, often before the
		// first content (the gateway must let go of the upstream too).
		ictx, icancel := context.WithTimeout(ctx, time.Duration(20+rng.IntN(400))*time.Millisecond)
		defer icancel()
		if rng.IntN(2) == 0 {
			s.sdkStream(ictx, id, route, false)
		} else {
			s.rawCall(ictx, id, route)
		}
		s.impatient.Add(1)
	case k < 3:
		s.sdkStream(ctx, id, route, false)
	case k < 4:
		s.sdkStream(ctx, id, route, true)
	case k < 6:
		s.sdkCall(ctx, id, route)
	case k < 8:
		s.rawStream(ctx, id, route, rng.IntN(4) == 0)
	default:
		s.rawCall(ctx, id, route)
	}
	if ctx.Err() != nil && !errors.Is(ctx.Err(), context.Canceled) {
		s.fail(id, "not answered within 30 s")
	}
}

func (s *soak) sdkStream(ctx context.Context, id, route string, cancelMid bool) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	p := soakParams(id)
	p.Model = route
	p.StreamOptions.IncludeUsage = oai.Bool(true)
	st := s.client.Chat.Completions.NewStreaming(ctx, p)
	defer st.Close()
	var (
		text   strings.Builder
		finish string
		models = map[string]bool{}
	)
	for st.Next() {
		c := st.Current()
		models[c.Model] = true
		for _, ch := range c.Choices {
			text.WriteString(ch.Delta.Content)
			if ch.FinishReason != "" {
				finish = ch.FinishReason
			}
		}
		if cancelMid && text.Len() > 0 {
			cancel()
			s.cancelled.Add(1)
			if err := checkTagged(text.String(), false); err != nil {
				s.fail(id, "sdk stream, cancelled: %v", err)
			}
			return
		}
	}
	if err := st.Err(); err != nil {
		var apiErr *oai.Error
		if errors.As(err, &apiErr) && apiErr.StatusCode != 0 {
			s.httpErr.Add(1)
			if text.Len() > 0 {
				s.fail(id, "sdk stream: HTTP %d after content", apiErr.StatusCode)
			}
			s.busyWait(id, apiErr.StatusCode, apiErr.Response.Header, []byte(apiErr.RawJSON()))
			return
		}
		if ctx.Err() != nil {
			return // the watchdog's: reported by one
		}
		// An in-band error after commit: what came before is a prefix.
		s.inBand.Add(1)
		if err := checkTagged(text.String(), false); err != nil {
			s.fail(id, "sdk stream, in-band error: %v", err)
		}
		return
	}
	if err := checkTagged(text.String(), true); err != nil {
		s.fail(id, "sdk stream ended normally: %v", err)
		return
	}
	if finish != "stop" || len(models) != 1 {
		s.fail(id, "sdk stream ended normally: finish %q, models %v", finish, models)
		return
	}
	s.whole.Add(1)
}

func (s *soak) sdkCall(ctx context.Context, id, route string) {
	p := soakParams(id)
	p.Model = route
	cc, err := s.client.Chat.Completions.New(ctx, p)
	if err != nil {
		var apiErr *oai.Error
		if errors.As(err, &apiErr) && apiErr.StatusCode >= 400 {
			s.httpErr.Add(1)
			s.busyWait(id, apiErr.StatusCode, apiErr.Response.Header, []byte(apiErr.RawJSON()))
			return
		}
		if ctx.Err() == nil {
			s.fail(id, "sdk call: not an HTTP error: %v", err)
		}
		return
	}
	if len(cc.Choices) != 1 {
		s.fail(id, "sdk call: %d choices", len(cc.Choices))
		return
	}
	s.wholeAnswer(id, "sdk call", cc.Choices[0].Message.Content, cc.Choices[0].FinishReason)
}

func (s *soak) post(ctx context.Context, id, route string, stream bool) (*http.Response, error) {
	body := fmt.Sprintf(`{"model":%q,"stream":%t,"messages":[{"role":"user","content":%q}]}`, route, stream, id)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.url+"/v1/chat/completions", strings.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	return s.hc.Do(req)
}

func (s *soak) rawStream(ctx context.Context, id, route string, cancelMid bool) {
	resp, err := s.post(ctx, id, route, true)
	if err != nil {
		if ctx.Err() == nil {
			s.fail(id, "raw stream: %v", err)
		}
		return
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		s.httpErr.Add(1)
		b, _ := io.ReadAll(resp.Body)
		if !isErrorObject(b) {
			s.fail(id, "raw stream: HTTP %d without an error object: %q", resp.StatusCode, b)
		}
		s.busyWait(id, resp.StatusCode, resp.Header, b)
		return
	}
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		s.fail(id, "raw stream: 200 with Content-Type %q", ct)
		return
	}
	var (
		text   strings.Builder
		finish string
		model  string
		done   bool
		errEv  bool
	)
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok {
			if strings.HasPrefix(line, ": retryhost {") && (done || errEv) {
				continue // the attempt trail, after the end
			}
			if line != "" {
				s.fail(id, "raw stream: a line that is not data: %q", line)
				return
			}
			continue
		}
		if done || errEv {
			s.fail(id, "raw stream: an event after [DONE] or the error: %q", data)
			return
		}
		if data == "[DONE]" {
			done = true
			continue
		}
		var ev struct {
			Model   string
			Error   *struct{ Type, Code, Message string }
			Choices []struct {
				Delta        struct{ Content string }
				FinishReason *string `json:"finish_reason"`
			}
		}
		if err := json.Unmarshal([]byte(data), &ev); err != nil {
			s.fail(id, "raw stream: an event that is not JSON: %q", data)
			return
		}
		if ev.Error != nil {
			errEv = true
			continue
		}
		if model == "" {
			model = ev.Model
		} else if ev.Model != model {
			s.fail(id, "raw stream: model %q then %q", model, ev.Model)
			return
		}
		for _, c := range ev.Choices {
			text.WriteString(c.Delta.Content)
			if c.FinishReason != nil {
				finish = *c.FinishReason
			}
		}
		if cancelMid && text.Len() > 0 {
			s.cancelled.Add(1)
			if err := checkTagged(text.String(), false); err != nil {
				s.fail(id, "raw stream, cancelled: %v", err)
			}
			return // the deferred Close cancels the request mid-stream
		}
	}
	switch {
	case sc.Err() != nil:
		if ctx.Err() == nil {
			s.fail(id, "raw stream: reading: %v", sc.Err())
		}
	case done:
		if err := checkTagged(text.String(), true); err != nil {
			s.fail(id, "raw stream ended with [DONE]: %v", err)
			return
		}
		if finish != "stop" {
			s.fail(id, "raw stream ended with [DONE]: finish %q", finish)
			return
		}
		s.whole.Add(1)
	case errEv:
		s.inBand.Add(1)
		if err := checkTagged(text.String(), false); err != nil {
			s.fail(id, "raw stream, in-band error: %v", err)
		}
	default:
		s.fail(id, "raw stream: ended with neither [DONE] nor an error event (text %q)", text.String())
	}
}

func (s *soak) rawCall(ctx context.Context, id, route string) {
	resp, err := s.post(ctx, id, route, false)
	if err != nil {
		if ctx.Err() == nil {
			s.fail(id, "raw call: %v", err)
		}
		return
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		if ctx.Err() == nil {
			s.fail(id, "raw call: reading: %v", err)
		}
		return
	}
	if resp.StatusCode != http.StatusOK {
		s.httpErr.Add(1)
		if !isErrorObject(b) {
			s.fail(id, "raw call: HTTP %d without an error object: %q", resp.StatusCode, b)
		}
		s.busyWait(id, resp.StatusCode, resp.Header, b)
		return
	}
	var cc struct {
		Model   string
		Choices []struct {
			Message      struct{ Content string }
			FinishReason string `json:"finish_reason"`
		}
	}
	if err := json.Unmarshal(b, &cc); err != nil || len(cc.Choices) != 1 {
		s.fail(id, "raw call: 200 with %q", b)
		return
	}
	s.wholeAnswer(id, "raw call", cc.Choices[0].Message.Content, cc.Choices[0].FinishReason)
}

// wholeAnswer counts a non-streamed answer whole when its text is all of
// one upstream answer's chunks, in order, and it finished with stop; else it
// fails the call named how.
func (s *soak) wholeAnswer(id, how, text, finish string) {
	if err := checkTagged(text, true); err != nil {
		s.fail(id, "%s: %v", how, err)
		return
	}
	if finish != "stop" {
		s.fail(id, "%s: finish %q", how, finish)
		return
	}
	s.whole.Add(1)
}

// An answer's chunks are "[TAG:i/n]": TAG names the upstream's answer, i
// counts from 0 to n-1.
var tagRE = regexp.MustCompile(`^\[([0-9a-f]{16}):(\d+)/(\d+)\]`)

// checkTagged checks that text is one upstream answer's chunks, each once
// and in order: all of them when whole, else a prefix.
func checkTagged(text string, whole bool) error {
	var tag string
	next, n := 0, -1
	for rest := text; rest != ""; {
		m := tagRE.FindStringSubmatch(rest)
		if m == nil {
			return fmt.Errorf("not a tagged chunk at %q (text %q)", rest, text)
		}
		i, _ := strconv.Atoi(m[2])
		cnt, _ := strconv.Atoi(m[3])
		switch {
		case tag == "":
			tag, n = m[1], cnt
		case m[1] != tag:
			return fmt.Errorf("chunks of two answers spliced: %s then %s (text %q)", tag, m[1], text)
		}
		if i != next || cnt != n {
			return fmt.Errorf("chunk %d/%d where %d/%d was due: dropped or duplicated (text %q)", i, cnt, next, n, text)
		}
		next++
		rest = rest[len(m[0]):]
	}
	if whole && (n < 0 || next != n) {
		return fmt.Errorf("truncated: %d of %d chunks (text %q)", next, n, text)
	}
	return nil
}

// sumSeries adds up the values of the metric lines that start with prefix.
func sumSeries(body, prefix string) float64 {
	var sum float64
	for _, l := range strings.Split(body, "\n") {
		if !strings.HasPrefix(l, prefix) {
			continue
		}
		if i := strings.LastIndexByte(l, ' '); i > 0 {
			v, err := strconv.ParseFloat(l[i+1:], 64)
			if err == nil {
				sum += v
			}
		}
	}
	return sum
}

// trackingListener counts the connections it accepted that are still open.
type trackingListener struct {
	net.Listener
	open atomic.Int64

	mu    sync.Mutex
	conns map[*trackedConn]bool
}

// lasts names what each open connection last served (see trackedConn.last).
func (l *trackingListener) lasts() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for c := range l.conns {
		v, _ := c.last.Load().(string)
		out = append(out, v)
	}
	return out
}

type connKey struct{}

func (l *trackingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	l.open.Add(1)
	tc := &trackedConn{Conn: c, l: l}
	l.mu.Lock()
	if l.conns == nil {
		l.conns = map[*trackedConn]bool{}
	}
	l.conns[tc] = true
	l.mu.Unlock()
	return tc, nil
}

type trackedConn struct {
	net.Conn
	l    *trackingListener
	once sync.Once
	last atomic.Value // string: what it served last
}

func (c *trackedConn) Close() error {
	c.once.Do(func() {
		c.l.open.Add(-1)
		c.l.mu.Lock()
		delete(c.l.conns, c)
		c.l.mu.Unlock()
	})
	return c.Conn.Close()
}

// The faults the soak's upstream chooses from, with their weights.
type fault int

const (
	fOK fault = iota
	fOKMalformed
	f429Seconds
	f429Millis
	f429Date
	f429Bare
	f500
	f503
	fResetBeforeHeaders
	fResetBeforeContent
	fResetAfterContent
	fSilentHeaders
	fSilentFirstContent
	fSilentIdle
	fMalformedOnly
	fNoEndBeforeContent
	fNoEndAfterContent
	fSlowFirstToken
	f400Policy
	nFaults
)

var faultNames = [nFaults]string{"ok", "ok+malformed", "429 seconds", "429 ms", "429 date", "429 bare", "500", "503",
	"reset before headers", "reset before content", "reset after content", "silent headers",
	"silent first content", "silent idle", "malformed only", "no end before content", "no end after content",
	"slow first token", "400 content policy"}

var faultWeights = [nFaults]int{fOK: 50, fOKMalformed: 6, f429Seconds: 2, f429Millis: 3, f429Date: 1, f429Bare: 3,
	f500: 4, f503: 4, fResetBeforeHeaders: 3, fResetBeforeContent: 3, fResetAfterContent: 3, fSilentHeaders: 2,
	fSilentFirstContent: 2, fSilentIdle: 2, fMalformedOnly: 2, fNoEndBeforeContent: 2, fNoEndAfterContent: 2,
	fSlowFirstToken: 2, f400Policy: 1}

// faultServer is the soak's upstream: an OpenAI-compatible server that
// answers each attempt with a fault chosen from the seed, the request's id
// (the user message), the model and the attempt's number.
type faultServer struct {
	seed uint64
	srv  *httptest.Server
	ln   *trackingListener
	calm atomic.Bool // no more faults

	attempts, malformedSent atomic.Int64
	active                  [nFaults]atomic.Int64 // handlers running, by fault

	mu     sync.Mutex
	tries  map[string]int      // id/model → attempts
	faults map[string][]string // id → "model:fault" per attempt
	count  [nFaults]int
}

func newFaultServer(seed uint64) *faultServer {
	f := &faultServer{seed: seed, tries: map[string]int{}, faults: map[string][]string{}}
	f.srv = httptest.NewUnstartedServer(http.HandlerFunc(f.serve))
	f.srv.Config.ConnContext = func(ctx context.Context, c net.Conn) context.Context {
		return context.WithValue(ctx, connKey{}, c)
	}
	f.ln = &trackingListener{Listener: f.srv.Listener}
	f.srv.Listener = f.ln
	f.srv.Start()
	return f
}

func (f *faultServer) history(id string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return strings.Join(f.faults[id], ", ")
}

// running names the faults whose handlers have not returned.
func (f *faultServer) running() map[string]int64 {
	m := map[string]int64{}
	for i := range f.active {
		if n := f.active[i].Load(); n != 0 {
			m[faultNames[i]] = n
		}
	}
	return m
}

func (f *faultServer) counts() map[string]int {
	f.mu.Lock()
	defer f.mu.Unlock()
	m := map[string]int{}
	for i, n := range f.count {
		if n > 0 {
			m[faultNames[i]] = n
		}
	}
	return m
}

func (f *faultServer) choose(id, model string) (fault, *rand.Rand) {
	f.mu.Lock()
	defer f.mu.Unlock()
	k := id + "/" + model
	n := f.tries[k]
	f.tries[k] = n + 1
	h := fnv.New64a()
	fmt.Fprintf(h, "%s/%d", k, n)
	rng := rand.New(rand.NewPCG(f.seed, h.Sum64()))
	fl := fOK
	if !f.calm.Load() {
		sum := 0
		for _, w := range faultWeights {
			sum += w
		}
		x := rng.IntN(sum)
		for i, w := range faultWeights {
			if x < w {
				fl = fault(i)
				break
			}
			x -= w
		}
	}
	f.faults[id] = append(f.faults[id], model+":"+faultNames[fl])
	f.count[fl]++
	return fl, rng
}

func (f *faultServer) serve(w http.ResponseWriter, r *http.Request) {
	f.attempts.Add(1)
	var req struct {
		Model    string
		Messages []struct{ Content string }
	}
	b, _ := io.ReadAll(r.Body)
	if json.Unmarshal(b, &req) != nil || len(req.Messages) == 0 {
		http.Error(w, `{"error":{"message":"bad body","type":"invalid_request_error"}}`, http.StatusBadRequest)
		return
	}
	fl, rng := f.choose(req.Messages[0].Content, req.Model)
	if c, ok := r.Context().Value(connKey{}).(*trackedConn); ok {
		c.last.Store(faultNames[fl])
	}
	f.active[fl].Add(1)
	defer f.active[fl].Add(-1)
	hold := func(d time.Duration) bool { // false: the gateway went away
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
			return true
		case <-r.Context().Done():
			return false
		}
	}
	errBody := func(status int, typ, code string) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		fmt.Fprintf(w, `{"error":{"message":"soak %d","type":%q,"param":null,"code":%q}}`, status, typ, code)
	}
	reset := func() {
		if c, _, err := w.(http.Hijacker).Hijack(); err == nil {
			_ = c.Close()
		}
	}
	switch fl {
	case f429Seconds:
		w.Header().Set("Retry-After", "1")
		errBody(429, "rate_limit_error", "rate_limit_exceeded")
		return
	case f429Millis:
		w.Header().Set("Retry-After-Ms", strconv.Itoa(20+rng.IntN(200)))
		errBody(429, "rate_limit_error", "rate_limit_exceeded")
		return
	case f429Date:
		w.Header().Set("Retry-After", time.Now().Add(time.Second).UTC().Format(http.TimeFormat))
		errBody(429, "rate_limit_error", "rate_limit_exceeded")
		return
	case f429Bare:
		errBody(429, "rate_limit_error", "rate_limit_exceeded")
		return
	case f500:
		errBody(500, "server_error", "")
		return
	case f503:
		errBody(503, "server_error", "overloaded")
		return
	case f400Policy:
		errBody(400, "invalid_request_error", "content_policy_violation")
		return
	case fResetBeforeHeaders:
		reset()
		return
	case fSilentHeaders:
		hold(time.Minute)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	fl2 := w.(http.Flusher)
	var tag [8]byte
	for i := range tag {
		tag[i] = byte(rng.Uint32())
	}
	n := 1 + rng.IntN(8)
	chunk := func(delta, finish string) string {
		fin := "null"
		if finish != "" {
			fin = strconv.Quote(finish)
		}
		return fmt.Sprintf(`data: {"id":"chatcmpl-soak","object":"chat.completion.chunk","created":1764374400,"model":%q,"choices":[{"index":0,"delta":%s,"finish_reason":%s}]}`+"\n\n",
			req.Model, delta, fin)
	}
	send := func(s string) bool {
		if _, err := io.WriteString(w, s); err != nil {
			return false
		}
		fl2.Flush()
		return true
	}
	malformed := func() bool {
		f.malformedSent.Add(1)
		return send("data: {\"choices\": [ not json\n\n")
	}
	if !send(chunk(`{"role":"assistant","content":""}`, "")) {
		return
	}
	switch fl {
	case fResetBeforeContent:
		reset()
		return
	case fSilentFirstContent:
		hold(time.Minute)
		return
	case fMalformedOnly:
		for range 3 {
			if !malformed() {
				return
			}
		}
		return // and no end
	case fNoEndBeforeContent:
		return
	case fSlowFirstToken:
		if !hold(time.Second) { // past the first-content deadline
			return
		}
	}
	cut := n // the chunks sent before a fault after content
	if fl == fResetAfterContent || fl == fSilentIdle || fl == fNoEndAfterContent {
		cut = 1 + rng.IntN(n)
	}
	for i := range cut {
		if fl == fOKMalformed && rng.IntN(2) == 0 && !malformed() {
			return
		}
		text := fmt.Sprintf("[%x:%d/%d]", tag, i, n)
		if !send(chunk(`{"content":`+strconv.Quote(text)+`}`, "")) {
			return
		}
		if rng.IntN(4) == 0 && !hold(time.Duration(rng.IntN(30))*time.Millisecond) {
			return
		}
	}
	switch fl {
	case fResetAfterContent:
		reset()
		return
	case fSilentIdle:
		hold(time.Minute)
		return
	case fNoEndAfterContent:
		return
	}
	send(chunk(`{}`, "stop"))
	send(fmt.Sprintf(`data: {"id":"chatcmpl-soak","object":"chat.completion.chunk","created":1764374400,"model":%q,"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":%d,"total_tokens":%d}}`+"\n\n",
		req.Model, n, 3+n))
	send("data: [DONE]\n\n")
}

func TestCheckTagged(t *testing.T) {
	for _, c := range []struct {
		text         string
		whole, prefx bool
	}{
		{"[00112233aabbccdd:0/2][00112233aabbccdd:1/2]", true, true},
		{"[00112233aabbccdd:0/2]", false, true},
		{"", false, true},
		{"[00112233aabbccdd:0/2][00112233aabbccdd:0/2]", false, false},
		{"[00112233aabbccdd:1/2]", false, false},
		{"[00112233aabbccdd:0/2][ffffffffffffffff:1/2]", false, false},
		{"[00112233aabbccdd:0/2]x", false, false},
	} {
		require.Equal(t, c.whole, checkTagged(c.text, true) == nil, "%q whole", c.text)
		require.Equal(t, c.prefx, checkTagged(c.text, false) == nil, "%q prefix", c.text)
	}
}
