package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/retryhost/retryhost/cmd/internal/connlimit"
	"github.com/retryhost/retryhost/cmd/internal/gcfloor"
	"github.com/retryhost/retryhost/gateway"
	"github.com/retryhost/retryhost/gateway/vkey"
	"github.com/retryhost/retryhost/host"
	"github.com/retryhost/retryhost/internal/leaf/strict"
	"github.com/retryhost/retryhost/plugins"
	"github.com/retryhost/retryhost/policy"
	redisstate "github.com/retryhost/retryhost/state/redis"
)

func init() {
	register(&command{
		name:    "serve",
		summary: "an OpenAI- and Anthropic-compatible fail-over gateway over a policy (none: a demo over 3 loopback providers)",
		help: "Serves OpenAI's chat completions (/v1/chat/completions) and Anthropic's Messages API (/v1/messages), whose routes are the policy's models, " +
			"with the policy's retry and fail-over (see docs/gateway.md). Without " +
			"--policy it serves a demo policy over three loopback providers.\n\n" +
			"SIGTERM or SIGINT drains in-flight requests (--drain; after --shutdown-delay, if set) and exits 0; SIGHUP reloads the policy and the --api-keys-file. " +
			"Logs are JSON at info level unless --log-format or --log-level say otherwise. " +
			"OTEL_EXPORTER_OTLP_ENDPOINT (and the other standard OTEL_* variables) exports OpenTelemetry traces over OTLP/HTTP; off when none is set.",
		setup: func(fs *flag.FlagSet) runFunc {
			o := &serveOpts{}
			fs.StringVar(&o.file, "policy", "", "the policy `FILE` (JSON or YAML); none: the built-in demo policy over loopback providers")
			fs.StringVar(&o.addr, "addr", "127.0.0.1:8080", "the address to listen on (`HOST:PORT`)")
			fs.StringVar(&o.keysFile, "api-keys-file", "", "a `FILE` of client API keys, one per line (# starts a comment, at a line's start or after whitespace), read again on SIGHUP and when it changes; RETRYHOST_API_KEYS adds comma-separated keys")
			fs.StringVar(&o.vkeysFile, "keys-file", "", "a virtual key `FILE` (JSON, written by retryhost keys: per-key routes, rates, budgets, expiry; see docs/multi-team.md), read again on SIGHUP and when it changes; beside --api-keys-file's keys")
			fs.StringVar(&o.limitsRedis, "limits-redis", "", "keep the virtual keys' rates and budgets fleet-wide on this Redis (`URL`, as the policy's state.redis url); none: in this process")
			fs.DurationVar(&o.drain, "drain", 30*time.Second, "on SIGTERM or SIGINT, how long in-flight requests may take to finish")
			fs.DurationVar(&o.shutdownDelay, "shutdown-delay", 0, "on SIGTERM or SIGINT, how long to keep accepting and serving with /readyz answering 503, so that a load balancer sees it and stops sending, before the drain (0: drain at once)")
			fs.IntVar(&o.maxConc, "max-concurrent", 1024, "chat requests served at once; more get 429")
			fs.IntVar(&o.maxPerClient, "max-per-client", 0, "chat requests served at once from one client (its API key when keys are required, else its IP address); more get 429 (0: a quarter of --max-concurrent; behind a proxy without keys, set it to --max-concurrent)")
			fs.IntVar(&o.maxConns, "max-conns", 4096, "client connections open at once; past it the one idle the longest is closed to make room, and with none idle a new one waits for one to close (0: no limit)")
			fs.Int64Var(&o.maxBody, "max-body", 8<<20, "the largest request body, in `BYTES`")
			fs.Int64Var(&o.bodyBudget, "body-budget", 512<<20, "the memory, in `BYTES`, that the request bodies in flight may hold across all requests; a request is charged 2 bytes a byte while its body arrives, 8 bytes a byte and 384 a JSON value until it commits, 2 bytes a byte after; past it 429 (at least 8 times --max-body)")
			fs.Int64Var(&o.gcFloor, "gc-floor", 16<<20, "the heap size, in `BYTES`, below which the garbage collector does not run; above it GOGC governs as usual (0: Go's default, a collection every few MiB)")
			fs.Int64Var(&o.maxAnswer, "max-answer", 32<<20, "the largest answer a non-streaming request holds until it is complete, per attempt, in `BYTES` (payload + 256 per part); past it the attempt fails")
			fs.BoolVar(&o.h2c, "h2c", false, "also accept HTTP/2 without TLS (prior knowledge, as a mesh sidecar or a load balancer speaks it), on the same port as HTTP/1.1")
			fs.IntVar(&o.upstreamConns, "upstream-conns", 256, "connections to each upstream host, idle and active; more requests wait for one")
			fs.BoolVar(&o.watch, "watch", true, "reload the policy when its file, or a plugin file it names by path, changes, and the API keys when --api-keys-file does (SIGHUP reloads both too)")
			fs.DurationVar(&o.reloadBudget, "reload-budget", serveReloadBudget, "how long a policy reload (compiling its plugins) may take; past it the reload is abandoned, logged and counted (retryhost_gateway_reloads_abandoned_total) and the policy in use stays")
			fs.DurationVar(&o.pluginPoll, "plugin-poll", 30*time.Second, "how often to ask the registry for a new version of an \"oci\" plugin that follows a tag (\"follow_tag\"); a new one reloads the policy")
			fs.StringVar(&o.up.upstream, "upstream", "", "pass-through with no policy file: every model name a client sends goes to this upstream (`SPEC`: a URL of an OpenAI-compatible server, a provider's name openai, anthropic or openrouter, read with its usual key variable, or PROVIDER=URL), failing over to each --fallback in turn, under the gateway's default rules and deadlines")
			fs.Var(&o.up.fallbacks, "fallback", "an upstream (`SPEC`, as for --upstream) the requests fail over to, in the order given; repeatable")
			fs.StringVar(&o.requestLog, "request-log", "", "write one JSON line per request, with its attempt trail, tokens and cost (no prompt or output text), to this `FILE` (- for standard output); none by default")
			fs.Int64Var(&o.requestLogMax, "request-log-max-size", 100<<20, "rotate the --request-log file when it would pass this many `BYTES`: it becomes FILE.1, FILE.1 becomes FILE.2 … (0: never)")
			fs.IntVar(&o.requestLogKeep, "request-log-keep", 5, "how many rotated --request-log files to keep (FILE.1 … FILE.N; 0: none)")
			fs.IntVar(&o.keyLabel, "metrics-key-label", 0, "label the accounting metrics (tokens, cost, requests …) with the virtual key's id, for up to `N` distinct keys, the rest under \"_other\" (0: no key label)")
			o.registry.declarePolicy(fs)
			fs.BoolVar(&o.printDemo, "print-demo-policy", false, "print the demo policy (a starting point for your own) and exit")
			return o.run
		},
	})
}

type serveOpts struct {
	file, addr, keysFile string
	vkeysFile            string // --keys-file
	limitsRedis          string // --limits-redis
	drain, shutdownDelay time.Duration
	maxConc, maxConns    int
	maxPerClient         int
	upstreamConns        int
	maxBody, maxAnswer   int64
	bodyBudget           int64
	gcFloor              int64
	watch, printDemo     bool
	h2c                  bool
	pluginPoll           time.Duration
	reloadBudget         time.Duration
	registry             registryFlags
	up                   upstreamFlags
	requestLog           string
	requestLogMax        int64
	requestLogKeep       int
	keyLabel             int
}

// serveLimits are the HTTP server's own limits (the gateway's are its options).
const (
	serveMaxHeaderBytes    = 64 << 10
	serveReadHeaderTimeout = 10 * time.Second
	serveIdleTimeout       = 120 * time.Second
	serveWatchInterval     = time.Second
	// serveH2Streams is the streams one HTTP/2 connection may have open at
	// once (--h2c): net/http's own default.
	serveH2Streams = 250
	// serveReloadBudget is --reload-budget's default: a policy of a few
	// dozen plugins compiles in seconds on a 2-core machine; a reload
	// still going after a minute is stuck (a hung registry, a plugin that
	// compiles for ever) and is abandoned.
	serveReloadBudget = time.Minute
)

func (o *serveOpts) run(ctx context.Context, e *env, args []string) int {
	if len(args) != 0 {
		return e.usageError(commands["serve"], "unexpected argument %q", args[0])
	}
	if o.drain < 0 {
		return e.usageError(commands["serve"], "--drain %v: a drain cannot be negative (0: end in-flight requests at once)", o.drain)
	}
	if o.shutdownDelay < 0 {
		return e.usageError(commands["serve"], "--shutdown-delay %v: a delay cannot be negative (0: drain at once)", o.shutdownDelay)
	}
	if o.maxConns < 0 {
		return e.usageError(commands["serve"], "--max-conns %d: a limit cannot be negative (0: no limit)", o.maxConns)
	}
	if o.reloadBudget <= 0 {
		return e.usageError(commands["serve"], "--reload-budget %v: a budget must be positive", o.reloadBudget)
	}
	if o.maxPerClient < 0 {
		return e.usageError(commands["serve"], "--max-per-client %d: a limit cannot be negative (0: a quarter of --max-concurrent)", o.maxPerClient)
	}
	if o.gcFloor < 0 {
		return e.usageError(commands["serve"], "--gc-floor %d: a floor cannot be negative (0: Go's default)", o.gcFloor)
	}
	passThrough := o.up.upstream != "" || len(o.up.fallbacks) > 0
	if passThrough && o.file != "" {
		return e.usageError(commands["serve"], "--upstream and --fallback are a policy of their own: give them or --policy, not both")
	}
	var upPolicy []byte
	if passThrough {
		var err error
		if upPolicy, err = o.up.policy(); err != nil {
			return e.usageError(commands["serve"], "%v", err)
		}
	}
	if o.printDemo {
		_, err := fmt.Fprintf(e.stdout, "// The policy retryhost serve runs without --policy. Its base_url values are the demo's\n"+
			"// in-process loopback providers (random ports at run time): point them at yours.\n%s\n",
			demoServePolicy(map[string]string{"alpha": "http://127.0.0.1:9001/v1", "beta": "http://127.0.0.1:9002/v1", "gamma": "http://127.0.0.1:9003/v1"}))
		if err != nil {
			return exitFail
		}
		return exitOK
	}
	// A gateway's live heap is small and each request leaves garbage: Go
	// would collect dozens of times a second (cmd/internal/gcfloor).
	defer gcfloor.Start(uint64(o.gcFloor)).Stop()
	// The log is written in batches (logbatch.go); serve's status lines
	// and errors go out at once, in order with it.
	batch := newLogBatch(e.stderr, logBatchEvery)
	defer batch.Close()
	stderr := io.Writer(now{batch})
	e.stderr = stderr
	// A gateway logs JSON at info unless the global flags say otherwise.
	if !e.g.levelSet {
		e.g.level = slog.LevelInfo
	}
	if !e.g.formatSet {
		e.g.json = true
	}
	logger := slog.New(flushOnWarn{e.g.logger(batch).Handler(), batch})
	e.log = logger
	// The shared state logs a Redis outage once (as JSON, with the rest);
	// go-redis would print every failed dial to stderr.
	redisstate.QuietClientLogs()
	keys, err := apiKeys(o.keysFile, os.Getenv("RETRYHOST_API_KEYS"))
	if err != nil {
		return e.errorf(exitInput, "%v", err)
	}
	opts := []gateway.Option{gateway.WithLogger(logger), gateway.WithMaxConcurrent(o.maxConc), gateway.WithMaxBodyBytes(o.maxBody), gateway.WithBodyBudget(o.bodyBudget),
		gateway.WithMaxAnswerBytes(o.maxAnswer),
		gateway.WithUpstreamConns(o.upstreamConns), gateway.WithPluginPoll(o.pluginPoll)}
	if o.maxPerClient > 0 {
		opts = append(opts, gateway.WithMaxConcurrentPerClient(o.maxPerClient))
	}
	if len(keys) > 0 {
		opts = append(opts, gateway.WithAPIKeys(keys...))
	}
	var onDown atomic.Pointer[string] // the key set's on_store_down, for the Redis limiter
	if o.vkeysFile != "" {
		set, err := vkey.Load(o.vkeysFile)
		if err != nil {
			return e.errorf(exitInput, "--keys-file: %v", err)
		}
		opts = append(opts, gateway.WithKeySet(set))
		if o.limitsRedis != "" {
			onDown.Store(&set.OnStoreDown)
			r, err := redisstate.OpenLimiter(o.limitsRedis, redisstate.Options{Logger: logger})
			if err != nil {
				return e.errorf(exitInput, "--limits-redis: %v", err)
			}
			defer r.Close()
			lim := vkey.NewFleet(r, func() string { return *onDown.Load() })
			defer lim.Close() // before r's: its settlements use r
			opts = append(opts, gateway.WithLimiter(lim))
		}
	}
	if o.keyLabel < 0 {
		return e.usageError(commands["serve"], "--metrics-key-label %d: a cap cannot be negative (0: no key label)", o.keyLabel)
	}
	if o.keyLabel > 0 {
		opts = append(opts, gateway.WithKeyLabel(o.keyLabel))
	}
	if o.requestLog != "" {
		sink, closeSink, err := requestLogSink(o.requestLog, e.stdout, o.requestLogMax, o.requestLogKeep)
		if err != nil {
			return e.errorf(exitInput, "%v", err)
		}
		defer closeSink()
		opts = append(opts, gateway.WithRequestLog(sink))
	}
	pm := newPluginMetrics()
	opts = append(opts, gateway.WithMetrics(pm.collectors()...))
	tr, err := tracesFromEnv(ctx, os.Getenv)
	if err != nil {
		return e.errorf(exitInput, "%v", err)
	}
	if tr != nil {
		defer logTraceErrors(logger)()
		defer tr.shutdown(logger) // after the gateway's Close: its last spans are flushed
		opts = append(opts, gateway.WithTracerProvider(tr.tp))
	}
	// The client connections' limit wraps the listener, made after the
	// gateway; its series are read through a pointer set then.
	var conns *connlimit.Listener
	if o.maxConns > 0 {
		opts = append(opts, gateway.WithMetrics(connMetrics(&conns)...))
	}
	popts := policy.Options{Builtin: plugins.Module, OCI: o.registry.policyOCI(e), Logger: logger,
		HostOptions: append(e.hostOptions(ctx), host.WithObserver(pm))}
	var src gateway.Source
	switch {
	case passThrough:
		src = gateway.Bytes("--upstream", upPolicy, popts)
	case o.file == "":
		urls, stop := startDemoProviders()
		defer stop()
		popts.Getenv = func(string) string { return "demo-needs-no-key" }
		src = gateway.Bytes("demo-policy.json", []byte(demoServePolicy(urls)), popts)
	default:
		src = gateway.File(o.file, popts)
	}
	gw, err := gateway.New(ctx, src, opts...)
	if err != nil {
		if ctx.Err() != nil {
			return e.errorf(exitFail, "%v", context.Cause(ctx))
		}
		return e.errorf(exitInput, "%v", err)
	}
	defer func() { _ = gw.Close(context.Background()) }()
	ln, err := net.Listen("tcp", o.addr)
	if err != nil {
		fmt.Fprintf(stderr, "retryhost serve: %v\n", err)
		return exitFail
	}
	// A request whose body length is ambiguous (Content-Length beside
	// Transfer-Encoding) is refused with 400 and its connection closed:
	// net/http alone would serve it and keep the connection.
	ln = gateway.StrictFraming(ln)
	srv := &http.Server{Handler: gw, MaxHeaderBytes: serveMaxHeaderBytes, ReadHeaderTimeout: serveReadHeaderTimeout,
		IdleTimeout: serveIdleTimeout, ErrorLog: slog.NewLogLogger(logger.Handler(), slog.LevelWarn)}
	if o.maxConns > 0 {
		conns = connlimit.New(ln, o.maxConns)
		ln, srv.ConnState = conns, conns.ConnState
	}
	if o.h2c {
		// Each HTTP/2 stream is a request like any other: the body, header
		// (MaxHeaderBytes bounds the decoded header list too) and
		// concurrency limits apply per stream, and a connection carries at
		// most serveH2Streams of them at once.
		srv.Protocols = new(http.Protocols)
		srv.Protocols.SetHTTP1(true)
		srv.Protocols.SetUnencryptedHTTP2(true)
		srv.HTTP2 = &http.HTTP2Config{MaxConcurrentStreams: serveH2Streams}
	}
	// The policy's files and the keys file are watched apart: a keys
	// rotation must not reload the policy, whose new generation starts
	// with no cooldowns, retry budgets or sticky fallbacks in memory, and a
	// policy edit need not re-read the keys. SIGHUP reloads both. The
	// watchers take the files' state before serve says it listens, so
	// that a change made after that is seen.
	var policyChanged, keysChanged <-chan struct{}
	if o.watch {
		// Not ended by the stop (ctx), which the shutdown delay serves on
		// past: the watchers end when serve returns.
		wctx, stopWatch := context.WithCancel(context.WithoutCancel(ctx))
		defer stopWatch()
		if o.file != "" {
			policyChanged = watchFiles(wctx, func() []string { return policyFiles(o.file) }, serveWatchInterval, logger, "policy")
		}
		if o.keysFile != "" || o.vkeysFile != "" {
			keysChanged = watchFiles(wctx, func() []string {
				return slices.DeleteFunc([]string{o.keysFile, o.vkeysFile}, func(s string) bool { return s == "" })
			}, serveWatchInterval, logger, "API keys")
		}
	}
	// SIGTERM and SIGINT are caught until the drain starts: then a second
	// one ends the process at once, as for every command (see runMain).
	// SIGHUP stays caught, so that a reload asked for during the drain does
	// not kill it. They are caught before serve says it listens: a SIGHUP
	// sent once it has said so reloads, it does not end the process.
	stops := make(chan os.Signal, 1)
	signal.Notify(stops, syscall.SIGTERM, syscall.SIGINT)
	defer signal.Stop(stops)
	hups := make(chan os.Signal, 1)
	signal.Notify(hups, syscall.SIGHUP)
	defer signal.Stop(hups)
	base := "http://" + ln.Addr().String()
	fmt.Fprintf(stderr, "retryhost serve: listening on %s\n", base)
	if tr != nil {
		fmt.Fprintf(stderr, "retryhost serve: exporting traces over OTLP/HTTP to %s\n", tr.endpoint)
	}
	switch {
	case passThrough:
		fmt.Fprintf(stderr, "retryhost serve: passing every model through to %s\n", strings.Join(append([]string{o.up.upstream}, o.up.fallbacks...), ", then "))
	case o.file == "":
		fmt.Fprintf(stderr, "retryhost serve: no --policy, serving the demo policy: routes alpha (refuses in text), beta (rate-limited), gamma (answers); try\n"+
			"  curl -s %s/v1/chat/completions -H 'Content-Type: application/json' -d '{\"model\": \"alpha\", \"stream\": true, \"messages\": [{\"role\": \"user\", \"content\": \"%s\"}]}'\n", base, demoQuestion)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()

	// Policy reloads run in the background (reloader): signals, key
	// rotation and the drain never wait for a compile. A reload during the
	// shutdown delay runs on; the drain abandons the one in progress.
	rl := newReloader(gw.Reload, o.reloadBudget, logger)
	defer rl.stop()
	reloadPolicy := rl.request
	reloadKeys := func(why string) {
		if o.vkeysFile != "" {
			// A key file that does not load keeps the keys in use.
			set, err := vkey.Load(o.vkeysFile)
			if err == nil {
				err = gw.SetKeySet(set)
			}
			if err != nil {
				logger.Error("key file reload rejected; the keys in use stay", slog.String("why", why), slog.String("error", err.Error()))
			} else {
				onDown.Store(&set.OnStoreDown)
				logger.Info("key file reloaded", slog.String("why", why), slog.Int("keys", set.Len()))
			}
		}
		if o.keysFile == "" {
			return
		}
		// A key added is served and a key removed refused from now on,
		// without a restart. A file that has no key left, or cannot be
		// read, keeps the keys in use.
		keys, err := apiKeys(o.keysFile, os.Getenv("RETRYHOST_API_KEYS"))
		if err == nil {
			err = gw.SetAPIKeys(keys...)
		}
		if err != nil {
			logger.Error("API keys reload rejected; the keys in use stay", slog.String("why", why), slog.String("error", err.Error()))
			return
		}
		logger.Info("API keys reloaded", slog.String("why", why), slog.Int("keys", len(keys)))
	}
	// The first SIGTERM or SIGINT (or ctx's end) starts the stop: at once
	// the drain, or with --shutdown-delay first the delay, through which
	// serve serves on in full (reloads acted on, a failing server ending
	// it at once) with /readyz answering 503, so that a load balancer
	// probing it takes the gateway out of rotation before the drain
	// closes the listener (a closed one answers no probe).
	stopped := ctx.Done()
	var delay <-chan time.Time // the --shutdown-delay's, once it runs
	stopping := func() (drain bool) {
		stops, stopped = nil, nil
		// Reset, not Stop: runMain's own handler may not have taken the
		// first signal yet (its goroutine was not scheduled), and while
		// it is still registered a second signal would be caught and
		// lost in its full channel instead of ending the process. Both
		// handlers have been sent the first signal by now, so nothing is
		// lost by dropping them. A second signal ends the process at
		// once, delay or not.
		signal.Reset(syscall.SIGTERM, syscall.SIGINT)
		if o.shutdownDelay <= 0 {
			return true
		}
		gw.Unready()
		fmt.Fprintf(stderr, "retryhost serve: not ready; serving on for %v before the drain\n", o.shutdownDelay)
		delay = serveDelayTimer(o.shutdownDelay)
		return false
	}
serving:
	for {
		select {
		case err := <-served:
			fmt.Fprintf(stderr, "retryhost serve: %v\n", err)
			return exitFail
		case <-policyChanged:
			reloadPolicy("file changed")
		case <-keysChanged:
			reloadKeys("file changed")
		case <-hups:
			reloadPolicy("SIGHUP")
			reloadKeys("SIGHUP")
		case <-stops:
			if stopping() {
				break serving
			}
		case <-stopped:
			if stopping() {
				break serving
			}
		case <-delay:
			break serving
		}
	}
	rl.stop()
	fmt.Fprintf(stderr, "retryhost serve: draining (up to %v)\n", o.drain)
	// Stop accepting and close idle connections, while the gateway lets
	// in-flight requests finish until the drain deadline and then ends
	// them with the in-band error.
	sctx, cancel := context.WithTimeout(context.Background(), o.drain+5*time.Second)
	defer cancel()
	shut := make(chan error, 1)
	go func() { shut <- srv.Shutdown(sctx) }()
	dctx, dcancel := context.WithTimeout(context.Background(), o.drain)
	defer dcancel()
	if err := gw.Shutdown(dctx); err != nil {
		logger.Warn("drain deadline passed; in-flight requests were ended", slog.Duration("drain", o.drain))
	}
	if err := <-shut; err != nil && !errors.Is(err, http.ErrServerClosed) {
		_ = srv.Close()
	}
	fmt.Fprintln(stderr, "retryhost serve: stopped")
	return exitOK
}

// errReloadBudget is the cause of a reload abandoned at --reload-budget;
// errReloadNewer of one a newer reload request overtook; errReloadStop of
// one the drain ended.
var (
	errReloadBudget = errors.New("past --reload-budget")
	errReloadNewer  = errors.New("a newer reload was asked for")
	errReloadStop   = errors.New("serve is stopping")
)

// A reloader runs serve's policy reloads one at a time off its control
// loop, each under the budget. A reload asked for while one is in progress
// supersedes it: the one in progress is cancelled (it would put in place
// the files as they were when it began) and the new one starts when it
// has returned, so that two compiles never run at once even with a loader
// slow to notice its cancellation. Requests made meanwhile fold into one.
// Its methods are safe for concurrent use and never wait for a reload.
type reloader struct {
	reload func(context.Context) error
	budget time.Duration
	log    *slog.Logger

	mu      sync.Mutex
	why     string                  // the pending request's reason; "": none
	cancel  context.CancelCauseFunc // the reload in progress; nil: none
	stopped bool
	wake    chan struct{}
	done    chan struct{}
}

// serveReloadHook, when set (by tests), runs at the start of each reload
// under its context, as a slow compile would: the reload goes on when it
// returns.
var serveReloadHook func(ctx context.Context) error

func newReloader(reload func(context.Context) error, budget time.Duration, log *slog.Logger) *reloader {
	r := &reloader{reload: reload, budget: budget, log: log, wake: make(chan struct{}, 1), done: make(chan struct{})}
	go r.loop()
	return r
}

// request asks for a reload (why is for the log), superseding the one in
// progress.
func (r *reloader) request(why string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stopped {
		return
	}
	r.why = why
	if r.cancel != nil {
		r.cancel(errReloadNewer)
	}
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// stop abandons the reload in progress, if any, and any pending; it does
// not wait for the reload to return.
func (r *reloader) stop() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stopped {
		return
	}
	r.stopped = true
	if r.cancel != nil {
		r.cancel(errReloadStop)
	}
	close(r.done)
}

func (r *reloader) loop() {
	for {
		select {
		case <-r.done:
			return
		case <-r.wake:
		}
		r.mu.Lock()
		why := r.why
		if r.stopped || why == "" {
			r.mu.Unlock()
			continue
		}
		r.why = ""
		ctx, cancel := context.WithCancelCause(context.Background())
		r.cancel = cancel
		r.mu.Unlock()
		r.run(ctx, why)
		r.mu.Lock()
		r.cancel = nil
		r.mu.Unlock()
		cancel(nil)
	}
}

// run is one reload under the budget.
func (r *reloader) run(ctx context.Context, why string) {
	ctx, cancel := context.WithTimeoutCause(ctx, r.budget, errReloadBudget)
	defer cancel()
	if serveReloadHook != nil {
		_ = serveReloadHook(ctx) // the reload sees ctx as the hook left it
	}
	err := r.reload(ctx)
	switch {
	case err == nil:
		r.log.Info("policy reloaded", slog.String("why", why))
	case errors.Is(err, gateway.ErrReloadAbandoned) && errors.Is(err, errReloadBudget):
		r.log.Error("policy reload abandoned past --reload-budget; the old policy stays",
			slog.String("why", why), slog.Duration("budget", r.budget))
	}
}

// serveDelayTimer is the --shutdown-delay's timer; tests replace it.
var serveDelayTimer = time.After

// maxKeysFile bounds the --api-keys-file read (some 10,000 keys).
const maxKeysFile = 1 << 20

// apiKeys reads the client keys from a file (one per line; blank lines and
// comments skipped, a comment starting at a # that begins the line or
// follows whitespace, so "key # who has it" is the key "key"; a leading
// byte order mark dropped) and a comma-separated list (RETRYHOST_API_KEYS).
// Keys asked for but none found is an error, never an open gateway: a list
// of only commas (a template whose values were left out), a file with no
// key, a file larger than maxKeysFile (read cut, its last key could be a
// prefix of one).
func apiKeys(file, list string) ([]string, error) {
	var keys []string
	for _, k := range strings.Split(list, ",") {
		if k = strings.TrimSpace(k); k != "" {
			keys = append(keys, k)
		}
	}
	if len(keys) == 0 && strings.TrimSpace(list) != "" {
		return nil, fmt.Errorf("RETRYHOST_API_KEYS has no key (%q): give comma-separated keys, or unset it to serve without keys", list)
	}
	if file == "" {
		return keys, nil
	}
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && st.Size() > maxKeysFile {
		return nil, fmt.Errorf("%s: larger than 1 MiB (%d bytes); a keys file holds one key a line", file, st.Size())
	}
	lr := &io.LimitedReader{R: f, N: maxKeysFile + 1}
	sc := bufio.NewScanner(lr)
	for first := true; sc.Scan(); first = false {
		line := sc.Text()
		if first {
			// A UTF-8 byte order mark (an editor's "UTF-8 with BOM") is
			// not part of the first key, nor whitespace to TrimSpace.
			line = strings.TrimPrefix(line, "\ufeff")
		}
		if k := strings.TrimSpace(stripComment(line)); k != "" {
			keys = append(keys, k)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	if lr.N == 0 { // grew past the cap while read (not a regular file)
		return nil, fmt.Errorf("%s: larger than 1 MiB; a keys file holds one key a line", file)
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("%s: no API key in the file", file)
	}
	return keys, nil
}

// stripComment returns a keys file's line without its comment: from a #
// that starts the line or follows a space or tab (an indented comment
// line too). A #
// elsewhere is part of the key: a key may hold one, a comment is set apart
// from the key before it.
func stripComment(line string) string {
	for i := 0; i < len(line); i++ {
		if line[i] == '#' && (i == 0 || line[i-1] == ' ' || line[i-1] == '\t') {
			return line[:i]
		}
	}
	return line
}

// watchFiles reports, at most once per interval, that one of the files
// files() names changed (see fileWatch.check). It asks files() again at
// every tick, so a plugin the policy starts to use is watched from then
// on. what names what the files hold, for the log.
func watchFiles(ctx context.Context, files func() []string, interval time.Duration, log *slog.Logger, what string) <-chan struct{} {
	ch := make(chan struct{}, 1)
	w := newFileWatch(files, log, what)
	go func() {
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			if w.check() {
				select {
				case ch <- struct{}{}:
				default:
				}
			}
		}
	}()
	return ch
}

// fileWatch is watchFiles' state between two checks.
type fileWatch struct {
	files   func() []string
	log     *slog.Logger
	what    string
	last    map[string]os.FileInfo // as last reported, every file there
	missing map[string]bool        // missing at the last check (logged)
}

// newFileWatch watches files from their state now.
func newFileWatch(files func() []string, log *slog.Logger, what string) *fileWatch {
	w := &fileWatch{files: files, log: log, what: what, missing: map[string]bool{}}
	w.check()
	return w
}

// check reports whether the files changed since the last report: one
// added to or gone from the list, or one whose size, modification time or
// identity (a new file in its place: an editor's atomic save, a
// ConfigMap's symlink swap, even of the same size within the clock's
// granularity) differs. While a file is missing it reports nothing (a
// reload would fail, and the change made meanwhile would be lost to the
// next check) and logs it once; when every file is back, any change made
// meanwhile, to it or another, is reported.
func (w *fileWatch) check() bool {
	files := w.files()
	cur := make(map[string]os.FileInfo, len(files))
	whole := true
	for _, f := range files {
		fi, err := os.Stat(f)
		if err != nil {
			whole = false
			if !w.missing[f] {
				w.missing[f] = true
				w.log.Error("watched file missing; the "+w.what+" in use stays until it is back",
					slog.String("file", f), slog.String("error", err.Error()))
			}
			continue
		}
		if w.missing[f] {
			delete(w.missing, f)
			w.log.Info("watched file back", slog.String("file", f))
		}
		cur[f] = fi
	}
	for f := range w.missing {
		if !slices.Contains(files, f) {
			delete(w.missing, f) // no longer watched
		}
	}
	if !whole {
		return false
	}
	changed := len(cur) != len(w.last)
	for f, fi := range cur {
		old, ok := w.last[f]
		if !ok || fi.Size() != old.Size() || !fi.ModTime().Equal(old.ModTime()) || !os.SameFile(fi, old) {
			changed = true
		}
	}
	w.last = cur
	return changed
}

// policyFiles returns the policy file and the plugin files it names by
// path (relative ones against its directory, as policy.Load resolves
// them): a change to any of them reloads the policy. A file that does not
// decode is watched alone (the reload will report it).
func policyFiles(file string) []string {
	files := []string{file}
	data, err := os.ReadFile(file)
	if err != nil {
		return files
	}
	var f policy.File
	switch strings.ToLower(filepath.Ext(file)) {
	case ".yaml", ".yml":
		_, err = strict.DecodeYAML(data, &f)
	default:
		if _, err = strict.Decode(data, &f); err != nil {
			_, err = strict.DecodeYAML(data, &f)
		}
	}
	if err != nil {
		return files
	}
	add := func(ps *policy.PluginSpec) {
		if ps == nil || ps.Path == "" {
			return
		}
		p := ps.Path
		if !filepath.IsAbs(p) {
			p = filepath.Join(filepath.Dir(file), p)
		}
		if !slices.Contains(files, p) {
			files = append(files, p)
		}
	}
	for i := range f.Rules {
		add(f.Rules[i].Plugin)
	}
	for i := range f.Transforms {
		add(f.Transforms[i].Plugin)
	}
	return files
}

// startDemoProviders starts the demo's three loopback providers and
// returns their base URLs, by name.
func startDemoProviders() (map[string]string, func()) {
	urls := map[string]string{}
	var stops []func()
	for _, p := range demoProviders() {
		srv := p.start()
		urls[p.name] = srv.URL + "/v1"
		stops = append(stops, srv.Close)
	}
	return urls, func() {
		for _, s := range stops {
			s()
		}
	}
}

// demoServePolicy is the demo's policy as a file: the built-in Wasm
// refusal transform, a refusal switching to beta, a rate limit retried
// after its Retry-After and then switched to gamma. The second refusal
// rule is what the requests after the first need: beta's 429s cool it
// down (the gateway's default cooldown), a rule that would switch to a
// model cooling down is skipped, and without a rule after it a refusal
// from alpha would end the request with a 502 for the next 10 s.
func demoServePolicy(urls map[string]string) string {
	return fmt.Sprintf(`{
	"models": [
		{"name": "alpha", "provider": "openai", "model": "gpt-4o", "base_url": %q, "api_key_env": "DEMO_KEY"},
		{"name": "beta", "provider": "openai", "model": "gpt-4o-mini", "base_url": %q, "api_key_env": "DEMO_KEY"},
		{"name": "gamma", "provider": "openai", "model": "llama-3.3-70b", "base_url": %q, "api_key_env": "DEMO_KEY"}
	],
	"rules": [
		{"when": {"class": ["refusal"]}, "action": "switch", "model": "beta"},
		{"when": {"class": ["refusal"]}, "action": "switch", "model": "gamma"},
		{"when": {"status": [429]}, "action": "retry", "attempts": 2},
		{"when": {"status": [429]}, "action": "switch", "model": "gamma"},
		{"when": {"class": ["server", "overloaded", "network", "timeout"]}, "action": "switch", "model": "gamma"}
	],
	"transforms": [{"plugin": {"builtin": "refusal", "fail": "open"}}],
	"backoff": {"delay": "1s", "factor": 2, "max_delay": "8s", "jitter": "equal"},
	"deadlines": {"first_content": "10s", "gap": "30s", "budget": "1m"}
}`, urls["alpha"], urls["beta"], urls["gamma"])
}
