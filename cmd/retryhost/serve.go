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
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/retryhost/retryhost/cmd/internal/connlimit"
	"github.com/retryhost/retryhost/cmd/internal/gcfloor"
	"github.com/retryhost/retryhost/gateway"
	"github.com/retryhost/retryhost/gateway/vkey"
	"github.com/retryhost/retryhost/host"
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
			fs.StringVar(&o.vkeysRedis, "keys-redis", "", "the virtual keys on this Redis (`URL`, as the policy's state.redis url), edited by retryhost keys --keys-redis and shared by a fleet: read at start and again within a second of each edit (see docs/multi-team.md); instead of --keys-file")
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
	vkeysRedis           string // --keys-redis
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

// run is serve: it checks the flags, builds the gateway, listens, and
// serves until a signal or ctx's end stops it, then drains. What a step
// opens is closed when run returns, last opened first.
func (o *serveOpts) run(ctx context.Context, e *env, args []string) int {
	upPolicy, code, ok := o.checkFlags(e, args)
	if !ok {
		return code
	}
	if o.printDemo {
		return printDemoServePolicy(e)
	}
	// A gateway's live heap is small and each request leaves garbage: Go
	// would collect dozens of times a second (cmd/internal/gcfloor).
	defer gcfloor.Start(uint64(o.gcFloor)).Stop()
	batch := o.logTo(e)
	defer batch.Close()
	var undo undoStack
	defer undo.run()
	g, code, ok := o.buildGateway(ctx, e, upPolicy, &undo)
	if !ok {
		return code
	}
	srv, ln, err := o.listen(g, e.log)
	if err != nil {
		fmt.Fprintf(e.stderr, "retryhost serve: %v\n", err)
		return exitFail
	}
	policyChanged, keysChanged := o.watchChanges(ctx, e.log, &undo)
	if g.keyStore != nil {
		undo.push(g.keyStore.poll(g, e.log, serveWatchInterval))
	}
	return o.serveUntilStopped(ctx, e, g, srv, ln, policyChanged, keysChanged)
}

// An undoStack holds what serve's steps opened, to be closed when run
// returns: last pushed first, each as its own defer (one that panics does
// not keep the others from running).
type undoStack []func()

func (u *undoStack) push(f func()) { *u = append(*u, f) }

func (u *undoStack) run() {
	for _, f := range *u {
		defer f()
	}
}

// passThrough reports whether --upstream or --fallback make the policy.
func (o *serveOpts) passThrough() bool {
	return o.up.upstream != "" || len(o.up.fallbacks) > 0
}

// checkFlags refuses what the flags cannot mean together, and returns
// the pass-through policy --upstream and --fallback make (nil: none).
// ok is false when run must return code.
func (o *serveOpts) checkFlags(e *env, args []string) (upPolicy []byte, code int, ok bool) {
	usage := func(format string, args ...any) ([]byte, int, bool) {
		return nil, e.usageError(commands["serve"], format, args...), false
	}
	switch {
	case len(args) != 0:
		return usage("unexpected argument %q", args[0])
	case o.drain < 0:
		return usage("--drain %v: a drain cannot be negative (0: end in-flight requests at once)", o.drain)
	case o.shutdownDelay < 0:
		return usage("--shutdown-delay %v: a delay cannot be negative (0: drain at once)", o.shutdownDelay)
	case o.maxConns < 0:
		return usage("--max-conns %d: a limit cannot be negative (0: no limit)", o.maxConns)
	case o.reloadBudget <= 0:
		return usage("--reload-budget %v: a budget must be positive", o.reloadBudget)
	case o.maxPerClient < 0:
		return usage("--max-per-client %d: a limit cannot be negative (0: a quarter of --max-concurrent)", o.maxPerClient)
	case o.gcFloor < 0:
		return usage("--gc-floor %d: a floor cannot be negative (0: Go's default)", o.gcFloor)
	case o.vkeysFile != "" && o.vkeysRedis != "":
		return usage("--keys-file and --keys-redis are two homes for the virtual keys: give one, not both")
	case !o.passThrough():
		return nil, 0, true
	case o.file != "":
		return usage("--upstream and --fallback are a policy of their own: give them or --policy, not both")
	}
	upPolicy, err := o.up.policy()
	if err != nil {
		return usage("%v", err)
	}
	return upPolicy, 0, true
}

// printDemoServePolicy is --print-demo-policy.
func printDemoServePolicy(e *env) int {
	_, err := fmt.Fprintf(e.stdout, "// The policy retryhost serve runs without --policy. Its base_url values are the demo's\n"+
		"// in-process loopback providers (random ports at run time): point them at yours.\n%s\n",
		demoServePolicy(map[string]string{"alpha": "http://127.0.0.1:9001/v1", "beta": "http://127.0.0.1:9002/v1", "gamma": "http://127.0.0.1:9003/v1"}))
	if err != nil {
		return exitFail
	}
	return exitOK
}

// logTo points e's log and stderr at a log batch, which the caller closes.
func (o *serveOpts) logTo(e *env) *logBatch {
	// The log is written in batches (logbatch.go); serve's status lines
	// and errors go out at once, in order with it.
	batch := newLogBatch(e.stderr, logBatchEvery)
	e.stderr = io.Writer(now{batch})
	// A gateway logs JSON at info unless the global flags say otherwise.
	if !e.g.levelSet {
		e.g.level = slog.LevelInfo
	}
	if !e.g.formatSet {
		e.g.json = true
	}
	e.log = slog.New(flushOnWarn{e.g.logger(batch).Handler(), batch})
	// The shared state logs a Redis outage once (as JSON, with the rest);
	// go-redis would print every failed dial to stderr.
	redisstate.QuietClientLogs()
	return batch
}

// A serveGateway is the gateway serve built, with what its loop needs
// beside it.
type serveGateway struct {
	gw *gateway.Gateway
	tr *traces // nil: no traces exported
	// onDown is the key set's on_store_down, for the Redis limiter.
	onDown atomic.Pointer[string]
	// keyStore is --keys-redis's key set (nil: none).
	keyStore *keyStore
	// conns is the client connections' limit, which wraps the listener
	// made after the gateway; its series are read through it then.
	conns *connlimit.Listener
}

// buildGateway makes the gateway the flags describe, over the policy
// source they name. ok is false when run must return code.
func (o *serveOpts) buildGateway(ctx context.Context, e *env, upPolicy []byte, undo *undoStack) (g *serveGateway, code int, ok bool) {
	g = &serveGateway{}
	opts, code, ok := o.gatewayOptions(e, g, undo)
	if !ok {
		return nil, code, false
	}
	pm := newPluginMetrics()
	opts = append(opts, gateway.WithMetrics(pm.collectors()...))
	tr, err := tracesFromEnv(ctx, os.Getenv)
	if err != nil {
		return nil, e.errorf(exitInput, "%v", err), false
	}
	if tr != nil {
		g.tr = tr
		undo.push(logTraceErrors(e.log))
		undo.push(func() { tr.shutdown(e.log) }) // after the gateway's Close: its last spans are flushed
		opts = append(opts, gateway.WithTracerProvider(tr.tp))
	}
	if o.maxConns > 0 {
		opts = append(opts, gateway.WithMetrics(connMetrics(&g.conns)...))
	}
	popts := policy.Options{Builtin: plugins.Module, OCI: o.registry.policyOCI(e), Logger: e.log,
		HostOptions: append(e.hostOptions(ctx), host.WithObserver(pm))}
	gw, err := gateway.New(ctx, o.policySource(upPolicy, popts, undo), opts...)
	if err != nil {
		if ctx.Err() != nil {
			return nil, e.errorf(exitFail, "%v", context.Cause(ctx)), false
		}
		return nil, e.errorf(exitInput, "%v", err), false
	}
	g.gw = gw
	undo.push(func() { _ = gw.Close(context.Background()) })
	return g, 0, true
}

// gatewayOptions are the gateway's options from the flags: limits, client
// keys, the virtual keys and their limiter, the request log.
func (o *serveOpts) gatewayOptions(e *env, g *serveGateway, undo *undoStack) (opts []gateway.Option, code int, ok bool) {
	keys, err := apiKeys(o.keysFile, os.Getenv("RETRYHOST_API_KEYS"))
	if err != nil {
		return nil, e.errorf(exitInput, "%v", err), false
	}
	opts = []gateway.Option{gateway.WithLogger(e.log), gateway.WithMaxConcurrent(o.maxConc), gateway.WithMaxBodyBytes(o.maxBody), gateway.WithBodyBudget(o.bodyBudget),
		gateway.WithMaxAnswerBytes(o.maxAnswer),
		gateway.WithUpstreamConns(o.upstreamConns), gateway.WithPluginPoll(o.pluginPoll)}
	if o.maxPerClient > 0 {
		opts = append(opts, gateway.WithMaxConcurrentPerClient(o.maxPerClient))
	}
	if len(keys) > 0 {
		opts = append(opts, gateway.WithAPIKeys(keys...))
	}
	var set *vkey.Set
	switch {
	case o.vkeysFile != "":
		if set, err = vkey.Load(o.vkeysFile); err != nil {
			return nil, e.errorf(exitInput, "--keys-file: %v", err), false
		}
	case o.vkeysRedis != "":
		if g.keyStore, set, err = openKeyStore(o.vkeysRedis); err != nil {
			return nil, e.errorf(exitInput, "--keys-redis: %v", err), false
		}
		undo.push(g.keyStore.close)
	}
	if set != nil {
		opts = append(opts, gateway.WithKeySet(set))
		if o.limitsRedis != "" {
			g.onDown.Store(&set.OnStoreDown)
			r, err := redisstate.OpenLimiter(o.limitsRedis, redisstate.Options{Logger: e.log})
			if err != nil {
				return nil, e.errorf(exitInput, "--limits-redis: %v", err), false
			}
			undo.push(func() { _ = r.Close() })
			lim := vkey.NewFleet(r, func() string { return *g.onDown.Load() })
			undo.push(func() { lim.Close() }) // before r's: its settlements use r
			opts = append(opts, gateway.WithLimiter(lim))
		}
	}
	if o.keyLabel < 0 {
		return nil, e.usageError(commands["serve"], "--metrics-key-label %d: a cap cannot be negative (0: no key label)", o.keyLabel), false
	}
	if o.keyLabel > 0 {
		opts = append(opts, gateway.WithKeyLabel(o.keyLabel))
	}
	if o.requestLog != "" {
		sink, closeSink, err := requestLogSink(o.requestLog, e.stdout, o.requestLogMax, o.requestLogKeep)
		if err != nil {
			return nil, e.errorf(exitInput, "%v", err), false
		}
		undo.push(closeSink)
		opts = append(opts, gateway.WithRequestLog(sink))
	}
	return opts, 0, true
}

// policySource is where the gateway reads its policy: the pass-through
// policy, the demo's over loopback providers it starts, or the file.
func (o *serveOpts) policySource(upPolicy []byte, popts policy.Options, undo *undoStack) gateway.Source {
	switch {
	case o.passThrough():
		return gateway.Bytes("--upstream", upPolicy, popts)
	case o.file == "":
		urls, stop := startDemoProviders()
		undo.push(stop)
		popts.Getenv = func(string) string { return "demo-needs-no-key" }
		return gateway.Bytes("demo-policy.json", []byte(demoServePolicy(urls)), popts)
	default:
		return gateway.File(o.file, popts)
	}
}

// listen opens the listener and makes the HTTP server over the gateway.
func (o *serveOpts) listen(g *serveGateway, logger *slog.Logger) (*http.Server, net.Listener, error) {
	ln, err := net.Listen("tcp", o.addr)
	if err != nil {
		return nil, nil, err
	}
	// A request whose body length is ambiguous (Content-Length beside
	// Transfer-Encoding) is refused with 400 and its connection closed:
	// net/http alone would serve it and keep the connection.
	ln = gateway.StrictFraming(ln)
	srv := &http.Server{Handler: g.gw, MaxHeaderBytes: serveMaxHeaderBytes, ReadHeaderTimeout: serveReadHeaderTimeout,
		IdleTimeout: serveIdleTimeout, ErrorLog: slog.NewLogLogger(logger.Handler(), slog.LevelWarn)}
	if o.maxConns > 0 {
		g.conns = connlimit.New(ln, o.maxConns)
		ln, srv.ConnState = g.conns, g.conns.ConnState
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
	return srv, ln, nil
}

// watchChanges watches the policy's files and the keys files, when --watch
// says so: a receive from policyChanged or keysChanged is a change (nil:
// not watched). The watchers end when run returns.
func (o *serveOpts) watchChanges(ctx context.Context, logger *slog.Logger, undo *undoStack) (policyChanged, keysChanged <-chan struct{}) {
	// The policy's files and the keys file are watched apart: a keys
	// rotation must not reload the policy, whose new generation starts
	// with no cooldowns, retry budgets or sticky fallbacks in memory, and a
	// policy edit need not re-read the keys. SIGHUP reloads both. The
	// watchers take the files' state before serve says it listens, so
	// that a change made after that is seen.
	if !o.watch {
		return nil, nil
	}
	// Not ended by the stop (ctx), which the shutdown delay serves on
	// past: the watchers end when serve returns.
	wctx, stopWatch := context.WithCancel(context.WithoutCancel(ctx))
	undo.push(stopWatch)
	if o.file != "" {
		policyChanged = watchFiles(wctx, func() []string { return policyFiles(o.file) }, serveWatchInterval, logger, "policy")
	}
	if o.keysFile != "" || o.vkeysFile != "" {
		keysChanged = watchFiles(wctx, func() []string {
			return slices.DeleteFunc([]string{o.keysFile, o.vkeysFile}, func(s string) bool { return s == "" })
		}, serveWatchInterval, logger, "API keys")
	}
	return policyChanged, keysChanged
}

// serveUntilStopped serves on ln, reloading on a change or SIGHUP, until
// the server fails (exitFail) or a SIGTERM, a SIGINT or ctx's end stops
// it; then it drains (exitOK).
func (o *serveOpts) serveUntilStopped(ctx context.Context, e *env, g *serveGateway, srv *http.Server, ln net.Listener, policyChanged, keysChanged <-chan struct{}) int {
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
	o.announce(e.stderr, g, "http://"+ln.Addr().String())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()

	// Policy reloads run in the background (reloader): signals, key
	// rotation and the drain never wait for a compile. A reload during the
	// shutdown delay runs on; the drain abandons the one in progress.
	rl := newReloader(g.gw.Reload, o.reloadBudget, e.log)
	defer rl.stop()
	reloadPolicy := rl.request
	reloadKeys := func(why string) { o.reloadKeys(g, e.log, why) }
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
		g.gw.Unready()
		fmt.Fprintf(e.stderr, "retryhost serve: not ready; serving on for %v before the drain\n", o.shutdownDelay)
		delay = serveDelayTimer(o.shutdownDelay)
		return false
	}
serving:
	for {
		select {
		case err := <-served:
			fmt.Fprintf(e.stderr, "retryhost serve: %v\n", err)
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
	o.drainAndStop(e, g.gw, srv)
	return exitOK
}

// announce says where serve listens, where it exports traces, and what it
// serves without a policy file.
func (o *serveOpts) announce(stderr io.Writer, g *serveGateway, base string) {
	fmt.Fprintf(stderr, "retryhost serve: listening on %s\n", base)
	if g.tr != nil {
		fmt.Fprintf(stderr, "retryhost serve: exporting traces over OTLP/HTTP to %s\n", g.tr.endpoint)
	}
	switch {
	case o.passThrough():
		fmt.Fprintf(stderr, "retryhost serve: passing every model through to %s\n", strings.Join(append([]string{o.up.upstream}, o.up.fallbacks...), ", then "))
	case o.file == "":
		fmt.Fprintf(stderr, "retryhost serve: no --policy, serving the demo policy: routes alpha (refuses in text), beta (rate-limited), gamma (answers); try\n"+
			"  curl -s %s/v1/chat/completions -H 'Content-Type: application/json' -d '{\"model\": \"alpha\", \"stream\": true, \"messages\": [{\"role\": \"user\", \"content\": \"%s\"}]}'\n", base, demoQuestion)
	}
}

// reloadKeys reads the virtual key file and the API keys file again; one
// that does not load keeps the keys in use.
func (o *serveOpts) reloadKeys(g *serveGateway, logger *slog.Logger, why string) {
	if g.keyStore != nil {
		g.keyStore.reload(g, logger, why, true)
	}
	if o.vkeysFile != "" {
		// A key file that does not load keeps the keys in use.
		set, err := vkey.Load(o.vkeysFile)
		if err == nil {
			err = g.gw.SetKeySet(set)
		}
		if err != nil {
			logger.Error("key file reload rejected; the keys in use stay", slog.String("why", why), slog.String("error", err.Error()))
		} else {
			g.onDown.Store(&set.OnStoreDown)
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
		err = g.gw.SetAPIKeys(keys...)
	}
	if err != nil {
		logger.Error("API keys reload rejected; the keys in use stay", slog.String("why", why), slog.String("error", err.Error()))
		return
	}
	logger.Info("API keys reloaded", slog.String("why", why), slog.Int("keys", len(keys)))
}

// drainAndStop stops accepting and closes idle connections, while the
// gateway lets in-flight requests finish until the drain deadline and
// then ends them with the in-band error.
func (o *serveOpts) drainAndStop(e *env, gw *gateway.Gateway, srv *http.Server) {
	fmt.Fprintf(e.stderr, "retryhost serve: draining (up to %v)\n", o.drain)
	sctx, cancel := context.WithTimeout(context.Background(), o.drain+5*time.Second)
	defer cancel()
	shut := make(chan error, 1)
	go func() { shut <- srv.Shutdown(sctx) }()
	dctx, dcancel := context.WithTimeout(context.Background(), o.drain)
	defer dcancel()
	if err := gw.Shutdown(dctx); err != nil {
		e.log.Warn("drain deadline passed; in-flight requests were ended", slog.Duration("drain", o.drain))
	}
	if err := <-shut; err != nil && !errors.Is(err, http.ErrServerClosed) {
		_ = srv.Close()
	}
	fmt.Fprintln(e.stderr, "retryhost serve: stopped")
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
