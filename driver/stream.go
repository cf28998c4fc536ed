package driver

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"time"
)

// StreamOption configures the stream side of a [RetryableModel]: its
// transforms, its commit rule and its stream deadlines.
type StreamOption func(*streamConfig) error

type streamConfig struct {
	transformers []Transformer
	commit       CommitRule
	firstContent time.Duration
	gap          time.Duration
	onCommit     func(context.Context, CommitInfo)
	clock        clock
	hedgeAfter   time.Duration // WithHedge; 0: off
	hedgeMax     int
	maxAnswer    int64 // WithMaxAnswerBytes
	// continue.go: WithAfterCommit, WithMaxContinuations,
	// WithContinuationPrompt, WithThroughputFloor
	afterCommit   AfterCommit
	afterCommitOn map[string]AfterCommit // by start model key
	maxCont       int
	contPrompt    string
	floorRate     float64
	floorWindow   time.Duration
	emptyFails    bool // WithEmptyAnswerFails
}

// ErrEmptyAnswer is the cause of an attempt that [WithEmptyAnswerFails]
// failed: its stream finished with no content.
var ErrEmptyAnswer = errors.New("retryhost: the answer finished with no content")

// WithEmptyAnswerFails, on, makes an answer that finishes with no content
// part (the commit rule's content: text, reasoning, a tool call, a file)
// a failure before commit, of class server (a *ProviderError wrapping
// [ErrEmptyAnswer]), so that the rules fail it over like an upstream's
// glitch: a 200 whose only event is its finish. Only a finish for "stop"
// or for a reason the provider did not name: one for length (the token
// cap, which reasoning may use up), a content filter or a refusal is the
// answer it says it is, judged as ever. A continuation ([WithAfterCommit])
// that adds nothing is not one: the answer it continues was whole.
// Default: off, an empty answer commits at its end (CommitInfo.Empty).
func WithEmptyAnswerFails(on bool) StreamOption {
	return func(c *streamConfig) error {
		c.emptyFails = on
		return nil
	}
}

// DefaultMaxAnswerBytes is [WithMaxAnswerBytes]'s default: 32 MiB.
const DefaultMaxAnswerBytes = 32 << 20

// WithMaxAnswerBytes bounds the answer that a request committing at its end
// ([CommitAtEnd]) holds until then, per attempt: the payload bytes of its
// parts ([abi.Part.Size]: text, tool inputs and results, files) plus 256
// for each part (the part itself, and what Size does not count, such as a
// raw chunk). Past it the attempt fails with [ErrAnswerTooLarge] (its
// upstream closed at once) and the rules decide. A stream that commits at
// its first content holds nothing past its preamble and is not bounded by
// it. Default: [DefaultMaxAnswerBytes].
func WithMaxAnswerBytes(n int64) StreamOption {
	return func(c *streamConfig) error {
		if n <= 0 {
			return fmt.Errorf("retryhost: max answer bytes must be positive, got %d", n)
		}
		c.maxAnswer = n
		return nil
	}
}

// WithTransforms sets the transform chain every attempt's parts run
// through, in order, before the commit gate. Calling it again appends.
// Default: none.
//
// A raw part ([abi.KindRaw], a provider's chunk as its adapter decoded
// it) is never shown to a transform: it is metadata about the parts around
// it, not content (a transform that meets a kind it does not read may
// stop reading, which would let a refusal through). It keeps its place:
// when it arrives while a transform holds parts, it waits behind them and
// leaves with them, in order, or is discarded with them when the
// transform replaces or drops them, so a rewritten text never goes out
// beside the raw chunk of the text it replaced. It counts for none of the
// transform's hold caps; a transform holds at most its MaxHeldParts raw
// parts besides its own, and drops raw parts past that. A raw part that
// arrives while nothing is held passes at once, so a consumer that pairs a
// raw chunk with the text after it should compare the text (a transform
// may still rewrite it). Under [CommitLegacy] a raw part commits.
func WithTransforms(ts ...Transformer) StreamOption {
	return func(c *streamConfig) error {
		for i, t := range ts {
			if t == nil {
				return fmt.Errorf("retryhost: transform %d is nil", len(c.transformers)+i)
			}
		}
		c.transformers = append(c.transformers, ts...)
		return nil
	}
}

// WithCommitRule sets which parts commit a stream. Default: [CommitOnOutput].
func WithCommitRule(r CommitRule) StreamOption {
	return func(c *streamConfig) error {
		if r != CommitOnOutput && r != CommitLegacy {
			return fmt.Errorf("retryhost: unknown commit rule %d", r)
		}
		c.commit = r
		return nil
	}
}

// WithFirstContentTimeout bounds, per attempt, the time from its start to
// its first content part. It is recoverable: the attempt fails with a
// *DeadlineError (abi.DeadlineFirstContent) that the rules judge. Default:
// none.
func WithFirstContentTimeout(d time.Duration) StreamOption {
	return func(c *streamConfig) error {
		if d < 0 {
			return fmt.Errorf("retryhost: negative first-content timeout %v", d)
		}
		c.firstContent = d
		return nil
	}
}

// WithGapTimeout bounds the provider's silence between two content parts
// after commit (armed at commit). Only the time the stream spends waiting
// on the upstream counts: a caller that reads slowly, or starts reading
// late, never trips it (what the provider already sent is waiting for it).
// It is not recoverable: the stream ends with a *DeadlineError
// (abi.DeadlineGap), the caller keeping what it got. To cost nothing
// measurable per part it is checked four times per d, so it fires after
// between d and 1.25×d of waiting. Default: none.
func WithGapTimeout(d time.Duration) StreamOption {
	return func(c *streamConfig) error {
		if d < 0 {
			return fmt.Errorf("retryhost: negative gap timeout %v", d)
		}
		c.gap = d
		return nil
	}
}

// CommitInfo is what the OnCommit callback receives.
type CommitInfo struct {
	Model  Model // the model whose stream the caller gets
	Number int   // the committed attempt's number
	// Failed lists the attempts that failed (or whose result a rule
	// rejected) before this one.
	Failed []AttemptRecord
	// Empty reports a stream that ended with no content: it commits at its end.
	Empty   bool
	Elapsed time.Duration
	// Header holds the committed attempt's HTTP response headers when its
	// stream carries them ([HeaderStream]), else nil: the place to log the
	// provider's request id. Do not modify it.
	Header http.Header
}

// WithOnCommit sets a callback fired once per streaming request at the
// moment of commit (the first content part left the transform chain, or the
// stream ended empty), before the caller receives the stream. It runs on
// the caller's goroutine. Default: none.
func WithOnCommit(f func(ctx context.Context, c CommitInfo)) StreamOption {
	return func(c *streamConfig) error { c.onCommit = f; return nil }
}

// withStreamClock replaces the stream deadlines' clock, for tests.
func withStreamClock(k clock) StreamOption {
	return func(c *streamConfig) error { c.clock = k; return nil }
}

// RetryableModel is a [Model] that retries and fails over: every call runs
// on the rules, budgets and callbacks of a [Runner]. Generate runs each
// response through the transform chain (a refusal in a whole answer fails
// the attempt over, as in a stream) and judges each result with the rules
// too (a content-filter finish can switch models); Stream runs each
// attempt through the transform chain into the commit gate, so that
// nothing reaches the caller until an attempt commits, and nothing is ever
// re-run after that.
//
// Being a Model, it composes: use it as a model of another Runner (the
// inner layer recovers refusals and content filters per model, the outer
// layer adds its own deadlines and fallbacks), or call its Stream directly.
//
// # Deadlines
//
// Each deadline fails with a *[DeadlineError] naming it (abi.Deadline), so
// a rule can tell them apart from each other and from the caller's
// cancellation, which surfaces as the caller context's cause and never as a
// DeadlineError. First-content and gap deadlines are the stream's own
// ([WithFirstContentTimeout], [WithGapTimeout]); attempt and total are the
// Runner's ([WithAttemptTimeout], [WithBudget]). Every attempt gets fresh
// first-content, attempt and gap deadlines. Whether one is recoverable (the
// rules may fail over) depends on when it fires (reference §7.5):
//
//	deadline       fires                          recoverable
//	first content  before the first content part  yes: the attempt fails, the rules decide
//	attempt        before commit                  yes
//	attempt        after commit                   no: the stream ends with it (truncated)
//	total          any time                       no: the request ends with it
//	gap            after commit only              no: the stream ends with it (truncated)
//	caller cancel  any time                       no: a hard stop, context.Canceled and its cause
//
// The gap deadline counts only the time spent waiting on the provider,
// never the caller's reading pace. A deadline that fires just as the
// attempt commits either fails the attempt before anything reaches the
// caller or is ignored: a first-content deadline never ends a committed
// stream.
//
// # Outcome callbacks
//
// Exactly one of the Runner's OnSuccess and OnFailure fires per request. For
// a stream that is when it ends: OnSuccess when drained to io.EOF, OnFailure
// when every attempt failed before commit, when the committed stream ends
// with an error, or when the caller closes it before its end
// (ErrStreamClosed). OnCommit ([WithOnCommit]) fires at commit.
//
// A RetryableModel is safe for concurrent use; each request keeps its own state.
type RetryableModel struct {
	r   *Runner
	cfg streamConfig
}

// NewRetryableModel wraps r's models. A configuration mistake is an error
// here, never at request time.
func NewRetryableModel(r *Runner, opts ...StreamOption) (*RetryableModel, error) {
	if r == nil {
		return nil, errors.New("retryhost: nil runner")
	}
	m := &RetryableModel{r: r, cfg: streamConfig{clock: realClock{}, maxAnswer: DefaultMaxAnswerBytes}}
	for _, o := range opts {
		if o == nil {
			return nil, errors.New("retryhost: nil stream option")
		}
		if err := o(&m.cfg); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// Key returns the key of the Runner's base model.
func (m *RetryableModel) Key() string { return m.r.Base().Key() }

// Stream runs one streaming request. It returns once an attempt commits:
// the stream then replays the preamble held until commit (exactly one, that
// of the answering model) and the first content, and goes on pulling the
// upstream as the caller reads. Before commit, an error, an error part, a
// transform's error or a recoverable deadline fails the attempt (its
// upstream is closed at once) and the rules decide what runs next; when
// they do not, Stream returns the request's error (see [Do] for its shape).
//
// After commit, errors end the stream: Recv returns them (an upstream
// error, a transform error, a gap, attempt or total deadline, or the error
// of an error part, which never reaches the caller as a part). The caller's
// cancellation of ctx is a hard stop at any time: Recv (or Stream) returns
// the context's cause.
//
// The caller must read the stream to its end or Close it: until then the
// attempt's upstream, timers and transform state stay open.
//
// The stream implements [HeaderStream]: Header returns the HTTP response
// headers of the attempt that answered, when its model's stream carries
// them (the provider adapters' do), else nil.
func (m *RetryableModel) Stream(ctx context.Context, req *Request) (Stream, error) {
	if req == nil {
		return nil, errors.New("retryhost: Stream needs a request")
	}
	q := &request{op: opStream} // lives as long as the stream: its outcome fires at the end
	st := q.start(ctx, m.r)
	if m.cfg.hedgeMax > 0 && !q.disabled {
		return m.streamHedged(ctx, q, st, req)
	}
	atEnd := CommitsAtEnd(ctx)
	for {
		actx, cancel := q.attemptContext(ctx, &st)
		c := q.call()
		res := runAttempt(actx, &attemptSpec{
			model: c.Model, req: c.Request(req), number: c.Number,
			transformers: m.cfg.transformers, commit: m.cfg.commit,
			firstContent: m.cfg.firstContent, gap: m.cfg.gap, clock: m.cfg.clock,
			atEnd: atEnd, maxAnswer: m.cfg.maxAnswer, emptyFails: m.cfg.emptyFails,
		})
		var final error
		switch {
		case res.err != nil:
			err := q.attemptErr(actx, res.err)
			cancel()
			if st, final = q.fail(ctx, err); final != nil {
				return nil, final
			}
		case res.empty || res.whole:
			var fin Finish
			if res.finish != nil {
				fin = *res.finish
			}
			next, retry, final := q.judge(ctx, fin.Reason, fin.Usage)
			if final != nil || retry {
				_ = res.stream.Close() // rejected: discarded unseen
				cancel()
				if final != nil {
					return nil, final
				}
				st = next
				break
			}
			return m.commit(ctx, q, req, res, cancel), nil
		default:
			return m.commit(ctx, q, req, res, cancel), nil
		}
		if final = q.advance(ctx, &st); final != nil {
			return nil, final
		}
	}
}

// commit hands the committed attempt to the caller and wires the request's
// outcome to the stream's end.
func (m *RetryableModel) commit(ctx context.Context, q *request, req *Request, res attemptResult, cancel context.CancelFunc) Stream {
	q.depFed() // a group's latency is the time to first content
	if q.obs != nil {
		if res.finish != nil {
			q.observeResult(res.finish.Reason, res.finish.Usage)
		}
		q.observeCommit(res.empty)
	}
	if f := m.cfg.onCommit; f != nil {
		f(ctx, CommitInfo{Model: q.cur.model, Number: q.cur.number, Failed: slices.Clone(q.records),
			Empty: res.empty, Elapsed: q.r.cfg.now().Sub(q.begun), Header: res.stream.Header()})
	}
	if m.cfg.spliced(q) {
		return m.continuing(ctx, q, req, res, cancel)
	}
	res.stream.onEnd = func(err error) {
		cancel()
		if err == nil {
			if f := res.stream.finish.Load(); f != nil && q.obs != nil {
				q.observeResult(f.Reason, f.Usage)
			}
			if m := res.stream.meta.Load(); m != nil && q.obs != nil {
				q.obs.respModel = m.ModelID
			}
			q.succeed(ctx)
		} else {
			q.failCommitted(ctx, err)
		}
	}
	return res.stream
}
