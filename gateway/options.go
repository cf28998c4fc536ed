package gateway

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	"github.com/retryhost/retryhost/gateway/vkey"
)

// Option configures a Gateway.
type Option func(*config) error

type config struct {
	keys            [][sha256.Size]byte
	keySet          *vkey.Set    // WithKeySet
	limiter         vkey.Limiter // WithLimiter; nil: a vkey.Local
	maxBody         int64
	bodyBudget      int64
	maxConcurrent   int
	maxPerClient    int // 0: maxConcurrent/defaultPerClientShare
	upstreamConns   int
	headerTimeout   time.Duration
	writeTimeout    time.Duration
	readTimeout     time.Duration
	logger          *slog.Logger
	retryAfterBusy  time.Duration
	httpClientGiven bool
	pluginPoll      time.Duration
	collectors      []prometheus.Collector
	maxAnswer       int64 // WithMaxAnswerBytes; 0: the driver's default
	// defaultsScale multiplies the durations of the policy defaults the
	// gateway gives (backoff, cooldown, deadlines), so that tests run the
	// defaults' behaviour in milliseconds; 0 is 1.
	defaultsScale float64
	keyLabels     int         // WithKeyLabel; 0: no key label
	requestLog    *requestLog // WithRequestLog; nil: none
	// tracerProvider is WithTracerProvider's; nil: no tracing.
	tracerProvider trace.TracerProvider
}

// WithAPIKeys makes every endpoint but /healthz and /readyz require one of
// keys, as "Authorization: Bearer KEY" (what OpenAI clients send) or
// "X-Api-Key: KEY" (a request with both is served if either is a key);
// anything else gets 401. Keys are compared in constant
// time, each against its SHA-256. Calling it again adds keys; empty keys are
// an error. Whitespace around a key is not part of it (a key read with
// os.ReadFile keeps its final newline), as it is not of the key a client
// sends. Default: no keys, every client is served (bind to loopback).
func WithAPIKeys(keys ...string) Option {
	return func(c *config) error {
		for i, k := range keys {
			k = strings.TrimSpace(k)
			if k == "" {
				return fmt.Errorf("gateway: API key %d is empty", i)
			}
			c.keys = append(c.keys, sha256.Sum256([]byte(k)))
		}
		return nil
	}
}

// WithMaxBodyBytes caps a request body; a larger one gets 413. Default 8 MiB.
func WithMaxBodyBytes(n int64) Option {
	return func(c *config) error {
		if n <= 0 {
			return fmt.Errorf("gateway: max body bytes must be positive, got %d", n)
		}
		c.maxBody = n
		return nil
	}
}

// WithBodyBudget caps the memory that the request bodies in flight hold,
// across every request, at n bytes. A request is charged, while its body
// arrives, 2 bytes a byte; once it is read and until the request commits,
// 8 bytes a byte and 384 bytes a JSON value in it (what parsing it and
// encoding it for the upstream take at most); from commit to its end, 2
// bytes a byte. A request that does not fit gets 429 with Retry-After
// (code gateway_busy), as when the gateway is full, mid-body with the
// connection closed, counted in
// retryhost_gateway_body_budget_rejections_total; one that needs more
// than n alone gets 413. retryhost_gateway_body_budget_used_bytes is what
// is charged now. Default 512 MiB, sized for a 2-core machine (see
// docs/security.md); New refuses an n that holds no body of
// WithMaxBodyBytes' size (8 times it).
func WithBodyBudget(n int64) Option {
	return func(c *config) error {
		if n <= 0 {
			return fmt.Errorf("gateway: body budget must be positive, got %d", n)
		}
		c.bodyBudget = n
		return nil
	}
}

// WithMaxAnswerBytes caps the answer a non-streaming request holds until it
// is complete (it commits at its end, driver.CommitAtEnd), per attempt, as
// driver.WithMaxAnswerBytes counts it; past it the attempt fails
// (driver.ErrAnswerTooLarge) and the policy's rules decide; a request whose
// every attempt failed so gets 502 (code answer_too_large). Streams are not
// bounded by it: they hold nothing past their preamble. Default 32 MiB
// (driver.DefaultMaxAnswerBytes).
func WithMaxAnswerBytes(n int64) Option {
	return func(c *config) error {
		if n <= 0 {
			return fmt.Errorf("gateway: max answer bytes must be positive, got %d", n)
		}
		c.maxAnswer = n
		return nil
	}
}

// WithMaxConcurrent caps the chat requests in flight; one more gets 429
// with Retry-After from the gateway itself, without reaching any upstream.
// Default 1024.
func WithMaxConcurrent(n int) Option {
	return func(c *config) error {
		if n <= 0 {
			return fmt.Errorf("gateway: max concurrent requests must be positive, got %d", n)
		}
		c.maxConcurrent = n
		return nil
	}
}

// defaultPerClientShare: by default one client may hold a quarter of the
// WithMaxConcurrent slots, so that a client trickling its bodies (each
// holds its slot for up to WithReadTimeout) cannot hold them all.
const defaultPerClientShare = 4

// WithMaxConcurrentPerClient caps the chat requests in flight from one
// client: the API key it presents when the gateway requires keys, else its
// remote IP address. One more gets 429 (code client_busy) with
// Retry-After. Behind a proxy without keys every request comes from the
// proxy's address: raise the cap to WithMaxConcurrent's there. Default: a
// quarter of WithMaxConcurrent (256 of 1024), at least 1.
func WithMaxConcurrentPerClient(n int) Option {
	return func(c *config) error {
		if n <= 0 {
			return fmt.Errorf("gateway: max concurrent requests per client must be positive, got %d", n)
		}
		c.maxPerClient = n
		return nil
	}
}

// The buffers of each HTTP/1.1 connection of the gateway's upstream client
// (net/http's default is 4 KiB each). A held stream keeps its connection,
// so these are memory per open stream. The read buffer only batches reads
// for the SSE line reader above it, which has its own buffer (and a read
// bigger than the buffer bypasses it), so 2 KiB costs at most a read more
// for a burst past it. The write buffer carries only the request's headers:
// net/http flushes them on their own (the SDK's body is not a reader it
// knows to be in memory) and then copies the body to the connection past
// the buffer, so a request is two writes with 4 KiB or 1 KiB alike while its
// headers fit (about 630 bytes with a 164-character API key;
// TestUpstreamRequestWrites). An HTTP/2 upstream multiplexes streams on a
// connection with buffers of its own.
const (
	upstreamReadBuffer  = 2 << 10
	upstreamWriteBuffer = 1 << 10
)

// upstreamMaxHeaderBytes bounds an upstream's response headers (net/http's
// default is 10 MiB, per request in flight). Providers send a few KiB;
// Envoy's default cap is 60 KiB. Past it the attempt fails as a cut
// connection and the rules decide.
const upstreamMaxHeaderBytes = 64 << 10

// WithUpstreamConns caps the connections to each upstream host (idle and
// active; requests beyond it wait for one). Default 256. It applies when the
// Source's policy.Options bring no HTTPClient of their own.
func WithUpstreamConns(n int) Option {
	return func(c *config) error {
		if n <= 0 {
			return fmt.Errorf("gateway: upstream connections must be positive, got %d", n)
		}
		c.upstreamConns = n
		return nil
	}
}

// WithUpstreamHeaderTimeout bounds the wait for an upstream's response
// headers; past it the attempt fails as a timeout (and fails over as the
// policy says). The policy's first-content deadline bounds the wait for
// content as well. Default 60s. It applies to streaming clients' requests,
// when the Source's policy.Options bring no HTTPClient of their own: a
// non-streaming client's request may be non-streamed upstream (a model's
// "upstream_json"), whose headers come with the whole answer, so the
// first-content deadline alone bounds it.
func WithUpstreamHeaderTimeout(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 {
			return fmt.Errorf("gateway: upstream header timeout must be positive, got %v", d)
		}
		c.headerTimeout = d
		return nil
	}
}

// WithWriteTimeout bounds each write to a client (one SSE event, or the
// whole JSON answer): a client that stops reading loses its stream instead
// of holding an upstream open. Default 30s.
func WithWriteTimeout(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 {
			return fmt.Errorf("gateway: write timeout must be positive, got %v", d)
		}
		c.writeTimeout = d
		return nil
	}
}

// WithReadTimeout bounds the reading of a request's body; past it the
// answer is 408. A request holds one of the WithMaxConcurrent slots while
// its body arrives (WithBodyBudget bounds the memory the bodies hold), so
// the timeout bounds how long a client that trickles its body holds one,
// not whether it does: a client that trickles many bodies at once holds at
// most its share of the slots (WithMaxConcurrentPerClient). It bounds the
// body of a request answered without reading it too (a missing key,
// /healthz …): see ServeHTTP. Default 30s.
func WithReadTimeout(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 {
			return fmt.Errorf("gateway: read timeout must be positive, got %v", d)
		}
		c.readTimeout = d
		return nil
	}
}

// WithLogger sets where access logs (one record per request, at Info, with
// no prompt or output text) and reloads go. Default: discard.
func WithLogger(l *slog.Logger) Option {
	return func(c *config) error {
		if l == nil {
			return errors.New("gateway: nil logger")
		}
		c.logger = l
		return nil
	}
}

// WithMetrics registers more Prometheus collectors in the gateway's own
// registry, served on /metrics beside its series: for example the calls
// into the policy's Wasm plugins, counted by a host.Observer the caller
// installs through policy.Options.HostOptions (as retryhost serve does;
// the gateway does not see the Wasm host). A collector that clashes with
// another is an error from New. Default: none.
func WithMetrics(cs ...prometheus.Collector) Option {
	return func(c *config) error {
		for i, x := range cs {
			if x == nil {
				return fmt.Errorf("gateway: metrics collector %d is nil", i)
			}
		}
		c.collectors = append(c.collectors, cs...)
		return nil
	}
}
