package policy

import (
	"fmt"

	"github.com/retryhost/retryhost/driver"
)

// afterCommit reads what a stream does after commit: the policy's
// after_commit and its models' and groups' own, the continuation limit and
// prompt, the throughput floor.
func (b *builder) afterCommit(f *File) ([]driver.StreamOption, error) {
	var sopts []driver.StreamOption
	mode := func(path, s string) (driver.AfterCommit, error) {
		a, err := driver.ParseAfterCommit(s)
		if err != nil {
			return 0, b.errf(path, "unknown after_commit %q (want error or continue)", s)
		}
		return a, nil
	}
	if f.AfterCommit != "" {
		a, err := mode("after_commit", f.AfterCommit)
		if err != nil {
			return nil, err
		}
		sopts = append(sopts, driver.WithAfterCommit(a))
	}
	on := func(path, name, s string) error {
		if s == "" {
			return nil
		}
		a, err := mode(path, s)
		if err != nil {
			return err
		}
		sopts = append(sopts, driver.WithAfterCommitOn(b.p.Models[name], a))
		return nil
	}
	for i, m := range f.Models {
		if err := on(fmt.Sprintf("models[%d].after_commit", i), m.Name, m.AfterCommit); err != nil {
			return nil, err
		}
	}
	for i, g := range f.Groups {
		if err := on(fmt.Sprintf("groups[%d].after_commit", i), g.Name, g.AfterCommit); err != nil {
			return nil, err
		}
	}
	if n := f.MaxContinuations; n != nil {
		if *n < 1 {
			return nil, b.errf("max_continuations", "must be at least 1 (after_commit: error turns continuation off), got %d", *n)
		}
		sopts = append(sopts, driver.WithMaxContinuations(*n))
	}
	if f.ContinuationPrompt != "" {
		sopts = append(sopts, driver.WithContinuationPrompt(f.ContinuationPrompt))
	}
	if tf := f.ThroughputFloor; tf != nil {
		switch {
		case !(tf.CharsPerSecond > 0):
			return nil, b.errf("throughput_floor.chars_per_second", "a positive rate is required, got %v", tf.CharsPerSecond)
		case tf.Window == nil || *tf.Window <= 0:
			return nil, b.errf("throughput_floor.window", "a positive duration is required")
		}
		sopts = append(sopts, driver.WithThroughputFloor(tf.CharsPerSecond, dur(tf.Window)))
	}
	return sopts, nil
}
