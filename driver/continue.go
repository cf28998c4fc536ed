package driver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/retryhost/retryhost/abi"
)

// AfterCommit says what a streaming request does when its stream fails
// after commit, once the caller has part of the answer.
type AfterCommit uint8

const (
	// AfterCommitError ends the stream with the error: the caller keeps
	// what it got and nothing is sent twice. The default.
	AfterCommitError AfterCommit = 0
	// AfterCommitContinue opens a new attempt under the rules (the same
	// model where they retry, else the one they switch to) and asks it to
	// continue the answer already sent ([Request.Continue]); its output is
	// spliced onto the stream, so the caller reads one answer. See
	// [WithAfterCommit] for which failures it covers and which it cannot.
	AfterCommitContinue AfterCommit = 1
)

// String returns "error" or "continue".
func (a AfterCommit) String() string {
	if a == AfterCommitContinue {
		return "continue"
	}
	return "error"
}

// ParseAfterCommit reads "error" or "continue".
func ParseAfterCommit(s string) (AfterCommit, error) {
	switch s {
	case "error":
		return AfterCommitError, nil
	case "continue":
		return AfterCommitContinue, nil
	}
	return 0, fmt.Errorf("retryhost: unknown after_commit %q (want error or continue)", s)
}

// DefaultMaxContinuations is [WithMaxContinuations]'s default.
const DefaultMaxContinuations = 2

// DefaultContinuationPrompt is the instruction a continuation sends to a
// model that has no way to take a partial answer as its own (a Chat
// Completions model): after an assistant message with the text already
// sent, a user message with this text. [WithContinuationPrompt] replaces it.
const DefaultContinuationPrompt = "Your previous answer was cut off. Continue it exactly where it stopped: " +
	"do not repeat any of it, do not add a preamble, do not restart the sentence."

// ErrCannotContinue is what a provider adapter returns (wrapped) when it is
// asked to continue ([Request.Continue]) a request whose answer a
// continuation would corrupt, such as one that asked for several choices,
// for log probabilities, or for output in a JSON schema. The rules judge
// it like any other failed attempt.
var ErrCannotContinue = errors.New("retryhost: this request cannot be continued")

// Continuation asks a model to continue an answer it has begun: Text is
// the assistant text the caller already has. Adapters express it in their
// provider's terms: Anthropic's Messages API takes Text as the start of
// the assistant turn (a prefill); a Chat Completions model gets an
// assistant message with Text and a user message with Prompt. It is a
// plain value.
type Continuation struct {
	Text string
	// Prompt is the instruction for models without a prefill; the driver
	// sets it ([WithContinuationPrompt]).
	Prompt string
}

// ThroughputError ends an attempt whose stream, after commit, delivered
// fewer characters per second than [WithThroughputFloor] asks, measured
// over a window of the time spent waiting on the provider. It wraps
// context.DeadlineExceeded, so the rules see a timeout.
type ThroughputError struct {
	Rate   float64       // the characters per second measured
	Floor  float64       // the floor it fell below
	Window time.Duration // the waiting time it was measured over
}

func (e *ThroughputError) Error() string {
	return fmt.Sprintf("retryhost: the stream delivered %.1f characters per second over %v, below the floor of %.1f",
		e.Rate, e.Window, e.Floor)
}

// Unwrap returns context.DeadlineExceeded: a stream too slow is a timeout.
func (e *ThroughputError) Unwrap() error { return context.DeadlineExceeded }

// WithAfterCommit sets what a stream does when it fails after commit:
// [AfterCommitError] (the default) or [AfterCommitContinue].
//
// With AfterCommitContinue, a failure after commit (the connection cut, an
// error event in the stream, the gap or attempt deadline, the throughput
// floor) is judged by the rules as if it had failed before commit; when
// they choose an attempt, it runs with [Request.Continue] holding the text
// already sent, through the transforms and the commit gate (a refusal in
// it fails over again), and its output is spliced on: no second preamble,
// its repeat of the sent text's tail trimmed ([SpliceWindow]), its
// reasoning and raw chunks dropped, its text carried in the open text
// block, one finish whose usage sums every attempt's. At most
// [WithMaxContinuations] continuations per request, inside the budget.
//
// A stream ends with the error, as with AfterCommitError, when: the answer
// sent holds anything but text (a tool call, reasoning, a file, a source:
// a cut inside a tool call's arguments cannot be continued); the caller
// closed or cancelled; the total budget ran out; the limit of continuations
// is reached; or the rules give up. An adapter that cannot express the
// continuation for a request (n > 1, log probabilities, a JSON schema or
// JSON object response format) fails the attempt with [ErrCannotContinue].
//
// Default: AfterCommitError.
func WithAfterCommit(a AfterCommit) StreamOption {
	return func(c *streamConfig) error {
		if a != AfterCommitError && a != AfterCommitContinue {
			return fmt.Errorf("retryhost: unknown after-commit mode %d", a)
		}
		c.afterCommit = a
		return nil
	}
}

// WithMaxContinuations caps the continuations of one request
// ([AfterCommitContinue]); a failure past it ends the stream with its
// error. Default: [DefaultMaxContinuations].
func WithMaxContinuations(n int) StreamOption {
	return func(c *streamConfig) error {
		if n < 1 {
			return fmt.Errorf("retryhost: max continuations %d is below 1", n)
		}
		c.maxCont = n
		return nil
	}
}

// WithContinuationPrompt replaces [DefaultContinuationPrompt], the
// instruction a continuation sends to models without a prefill.
func WithContinuationPrompt(s string) StreamOption {
	return func(c *streamConfig) error {
		if s == "" {
			return errors.New("retryhost: empty continuation prompt")
		}
		c.contPrompt = s
		return nil
	}
}

// WithThroughputFloor fails a committed stream that delivers fewer than
// perSecond characters (Unicode code points of text, reasoning and tool
// input) per second of waiting on the provider, measured over each window
// of such waiting: a stream that trickles. The caller's own reading pace
// never counts. The failure is a *[ThroughputError]: it ends the stream,
// or, with [AfterCommitContinue], opens a continuation. It is judged when
// a part arrives; a provider that sends nothing at all is the gap
// deadline's ([WithGapTimeout]). Default: off.
func WithThroughputFloor(perSecond float64, window time.Duration) StreamOption {
	return func(c *streamConfig) error {
		if !(perSecond > 0) || window <= 0 {
			return fmt.Errorf("retryhost: throughput floor needs a positive rate and window, got %v over %v", perSecond, window)
		}
		c.floorRate, c.floorWindow = perSecond, window
		return nil
	}
}

// WithAfterCommitOn sets [WithAfterCommit]'s mode for the requests that
// start on m (its key; see [StartOn]): a gateway's route, a policy's model
// or group. It wins over WithAfterCommit for those requests. Default: none,
// every request has WithAfterCommit's mode.
func WithAfterCommitOn(m Model, a AfterCommit) StreamOption {
	return func(c *streamConfig) error {
		if m == nil {
			return errors.New("retryhost: WithAfterCommitOn needs a model")
		}
		if err := WithAfterCommit(a)(&streamConfig{}); err != nil {
			return err
		}
		if c.afterCommitOn == nil {
			c.afterCommitOn = map[string]AfterCommit{}
		}
		c.afterCommitOn[m.Key()] = a
		return nil
	}
}

// afterCommitFor is the mode of a request that started on start.
func (c *streamConfig) afterCommitFor(start Model) AfterCommit {
	if len(c.afterCommitOn) > 0 && start != nil {
		if a, ok := c.afterCommitOn[start.Key()]; ok {
			return a
		}
	}
	return c.afterCommit
}

// spliced reports whether a committed stream of q goes through a
// contStream: with continuation or a throughput floor on.
func (c *streamConfig) spliced(q *request) bool {
	return c.floorRate > 0 || c.afterCommitFor(q.startModel) == AfterCommitContinue
}

// continuing hands the caller a stream that carries the committed attempt
// and, where the options ask, its continuations. It replaces the plain
// attemptStream only when continuation or a throughput floor is on: a
// stream without them pays nothing for this.
func (m *RetryableModel) continuing(ctx context.Context, q *request, req *Request, res attemptResult, cancel context.CancelFunc) Stream {
	sctx, stop := context.WithCancelCause(ctx)
	c := &contStream{
		m: m, parent: ctx, ctx: sctx, stop: stop, q: q, req: req,
		cur: res.stream, cancel: cancel,
		cont: m.cfg.afterCommitFor(q.startModel) == AfterCommitContinue,
		max:  m.cfg.maxCont,
	}
	if c.max == 0 {
		c.max = DefaultMaxContinuations
	}
	if m.cfg.floorRate > 0 {
		c.floor, c.window = m.cfg.floorRate, m.cfg.floorWindow
	}
	return c
}

// contStream is a committed stream that survives a failure after commit
// by continuing the answer on a new attempt ([AfterCommitContinue]) and
// that enforces the throughput floor. It is read by one goroutine; Close
// may come from another.
type contStream struct {
	m      *RetryableModel
	parent context.Context // the caller's, for the callbacks
	ctx    context.Context // the stream's: the caller's, ended by Close
	stop   context.CancelCauseFunc
	q      *request
	req    *Request

	qmu    sync.Mutex // the request's state: a continuation in Recv vs Close's outcome
	mu     sync.Mutex // cur and closed, for Close and Header
	cur    *attemptStream
	cancel context.CancelFunc // cur's attempt context
	closed bool
	done   atomic.Bool // the request's outcome fired

	// On the reading goroutine only.
	err     error // terminal, once the queue is drained
	eof     bool  // the upstream ended: flush, then io.EOF
	pending error // a failure judged on a part already delivered (the floor)
	queue   []Part
	finish  *abi.Finish // the last finish delivered, usage summed
	meta    *abi.ResponseMeta

	cont    bool
	max, n  int      // continuations allowed, started
	sent    []string // the text deltas delivered (continue only): joined only to continue
	sentLen int
	tail    []byte // the end of the sent text (SpliceWindow bytes), for the seam
	blocked bool   // something other than text was delivered: no continuation
	textID  string // the open (or last) text block's id
	open    bool   // a text block is open
	usage   Usage  // of the attempts before cur

	// The splice of the current continuation.
	splice  bool
	from    string // the continuation's text block id, carried as textID
	head    []byte // its first text, held until its overlap is settled
	headID  string
	trimmed bool

	floor  float64
	window time.Duration
	waited time.Duration
	chars  int
}

// Recv returns the next part of the answer, across continuations.
func (c *contStream) Recv() (Part, error) {
	for {
		if len(c.queue) > 0 {
			p := c.queue[0]
			c.queue[0] = Part{}
			c.queue = c.queue[1:]
			return c.deliver(p), nil
		}
		if c.err != nil {
			return Part{}, c.err
		}
		if c.eof {
			c.end(io.EOF)
			continue
		}
		if err := c.pending; err != nil {
			c.pending = nil
			_ = c.cur.Close()
			c.failed(err)
			continue
		}
		var p Part
		var err error
		if c.floor > 0 {
			t0 := c.m.cfg.clock.Now()
			p, err = c.cur.Recv()
			c.waited += c.m.cfg.clock.Now().Sub(t0)
		} else {
			p, err = c.cur.Recv()
		}
		if err != nil {
			if err == io.EOF {
				c.flushHead()
				c.eof = true
				continue
			}
			c.head = c.head[:0] // never delivered: the next continuation starts before it
			c.failed(err)
			continue
		}
		if c.floor > 0 {
			c.measure(&p)
		}
		if c.splice && !c.spliceIn(&p) {
			continue
		}
		return c.deliver(p), nil
	}
}

// measure counts p toward the throughput floor and judges each window.
func (c *contStream) measure(p *Part) {
	switch p.Kind {
	case abi.KindTextDelta, abi.KindReasoningDelta, abi.KindToolInputDelta:
		c.chars += utf8.RuneCountInString(p.Delta)
	}
	if c.waited < c.window {
		return
	}
	if rate := float64(c.chars) / c.waited.Seconds(); rate < c.floor {
		c.pending = &ThroughputError{Rate: rate, Floor: c.floor, Window: c.waited}
	}
	c.waited, c.chars = 0, 0
}

// spliceIn maps a continuation's part onto the stream; false drops it or
// holds it (queued behind the head).
func (c *contStream) spliceIn(p *Part) bool {
	switch p.Kind {
	case abi.KindStreamStart, abi.KindResponseMeta, abi.KindRaw,
		abi.KindReasoningStart, abi.KindReasoningDelta, abi.KindReasoningEnd:
		return false // one preamble; the continuation's thoughts and raw chunks are not the answer's
	case abi.KindTextStart:
		if c.open && c.from == "" {
			c.from = p.ID // the answer's block goes on
			return false
		}
	case abi.KindTextDelta:
		if p.ID == c.from {
			p.ID = c.textID
		}
		if !c.trimmed {
			if len(c.head) == 0 {
				c.headID = p.ID
			}
			c.head = append(c.head, p.Delta...)
			if settled(c.tail, c.head, SpliceWindow) {
				c.flushHead()
			}
			return false
		}
		return true
	case abi.KindTextEnd:
		if p.ID == c.from {
			p.ID = c.textID
		}
	}
	if !c.trimmed {
		c.flushHead()
		c.queue = append(c.queue, *p)
		return false
	}
	return true
}

// flushHead settles a continuation's head: its overlap with the sent text
// is dropped and the rest queued.
func (c *contStream) flushHead() {
	if !c.splice || c.trimmed {
		return
	}
	c.trimmed = true
	k := overlap(c.tail, c.head, SpliceWindow)
	if rest := c.head[k:]; len(rest) > 0 {
		c.queue = append(c.queue, Part{Kind: abi.KindTextDelta, ID: c.headID, Delta: string(rest)})
	}
	c.head = c.head[:0]
}

// deliver notes what the caller gets: the text a continuation starts
// from, whether the answer can still be continued, the finish (with the
// usage of the attempts before it added).
func (c *contStream) deliver(p Part) Part {
	switch p.Kind {
	case abi.KindTextDelta:
		if c.cont && p.Delta != "" {
			c.sent = append(c.sent, p.Delta)
			c.sentLen += len(p.Delta)
		}
	case abi.KindTextStart:
		c.open, c.textID = true, p.ID
	case abi.KindTextEnd:
		c.open = false
	case abi.KindFinish:
		if p.Finish != nil && c.n > 0 {
			f := *p.Finish
			f.Usage = addUsage(c.usage, f.Usage)
			p.Finish = &f
		}
		c.finish = p.Finish
	case abi.KindResponseMeta:
		c.meta = p.Meta
	case abi.KindStreamStart, abi.KindRaw, abi.KindInvalid:
	default:
		c.blocked = c.blocked || c.m.cfg.commit.IsContent(&p)
	}
	return p
}

// cannot reports whether a failure after commit must end the stream.
func (c *contStream) cannot(err error) bool {
	var de *DeadlineError
	return !c.cont || c.blocked || c.sentLen == 0 || c.n >= c.max ||
		c.ctx.Err() != nil || errors.Is(err, ErrStreamClosed) ||
		(errors.As(err, &de) && !de.Recoverable())
}

// failed handles a failure of the current attempt: a continuation when it
// can and the rules choose one, else the end of the stream with err.
func (c *contStream) failed(err error) {
	c.qmu.Lock()
	defer c.qmu.Unlock()
	if c.done.Load() { // closed meanwhile: Close has fired the outcome
		c.err = ErrStreamClosed
		return
	}
	if c.cannot(err) {
		c.endLocked(err)
		return
	}
	c.n++
	text := strings.Join(c.sent, "")
	c.sent = append(c.sent[:0], text)
	c.tail = append(c.tail[:0], text[max(0, len(text)-SpliceWindow):]...)
	c.usage = addUsage(c.usage, partialUsage(c.cur))
	c.cancel()
	q := c.q
	next, final := q.fail(c.ctx, err)
	for final == nil {
		if final = q.advance(c.ctx, &next); final != nil {
			break
		}
		actx, cancel := q.attemptContext(c.ctx, &next)
		call := q.call()
		creq := *call.Request(c.req)
		creq.Continue = &Continuation{Text: text, Prompt: c.prompt()}
		res := runAttempt(actx, &attemptSpec{
			model: call.Model, req: &creq, number: call.Number,
			transformers: c.m.cfg.transformers, commit: c.m.cfg.commit,
			firstContent: c.m.cfg.firstContent, gap: c.m.cfg.gap, clock: c.m.cfg.clock,
			maxAnswer: c.m.cfg.maxAnswer,
		})
		if res.err != nil {
			e := q.attemptErr(actx, res.err)
			cancel()
			next, final = q.fail(c.ctx, e)
			continue
		}
		q.depFed()
		c.mu.Lock()
		closed := c.closed
		if !closed {
			c.cur, c.cancel = res.stream, cancel
		}
		c.mu.Unlock()
		if closed { // Close came while it opened: Close waits for us to fire the outcome
			_ = res.stream.Close()
			cancel()
			c.endLocked(ErrStreamClosed)
			return
		}
		c.splice, c.from, c.trimmed, c.head = true, "", false, c.head[:0]
		c.waited, c.chars = 0, 0
		return
	}
	// The request is over (q.fail, advance or the close ended it, and its
	// outcome has fired): the caller gets the failure it would have got
	// without continuation, or the close.
	c.done.Store(true)
	if c.ctx.Err() != nil && errors.Is(context.Cause(c.ctx), ErrStreamClosed) {
		err = ErrStreamClosed
	}
	c.err = err
	c.stop(errAttemptOver)
}

func (c *contStream) prompt() string {
	if c.m.cfg.contPrompt != "" {
		return c.m.cfg.contPrompt
	}
	return DefaultContinuationPrompt
}

// end ends the stream with err (io.EOF: drained) and fires the outcome.
func (c *contStream) end(err error) {
	c.qmu.Lock()
	defer c.qmu.Unlock()
	if c.done.Load() {
		c.err = ErrStreamClosed
		return
	}
	c.endLocked(err)
}

func (c *contStream) endLocked(err error) {
	c.err = err
	c.done.Store(true)
	c.cancel()
	c.stop(errAttemptOver)
	q := c.q
	if err != io.EOF {
		q.failCommitted(c.parent, err)
		return
	}
	if q.obs != nil {
		if f := c.finish; f != nil {
			q.observeResult(f.Reason, f.Usage)
		}
		if m := c.meta; m != nil {
			q.obs.respModel = m.ModelID
		}
	}
	q.succeed(c.parent)
}

// Close abandons the stream: the current attempt is closed at once (also
// when a Recv is blocked on it, or a continuation is opening).
func (c *contStream) Close() error {
	c.mu.Lock()
	c.closed = true
	cur := c.cur
	c.mu.Unlock()
	c.stop(ErrStreamClosed)
	_ = cur.Close()
	c.qmu.Lock()
	if !c.done.Load() {
		c.done.Store(true)
		c.cancel()
		c.q.failCommitted(c.parent, ErrStreamClosed)
	}
	c.qmu.Unlock()
	return nil
}

// Header returns the HTTP response headers of the attempt being read.
func (c *contStream) Header() http.Header {
	c.mu.Lock()
	cur := c.cur
	c.mu.Unlock()
	return cur.Header()
}

var _ HeaderStream = (*contStream)(nil)

// UsageReporter is implemented by a provider's [Stream] that can tell the
// usage it has seen so far (such as the input tokens an Anthropic stream
// reports at its start), so that a stream cut before its finish still
// counts toward the usage a continuation sums.
type UsageReporter interface {
	UsageSoFar() Usage
}

func partialUsage(s *attemptStream) Usage {
	if f := s.finish.Load(); f != nil {
		return f.Usage
	}
	if u, ok := s.up.(UsageReporter); ok {
		return u.UsageSoFar()
	}
	return Usage{}
}

func addUsage(a, b Usage) Usage {
	return Usage{
		InputTokens: a.InputTokens + b.InputTokens, OutputTokens: a.OutputTokens + b.OutputTokens,
		CacheReadTokens: a.CacheReadTokens + b.CacheReadTokens, CacheWriteTokens: a.CacheWriteTokens + b.CacheWriteTokens,
		ReasoningTokens: a.ReasoningTokens + b.ReasoningTokens,
	}
}
