package driver

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/retryhost/retryhost/abi"
)

// Observer receives the lifecycle of every request a [Runner] runs, for
// telemetry: the call layer ([Do], [Runner.Generate]) and the stream layer
// ([RetryableModel.Stream]) alike. Install one with [WithObserver]; the
// OpenTelemetry adapter in provider/otel and [SlogObserver] implement it.
//
// Per request the driver calls, on the request's goroutine and in this
// order: RequestStart once; then per attempt AttemptStart, at most one
// Commit (the attempt whose answer the caller gets), and AttemptEnd; then
// RequestEnd once. For a stream, the committed attempt's AttemptEnd and the
// RequestEnd come when the stream ends (drained, failed or closed), on the
// goroutine that ended it.
//
// RequestStart and AttemptStart return the context the next events of
// their scope receive: AttemptStart's is also the parent of the attempt's
// own context (the one the model is called with), so a span started there
// is the parent of the provider's HTTP spans. Return ctx itself to add
// nothing.
//
// Events carry no prompt or output text, only models, counts, classes,
// durations and errors. An Observer must be safe for concurrent use and
// fast: it runs on the request's path. Events are plain values, valid
// after the call.
type Observer interface {
	RequestStart(ctx context.Context, e RequestEvent) context.Context
	AttemptStart(ctx context.Context, e AttemptEvent) context.Context
	AttemptEnd(ctx context.Context, e AttemptEndEvent)
	Commit(ctx context.Context, e CommitEvent)
	RequestEnd(ctx context.Context, e RequestEndEvent)
}

// The operations a request runs, as in [RequestEvent.Op].
const (
	OpDo       = "do"       // Do: a caller-defined call
	OpGenerate = "generate" // Runner.Generate / RetryableModel.Generate
	OpStream   = "stream"   // RetryableModel.Stream
)

// RequestEvent starts a request.
type RequestEvent struct {
	Op    string // OpDo, OpGenerate or OpStream
	Model Model  // the model the first attempt runs on (sticky fallback applied; a group's deployment)
	// Disabled reports a request run with retrying off (see WithDisabled):
	// one attempt, no rules.
	Disabled bool
}

// AttemptEvent starts an attempt.
type AttemptEvent struct {
	Model   Model
	Number  int           // 1-based
	Timeout time.Duration // the attempt's own deadline; 0: none
	Delay   time.Duration // the backoff waited before it
	// FailOver reports an attempt on another model than the one before it.
	FailOver bool
}

// AttemptOutcome is how an attempt ended.
type AttemptOutcome uint8

const (
	// AttemptSucceeded: its answer is the request's (for a stream: it was
	// committed and drained to its end).
	AttemptSucceeded AttemptOutcome = iota
	// AttemptFailed: it failed with an error before any answer reached the
	// caller; the rules were asked what to do next.
	AttemptFailed
	// AttemptRejected: it returned a result that a rule rejected.
	AttemptRejected
	// AttemptTruncated: a committed stream ended with an error (a gap,
	// attempt or total deadline, an upstream error, the caller's Close):
	// the caller keeps what it got.
	AttemptTruncated
)

var outcomeNames = [...]string{"success", "error", "rejected", "truncated"}

// String returns "success", "error", "rejected" or "truncated".
func (o AttemptOutcome) String() string {
	if int(o) < len(outcomeNames) {
		return outcomeNames[o]
	}
	return "unknown"
}

// AttemptEndEvent ends an attempt.
type AttemptEndEvent struct {
	Model    Model
	Number   int
	Outcome  AttemptOutcome
	Err      error          // the attempt's error; nil unless Failed or Truncated
	Class    abi.ErrorClass // the driver's classification of Err
	Deadline abi.Deadline   // which deadline fired, for ClassTimeout
	Status   int            // the HTTP status of a provider error; 0 otherwise
	Finish   FinishReason   // when the attempt returned a result (Generate, a stream's finish part)
	Usage    Usage          // likewise
	// ResponseModel is the model id the provider says answered (its
	// ResponseMeta.ModelID, such as "gpt-4o-2024-08-06"), for a
	// successful attempt whose provider reported one; "" otherwise.
	ResponseModel string
	Duration      time.Duration // from the attempt's start
	// Next is the model of the attempt the rules chose to run next, nil
	// when the request ends with this attempt; Delay is the backoff
	// scheduled before it.
	Next  Model
	Delay time.Duration
	// ConditionErr is what went wrong with the conditions asked about this
	// attempt and treated as no opinion, as in [AttemptRecord.ConditionErr]
	// (an *UnknownModelError names the model a condition wanted).
	ConditionErr error
}

// CommitEvent marks the attempt whose answer the caller gets: for a stream
// the moment its first content part passes the commit gate (or it ends
// empty), for a call the moment its result is accepted.
type CommitEvent struct {
	Model  Model
	Number int
	// Latency is the time from the attempt's start to commit.
	Latency time.Duration
	// Elapsed is the time from the request's start to commit.
	Elapsed time.Duration
	Empty   bool // a stream that ended with no content
}

// RequestEndEvent ends a request.
type RequestEndEvent struct {
	Model    Model // the model of the last attempt: the one that answered on success
	Attempts int   // how many attempts ran
	// FailOvers counts the attempts that ran on another model than the one before.
	FailOvers int
	Err       error // the error the caller receives; nil on success
	// Class is the classification of the last attempt's error (ClassNone
	// on success, or when the last attempt returned a rejected result).
	Class  abi.ErrorClass
	Finish FinishReason
	Usage  Usage
	// ResponseModel is the model id the provider says answered, on
	// success, when it reported one (see AttemptEndEvent.ResponseModel).
	ResponseModel string
	Elapsed       time.Duration
}

// WithObserver installs o to receive every request's events (see
// [Observer]), for Do, Generate and the streams of every [RetryableModel]
// built on the Runner. Calling it again adds another observer; they are
// called in order. Default: none, which costs nothing on the request path.
func WithObserver(o Observer) Option {
	return func(c *config) error {
		if o == nil {
			return errors.New("retryhost: nil observer")
		}
		switch prev := c.observer.(type) {
		case nil:
			c.observer = o
		case multiObserver:
			c.observer = append(prev, o)
		default:
			c.observer = multiObserver{prev, o}
		}
		return nil
	}
}

type multiObserver []Observer

func (m multiObserver) RequestStart(ctx context.Context, e RequestEvent) context.Context {
	for _, o := range m {
		ctx = o.RequestStart(ctx, e)
	}
	return ctx
}

func (m multiObserver) AttemptStart(ctx context.Context, e AttemptEvent) context.Context {
	for _, o := range m {
		ctx = o.AttemptStart(ctx, e)
	}
	return ctx
}

func (m multiObserver) AttemptEnd(ctx context.Context, e AttemptEndEvent) {
	for _, o := range m {
		o.AttemptEnd(ctx, e)
	}
}

func (m multiObserver) Commit(ctx context.Context, e CommitEvent) {
	for _, o := range m {
		o.Commit(ctx, e)
	}
}

func (m multiObserver) RequestEnd(ctx context.Context, e RequestEndEvent) {
	for _, o := range m {
		o.RequestEnd(ctx, e)
	}
}

// The engine's side: each method but observeStart is called only when
// q.obs is set.

// opCode says which API runs a request, as a byte so that a request
// without an observer stays small.
type opCode uint8

const (
	opDo opCode = iota
	opGenerate
	opStream
)

var opNames = [...]string{OpDo, OpGenerate, OpStream}

// observed is a request's telemetry state, allocated only when the Runner
// has an Observer.
type observed struct {
	o                   Observer
	octx, aoctx         context.Context // the request's and the attempt's observer contexts
	prevModel           Model
	attempts, failOvers int
	aopen, committed    bool
	finish              FinishReason // the answer's, when known
	usage               Usage
	respModel           string // the answer's ResponseMeta.ModelID, when known
}

// observeStart sets q.obs up and fires RequestStart.
func (q *request) observeStart(ctx context.Context, o Observer) {
	q.obs = &observed{o: o}
	q.obs.octx = o.RequestStart(ctx, RequestEvent{Op: opNames[q.op], Model: q.cur.model, Disabled: q.disabled})
}

// observeAttempt fires AttemptStart for q.cur and returns the context the
// attempt's own context derives from.
func (q *request) observeAttempt() context.Context {
	t := q.obs
	failOver := t.prevModel != nil && !sameModel(t.prevModel, q.cur.model)
	if failOver {
		t.failOvers++
	}
	t.prevModel = q.cur.model
	t.attempts++
	t.aopen = true
	t.respModel = "" // an earlier attempt's answer is not this one's
	t.aoctx = t.o.AttemptStart(t.octx, AttemptEvent{
		Model: q.cur.model, Number: q.cur.number, Timeout: q.cur.timeout, Delay: q.cur.delay, FailOver: failOver,
	})
	return t.aoctx
}

// observeEnd fires AttemptEnd for the current attempt, once. q.a describes
// it unless the outcome is a success; next is the step chosen after it.
func (q *request) observeEnd(outcome AttemptOutcome, err error, next *step) {
	t := q.obs
	if !t.aopen {
		return
	}
	t.aopen = false
	e := AttemptEndEvent{Model: q.cur.model, Number: q.cur.number, Outcome: outcome, Err: err}
	if outcome == AttemptSucceeded {
		e.Finish, e.Usage, e.ResponseModel = t.finish, t.usage, t.respModel
		e.Duration = q.r.cfg.now().Sub(q.attemptAt)
		e.ConditionErr = q.accepted
	} else if a := q.a; a != nil {
		e.Class, e.Deadline, e.Status = a.Class, a.Deadline, a.Status
		e.Finish, e.Usage, e.Duration = a.Finish, a.Usage, a.Duration
		if n := len(q.records); n > 0 {
			e.ConditionErr = q.records[n-1].ConditionErr
		}
	}
	if next != nil {
		e.Next, e.Delay = next.model, next.delay
	}
	t.o.AttemptEnd(t.aoctx, e)
}

// observeFinal fires the last AttemptEnd (if still open) and RequestEnd for
// a request that fails with err.
func (q *request) observeFinal(err error) {
	outcome := AttemptFailed
	var aerr error
	if n := len(q.records); n > 0 {
		if aerr = q.records[n-1].Err; aerr == nil {
			outcome = AttemptRejected
		} else if q.obs.committed {
			outcome = AttemptTruncated
		}
	}
	q.observeEnd(outcome, aerr, nil)
	var class abi.ErrorClass
	if q.a != nil {
		class = q.a.Class
	}
	q.observeRequestEnd(err, class, FinishReason{}, Usage{})
}

func (q *request) observeRequestEnd(err error, class abi.ErrorClass, finish FinishReason, usage Usage) {
	t := q.obs
	e := RequestEndEvent{
		Model: q.cur.model, Attempts: t.attempts, FailOvers: t.failOvers, Err: err, Class: class,
		Finish: finish, Usage: usage, Elapsed: q.r.cfg.now().Sub(q.begun),
	}
	if err == nil {
		e.ResponseModel = t.respModel
	}
	t.o.RequestEnd(t.octx, e)
}

// observeResult keeps the answer's finish reason and usage for the events.
func (q *request) observeResult(f FinishReason, u Usage) {
	q.obs.finish, q.obs.usage = f, u
}

// observeCommit fires Commit for the current attempt.
func (q *request) observeCommit(empty bool) {
	t := q.obs
	t.committed = true
	now := q.r.cfg.now()
	t.o.Commit(t.aoctx, CommitEvent{
		Model: q.cur.model, Number: q.cur.number, Latency: now.Sub(q.attemptAt), Elapsed: now.Sub(q.begun), Empty: empty,
	})
}

// observeSuccess fires Commit (for a call: the accepted result), the last
// AttemptEnd and RequestEnd of a request that succeeded.
func (q *request) observeSuccess() {
	if !q.obs.committed {
		q.observeCommit(false)
	}
	q.observeEnd(AttemptSucceeded, nil, nil)
	q.observeRequestEnd(nil, abi.ClassNone, q.obs.finish, q.obs.usage)
}

// SlogObserver returns an [Observer] that logs every event to l with
// structured attributes: at Debug the request and attempt starts and the
// commit, at Info an attempt that failed or was rejected (with its class,
// deadline, HTTP status and the delay before the next attempt) and the
// request's end, at Warn a request that failed. It logs no prompt or output
// text, and so no error message either (a provider's may quote the prompt,
// a refusal's quotes the output): errors are logged as their class. It is
// for users without OpenTelemetry; it is safe for concurrent use as l is.
func SlogObserver(l *slog.Logger) Observer {
	if l == nil {
		l = slog.New(slog.DiscardHandler)
	}
	return slogObserver{l}
}

type slogObserver struct{ l *slog.Logger }

func modelKey(m Model) string {
	if m == nil {
		return ""
	}
	return m.Key()
}

func (s slogObserver) RequestStart(ctx context.Context, e RequestEvent) context.Context {
	if s.l.Enabled(ctx, slog.LevelDebug) {
		s.l.LogAttrs(ctx, slog.LevelDebug, "retryhost: request start",
			slog.String("op", e.Op), slog.String("model", modelKey(e.Model)), slog.Bool("disabled", e.Disabled))
	}
	return ctx
}

func (s slogObserver) AttemptStart(ctx context.Context, e AttemptEvent) context.Context {
	if s.l.Enabled(ctx, slog.LevelDebug) {
		s.l.LogAttrs(ctx, slog.LevelDebug, "retryhost: attempt start",
			slog.String("model", modelKey(e.Model)), slog.Int("attempt", e.Number),
			slog.Duration("delay", e.Delay), slog.Bool("fail_over", e.FailOver))
	}
	return ctx
}

func (s slogObserver) AttemptEnd(ctx context.Context, e AttemptEndEvent) {
	level := slog.LevelInfo
	if e.Outcome == AttemptSucceeded {
		level = slog.LevelDebug
	}
	if !s.l.Enabled(ctx, level) {
		return
	}
	attrs := []slog.Attr{
		slog.String("model", modelKey(e.Model)), slog.Int("attempt", e.Number),
		slog.String("outcome", e.Outcome.String()), slog.Duration("duration", e.Duration),
	}
	if e.Err != nil {
		attrs = append(attrs, slog.String("class", e.Class.String()))
		if e.Deadline != abi.DeadlineNone {
			attrs = append(attrs, slog.String("deadline", e.Deadline.String()))
		}
		if e.Status != 0 {
			attrs = append(attrs, slog.Int("status", e.Status))
		}
	}
	if e.Next != nil {
		attrs = append(attrs, slog.String("next_model", e.Next.Key()), slog.Duration("delay", e.Delay))
	}
	var ue *UnknownModelError
	if errors.As(e.ConditionErr, &ue) { // a model key, no text: safe to log
		attrs = append(attrs, slog.String("unknown_model", ue.Model))
	}
	s.l.LogAttrs(ctx, level, "retryhost: attempt end", attrs...)
}

func (s slogObserver) Commit(ctx context.Context, e CommitEvent) {
	if s.l.Enabled(ctx, slog.LevelDebug) {
		s.l.LogAttrs(ctx, slog.LevelDebug, "retryhost: commit",
			slog.String("model", modelKey(e.Model)), slog.Int("attempt", e.Number),
			slog.Duration("latency", e.Latency), slog.Bool("empty", e.Empty))
	}
}

func (s slogObserver) RequestEnd(ctx context.Context, e RequestEndEvent) {
	level := slog.LevelInfo
	if e.Err != nil {
		level = slog.LevelWarn
	}
	if !s.l.Enabled(ctx, level) {
		return
	}
	attrs := []slog.Attr{
		slog.String("model", modelKey(e.Model)), slog.Int("attempts", e.Attempts),
		slog.Int("fail_overs", e.FailOvers), slog.Duration("elapsed", e.Elapsed),
	}
	if e.Err != nil {
		attrs = append(attrs, slog.String("class", ErrorName(e.Err, e.Class)))
	} else {
		attrs = append(attrs, slog.Int64("input_tokens", e.Usage.InputTokens), slog.Int64("output_tokens", e.Usage.OutputTokens))
	}
	s.l.LogAttrs(ctx, level, "retryhost: request end", attrs...)
}

// ErrorName names a request's error without its message, for telemetry:
// class when it is not ClassNone (the last attempt's classification), else
// "timeout" for a *DeadlineError, "closed" (ErrStreamClosed), "canceled",
// "gave-up" (ErrGaveUp), "max-attempts" (ErrMaxAttempts), or "error".
func ErrorName(err error, class abi.ErrorClass) string {
	var de *DeadlineError
	switch {
	case class != abi.ClassNone:
		return class.String()
	case errors.As(err, &de):
		return "timeout"
	case errors.Is(err, ErrStreamClosed):
		return "closed"
	case errors.Is(err, context.Canceled):
		return "canceled"
	case errors.Is(err, ErrGaveUp):
		return "gave-up"
	case errors.Is(err, ErrMaxAttempts):
		return "max-attempts"
	}
	return "error"
}
