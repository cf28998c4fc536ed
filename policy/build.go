package policy

import (
	"context"
	"strings"
	"time"

	"github.com/retryhost/retryhost/driver"
	"github.com/retryhost/retryhost/internal/leaf/strict"
)

type builder struct {
	index  map[string]int // model name → its index in models
	doc    *strict.Doc
	prefix string
	opts   Options
	p      *Policy
	sb     *SandboxSpec
	// retryDelay is Options.DefaultBackoff's delay when the file gives no
	// backoff.delay: the wait of a retry that names none.
	retryDelay time.Duration
	raw        bool // Options.RawChunks, in a file whose commit rule is not legacy
	// upJSON is Options.DefaultUpstreamJSON, in a file that needs no
	// streamed upstream for a request that commits at its end.
	upJSON bool
	// plugins counts the plugin names given so far: a name given twice
	// (two files of one base name, a built-in used twice) gets "#2", "#3"
	// …, so that its logs, errors and metric series are its own.
	plugins map[string]int
}

func (b *builder) errf(path, format string, args ...any) error {
	if b.prefix != "" {
		path = strings.TrimSuffix(b.prefix+"."+path, ".")
	}
	return b.doc.Errorf(path, format, args...)
}

func dur(d *Duration) time.Duration {
	if d == nil {
		return 0
	}
	return time.Duration(*d)
}

// buildOptions collects what the steps of build make: the Runner's options and
// the RetryableModel's.
type buildOptions struct {
	runner []driver.Option
	stream []driver.StreamOption
}

// build turns a decoded file into the policy's Runner and RetryableModel.
// Its steps run in the file's order of concerns, each reporting the first
// mistake it finds in its part of the file.
func (b *builder) build(ctx context.Context, f *File) error {
	if len(f.Models) == 0 {
		return b.errf("models", "at least one model is required (the first is the base model)")
	}
	b.raw = b.opts.RawChunks && f.Commit != "legacy" // see Options.RawChunks
	b.upJSON = b.opts.DefaultUpstreamJSON && !b.needsStream(f)
	var o buildOptions
	start, err := b.declare(ctx, f, &o)
	if err != nil {
		return err
	}
	for _, step := range []func(*File, *buildOptions) error{
		b.deadlines, b.hedge, b.backoff, b.limits, b.cooldown, b.retryBudget, b.sharedState, b.commit, b.sandboxChecks,
	} {
		if err := step(f, &o); err != nil {
			return err
		}
	}
	r, err := driver.New(start, append(o.runner, b.opts.RunnerOptions...)...)
	if err != nil {
		return b.errf("", "%v", err)
	}
	m, err := driver.NewRetryableModel(r, append(o.stream, b.opts.StreamOptions...)...)
	if err != nil {
		return b.errf("", "%v", err)
	}
	b.p.Runner, b.p.Model = r, m
	return nil
}

// declare builds the models and groups, then the rules and transforms
// (whose plugins need the sandbox), and returns the model requests start
// on.
func (b *builder) declare(ctx context.Context, f *File, o *buildOptions) (driver.Model, error) {
	for i := range f.Models {
		if err := b.model(i, &f.Models[i]); err != nil {
			return nil, err
		}
	}
	groups := make([]driver.Model, 0, len(f.Groups))
	for i := range f.Groups {
		g, err := b.group(i, &f.Groups[i])
		if err != nil {
			return nil, err
		}
		groups = append(groups, g)
	}
	if err := b.embeddings(f); err != nil {
		return nil, err
	}
	b.sb = &f.Sandbox
	if d := b.opts.DefaultBackoff; d != nil && !b.doc.Has(b.path("backoff.delay")) {
		b.retryDelay = d.Delay
	}
	if d := b.opts.DefaultRules; d != nil && !b.doc.Has(b.path("rules")) {
		names := make([]string, len(f.Models))
		for i, m := range f.Models {
			names[i] = m.Name
		}
		f.Rules = d(names)
	}
	for i := range f.Rules {
		c, err := b.rule(ctx, i, &f.Rules[i])
		if err != nil {
			return nil, err
		}
		o.runner = append(o.runner, driver.WithRules(c))
	}
	for i := range f.Transforms {
		t, err := b.transform(ctx, i, &f.Transforms[i])
		if err != nil {
			return nil, err
		}
		o.stream = append(o.stream, driver.WithTransforms(t))
	}
	models := make([]driver.Model, 0, len(f.Models))
	for _, m := range f.Models {
		models = append(models, b.p.Models[m.Name])
	}
	start := models[0]
	if f.Start != "" {
		if start = b.p.Models[f.Start]; start == nil {
			return nil, b.errf("start", "unknown model or group %q", f.Start)
		}
	}
	o.runner = append(o.runner, driver.WithModels(models...), driver.WithModels(groups...), driver.WithLogger(b.opts.Logger))
	return start, nil
}

// deadlines reads the attempt, budget, first-content and gap deadlines.
func (b *builder) deadlines(f *File, o *buildOptions) error {
	dl := f.Deadlines
	for _, l := range [...]struct {
		path string
		d    *Duration
		none string
	}{
		{"deadlines.attempt", dl.Attempt, "no deadline"}, {"deadlines.budget", dl.Budget, "no budget"},
		{"deadlines.first_content", dl.FirstContent, "no deadline"}, {"deadlines.gap", dl.Gap, "no deadline"},
		{"backoff.max_delay", f.Backoff.MaxDelay, "no cap"},
	} {
		// In Go, a zero duration is the documented way to say "none"; in
		// a file, "0s" reads as "no time at all", so it is refused rather
		// than silently meaning the opposite.
		if l.d != nil && *l.d == 0 {
			return b.errf(l.path, "\"0s\" would mean %s: omit the field for %s, or give a positive duration", l.none, l.none)
		}
	}
	o.runner = append(o.runner, driver.WithAttemptTimeout(dur(dl.Attempt)), driver.WithBudget(dur(dl.Budget)))
	first, gap := dur(dl.FirstContent), dur(dl.Gap)
	if dl.FirstContent == nil {
		first = b.opts.DefaultFirstContent
	}
	if dl.Gap == nil {
		gap = b.opts.DefaultGap
	}
	o.stream = append(o.stream, driver.WithFirstContentTimeout(first), driver.WithGapTimeout(gap))
	return nil
}

// hedge reads the hedge, if the file has one, else
// Options.DefaultHedge's.
func (b *builder) hedge(f *File, o *buildOptions) error {
	h := f.Hedge
	if h == nil {
		if d := b.opts.DefaultHedge; d > 0 && !b.doc.Has(b.path("hedge")) && f.Deadlines.FirstContent == nil && hedgesByDefault(f, f.Rules) {
			o.stream = append(o.stream, driver.WithHedge(d, 1))
		}
		return nil
	}
	max := 1
	switch {
	case h.After == nil:
		return b.errf("hedge.after", "required: how long an attempt may go without first content before a hedge starts")
	case *h.After <= 0:
		return b.errf("hedge.after", "must be a positive duration")
	case h.Max != nil && *h.Max < 1:
		return b.errf("hedge.max", "must be at least 1 (omit hedge to turn it off), got %d", *h.Max)
	case h.Max != nil:
		max = *h.Max
	}
	o.stream = append(o.stream, driver.WithHedge(dur(h.After), max))
	return nil
}

// backoff reads the backoff, completed by Options.DefaultBackoff when the
// file gives no delay.
func (b *builder) backoff(f *File, o *buildOptions) error {
	bo := driver.Backoff{Delay: dur(f.Backoff.Delay), Factor: f.Backoff.Factor, MaxDelay: dur(f.Backoff.MaxDelay), Seed: f.Backoff.Seed}
	if bo.Factor != 0 && bo.Factor < 1 {
		return b.errf("backoff.factor", "factor %v is below 1", bo.Factor)
	}
	switch f.Backoff.Jitter {
	case "", "none":
	case "full":
		bo.Jitter = driver.JitterFull
	case "equal":
		bo.Jitter = driver.JitterEqual
	default:
		return b.errf("backoff.jitter", "unknown jitter %q (want none, full or equal)", f.Backoff.Jitter)
	}
	if d := b.opts.DefaultBackoff; d != nil && !b.doc.Has(b.path("backoff.delay")) {
		// No delay in the file: retries wait the default's delay (set on
		// each retry rule, so that a switch to another model does not
		// wait), grown, capped and jittered as the file says, else as the
		// default does.
		if f.Backoff.Factor == 0 {
			bo.Factor = d.Factor
		}
		if f.Backoff.MaxDelay == nil {
			bo.MaxDelay = d.MaxDelay
		}
		if f.Backoff.Jitter == "" {
			bo.Jitter = d.Jitter
		}
	}
	o.runner = append(o.runner, driver.WithBackoff(bo))
	return nil
}

// limits reads max_attempts, retry_after_cap and sticky.
func (b *builder) limits(f *File, o *buildOptions) error {
	if b.doc.Has(b.path("max_attempts")) {
		if f.MaxAttempts < 1 {
			return b.errf("max_attempts", "must be at least 1, got %d", f.MaxAttempts)
		}
		o.runner = append(o.runner, driver.WithMaxAttempts(f.MaxAttempts))
	}
	if f.RetryAfterCap != nil {
		o.runner = append(o.runner, driver.WithRetryAfterCap(dur(f.RetryAfterCap)))
	}
	if f.Sticky != "" {
		s, err := driver.ParseSticky(f.Sticky)
		if err != nil {
			return b.errf("sticky", "unknown sticky policy %q (want after-request, after-N-requests or after-N-seconds)", f.Sticky)
		}
		o.runner = append(o.runner, driver.WithSticky(s))
	}
	return nil
}

// cooldown reads the cooldown, or applies Options.DefaultCooldown to a
// file that gives none and whose rules can switch models.
func (b *builder) cooldown(f *File, o *buildOptions) error {
	if cs := f.Cooldown; cs != nil {
		if cs.Failures < 1 {
			return b.errf("cooldown.failures", "must be at least 1, got %d", cs.Failures)
		}
		if dur(cs.For) <= 0 {
			return b.errf("cooldown.for", "a positive duration is required")
		}
		c := driver.Cooldown{Failures: cs.Failures, For: dur(cs.For), Max: dur(cs.Max)}
		if cs.Max != nil && c.Max < c.For {
			return b.errf("cooldown.max", "must be at least for (%v), got %v", c.For, c.Max)
		}
		if cs.When != nil {
			m, err := b.match("cooldown.when", cs.When)
			if err != nil {
				return err
			}
			c.When = m
		}
		o.runner = append(o.runner, driver.WithCooldown(c))
	} else if d := b.opts.DefaultCooldown; d != nil && !b.doc.Has(b.path("cooldown")) && switchesModel(f.Rules) {
		o.runner = append(o.runner, driver.WithCooldown(*d))
	}
	return nil
}

// retryBudget reads the retry budget, if the file has one.
func (b *builder) retryBudget(f *File, o *buildOptions) error {
	rb := f.RetryBudget
	if rb == nil {
		return nil
	}
	bud := driver.RetryBudget{Percent: driver.DefaultBudgetPercent, MinRetries: driver.DefaultBudgetMinRetries}
	if rb.Percent != nil {
		if *rb.Percent < 1 || *rb.Percent > 100 {
			return b.errf("retry_budget.percent", "must be 1-100, got %d", *rb.Percent)
		}
		bud.Percent = *rb.Percent
	}
	if rb.MinRetries != nil {
		if *rb.MinRetries < 1 {
			return b.errf("retry_budget.min_retries", "must be at least 1 (a lone request could never retry), got %d", *rb.MinRetries)
		}
		bud.MinRetries = *rb.MinRetries
	}
	o.runner = append(o.runner, driver.WithRetryBudget(bud))
	return nil
}

// sharedState builds the shared state, if the file names one.
func (b *builder) sharedState(f *File, o *buildOptions) error {
	if f.State == nil {
		return nil
	}
	opt, err := b.state(f.State)
	if err != nil {
		return err
	}
	if opt != nil {
		o.runner = append(o.runner, opt)
	}
	return nil
}

// commit reads the commit rule and what a stream does after commit.
func (b *builder) commit(f *File, o *buildOptions) error {
	switch f.Commit {
	case "", "output":
	case "legacy":
		o.stream = append(o.stream, driver.WithCommitRule(driver.CommitLegacy))
	default:
		return b.errf("commit", "unknown commit rule %q (want output or legacy)", f.Commit)
	}
	cont, err := b.afterCommit(f)
	if err != nil {
		return err
	}
	empty, path := f.EmptyAnswer, "empty_answer"
	if empty == "" {
		empty, path = b.opts.DefaultEmptyAnswer, "" // the caller's: checked all the same
	}
	switch empty {
	case "", "accept":
	case "fail":
		cont = append(cont, driver.WithEmptyAnswerFails(true))
	default:
		return b.errf(path, "unknown empty_answer %q (want accept or fail)", empty)
	}
	o.stream = append(o.stream, cont...)
	return nil
}

// sandboxChecks checks the sandbox fields that no plugin load has read:
// a policy without plugins still gets its mistakes reported.
func (b *builder) sandboxChecks(f *File, _ *buildOptions) error {
	if f.Sandbox.Breaker != nil && f.Sandbox.Breaker.Failures < 0 {
		return b.errf("sandbox.breaker.failures", "must not be negative")
	}
	_, err := b.memory()
	return err
}

func (b *builder) path(p string) string {
	if b.prefix == "" {
		return p
	}
	return b.prefix + "." + p
}
