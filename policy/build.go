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

func (b *builder) build(ctx context.Context, f *File) error {
	if len(f.Models) == 0 {
		return b.errf("models", "at least one model is required (the first is the base model)")
	}
	b.raw = b.opts.RawChunks && f.Commit != "legacy" // see Options.RawChunks
	for i := range f.Models {
		if err := b.model(i, &f.Models[i]); err != nil {
			return err
		}
	}
	groups := make([]driver.Model, 0, len(f.Groups))
	for i := range f.Groups {
		g, err := b.group(i, &f.Groups[i])
		if err != nil {
			return err
		}
		groups = append(groups, g)
	}
	b.sb = &f.Sandbox
	if d := b.opts.DefaultBackoff; d != nil && !b.doc.Has(b.path("backoff.delay")) {
		b.retryDelay = d.Delay
	}
	var ropts []driver.Option
	for i := range f.Rules {
		c, err := b.rule(ctx, i, &f.Rules[i])
		if err != nil {
			return err
		}
		ropts = append(ropts, driver.WithRules(c))
	}
	var sopts []driver.StreamOption
	for i := range f.Transforms {
		t, err := b.transform(ctx, i, &f.Transforms[i])
		if err != nil {
			return err
		}
		sopts = append(sopts, driver.WithTransforms(t))
	}
	models := make([]driver.Model, 0, len(f.Models))
	for _, m := range f.Models {
		models = append(models, b.p.Models[m.Name])
	}
	start := models[0]
	if f.Start != "" {
		if start = b.p.Models[f.Start]; start == nil {
			return b.errf("start", "unknown model or group %q", f.Start)
		}
	}
	ropts = append(ropts, driver.WithModels(models...), driver.WithModels(groups...), driver.WithLogger(b.opts.Logger))

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
	ropts = append(ropts, driver.WithAttemptTimeout(dur(dl.Attempt)), driver.WithBudget(dur(dl.Budget)))
	first, gap := dur(dl.FirstContent), dur(dl.Gap)
	if dl.FirstContent == nil {
		first = b.opts.DefaultFirstContent
	}
	if dl.Gap == nil {
		gap = b.opts.DefaultGap
	}
	sopts = append(sopts, driver.WithFirstContentTimeout(first), driver.WithGapTimeout(gap))

	if h := f.Hedge; h != nil {
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
		sopts = append(sopts, driver.WithHedge(dur(h.After), max))
	}

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
	ropts = append(ropts, driver.WithBackoff(bo))
	if b.doc.Has(b.path("max_attempts")) {
		if f.MaxAttempts < 1 {
			return b.errf("max_attempts", "must be at least 1, got %d", f.MaxAttempts)
		}
		ropts = append(ropts, driver.WithMaxAttempts(f.MaxAttempts))
	}
	if f.RetryAfterCap != nil {
		ropts = append(ropts, driver.WithRetryAfterCap(dur(f.RetryAfterCap)))
	}
	if f.Sticky != "" {
		s, err := driver.ParseSticky(f.Sticky)
		if err != nil {
			return b.errf("sticky", "unknown sticky policy %q (want after-request, after-N-requests or after-N-seconds)", f.Sticky)
		}
		ropts = append(ropts, driver.WithSticky(s))
	}
	if cs := f.Cooldown; cs != nil {
		if cs.Failures < 1 {
			return b.errf("cooldown.failures", "must be at least 1, got %d", cs.Failures)
		}
		if dur(cs.For) <= 0 {
			return b.errf("cooldown.for", "a positive duration is required")
		}
		c := driver.Cooldown{Failures: cs.Failures, For: dur(cs.For)}
		if cs.When != nil {
			m, err := b.match("cooldown.when", cs.When)
			if err != nil {
				return err
			}
			c.When = m
		}
		ropts = append(ropts, driver.WithCooldown(c))
	} else if d := b.opts.DefaultCooldown; d != nil && !b.doc.Has(b.path("cooldown")) && switchesModel(f.Rules) {
		ropts = append(ropts, driver.WithCooldown(*d))
	}
	if rb := f.RetryBudget; rb != nil {
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
		ropts = append(ropts, driver.WithRetryBudget(bud))
	}
	if f.State != nil {
		o, err := b.state(f.State)
		if err != nil {
			return err
		}
		if o != nil {
			ropts = append(ropts, o)
		}
	}
	switch f.Commit {
	case "", "output":
	case "legacy":
		sopts = append(sopts, driver.WithCommitRule(driver.CommitLegacy))
	default:
		return b.errf("commit", "unknown commit rule %q (want output or legacy)", f.Commit)
	}
	cont, err := b.afterCommit(f)
	if err != nil {
		return err
	}
	sopts = append(sopts, cont...)
	if f.Sandbox.Breaker != nil && f.Sandbox.Breaker.Failures < 0 {
		return b.errf("sandbox.breaker.failures", "must not be negative")
	}
	if _, err := b.memory(); err != nil {
		return err
	}
	r, err := driver.New(start, append(ropts, b.opts.RunnerOptions...)...)
	if err != nil {
		return b.errf("", "%v", err)
	}
	m, err := driver.NewRetryableModel(r, append(sopts, b.opts.StreamOptions...)...)
	if err != nil {
		return b.errf("", "%v", err)
	}
	b.p.Runner, b.p.Model = r, m
	return nil
}

func (b *builder) path(p string) string {
	if b.prefix == "" {
		return p
	}
	return b.prefix + "." + p
}
