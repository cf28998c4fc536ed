//go:build !wasip1

package sdk

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/retryhost/retryhost/abi"
	"github.com/retryhost/retryhost/plugins/sdk/internal/guest"
)

// ErrConfigRejected is wrapped by [Load]'s error when the plugin rejected
// its config; the message carries the plugin's reason.
var ErrConfigRejected = errors.New("sdk: config rejected")

// ErrPluginFailed is wrapped by the errors of a natively loaded plugin
// that failed a call (in Wasm: a negative result or an invalid verdict,
// to which the host applies the plugin's fail policy).
var ErrPluginFailed = errors.New("sdk: plugin failed")

// SetLogger routes the plugin's [Log] lines natively (tests); nil drops
// them. In Wasm the lines go to the host's logger.
func SetLogger(f func(level int, msg string)) {
	if f == nil {
		guest.Logger.Store(nil)
		return
	}
	g := func(level int32, msg string) { f(int(level), msg) }
	guest.Logger.Store(&g)
}

// Plugin is the plugin registered in this binary, loaded natively: every
// call is encoded as the host encodes it, dispatched through the same code
// as the Wasm exports, and the answer decoded as strictly as the host
// decodes it. It satisfies driver.Condition (when a condition is
// registered) and abi.Transformer (when a transform is), so a plugin's
// logic can be tested natively, alone or under the driver.
//
// It is safe for concurrent use (calls are serialised, like the calls to
// one Wasm instance).
type Plugin struct {
	name string

	mu     sync.Mutex
	g      *guest.Guest
	in     []byte // the current call's input, for the input import
	policy abi.TransformPolicy
	next   int64
}

// Load builds the registered condition and/or transform with config, as
// the host does at load. A rejected config gives an error wrapping
// ErrConfigRejected with the plugin's reason.
func Load(name string, config []byte) (*Plugin, error) {
	p := &Plugin{name: name}
	p.g = guest.New(make([]byte, guest.BufferSize), guest.Env{
		Input: func(dst []byte) int {
			if len(dst) >= len(p.in) {
				copy(dst, p.in)
			}
			return len(p.in)
		},
		Policy: func(rec []byte) int32 {
			pol, err := abi.DecodePolicy(rec)
			if err != nil {
				return int32(abi.StatusInvalid)
			}
			p.policy = pol
			return 0
		},
	})
	p.in = config
	rc := p.g.Init(int32(len(config)))
	p.in = nil
	switch {
	case rc < 0:
		return nil, fmt.Errorf("%w (status %d)", ErrConfigRejected, rc)
	case rc > 0:
		return nil, fmt.Errorf("%w: %s", ErrConfigRejected, p.g.Buf[:rc])
	}
	return p, nil
}

// Name returns the name given to Load.
func (p *Plugin) Name() string { return p.name }

// Policy returns the policy the plugin declared at load (zero if none).
func (p *Plugin) Policy() abi.TransformPolicy { return p.policy }

// setInput places rec where the host would: at the start of the buffer
// when it fits, and behind the input import always.
func (p *Plugin) setInput(rec []byte) int32 {
	p.in = rec
	if len(rec) <= len(p.g.Buf) {
		copy(p.g.Buf, rec)
	}
	return int32(len(rec))
}

// Decide runs the plugin's condition on a.
func (p *Plugin) Decide(_ context.Context, a *abi.Attempt) (abi.Decision, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := p.g.Decide(p.setInput(abi.EncodeAttempt(a)))
	p.in = nil
	switch {
	case n == 0:
		return abi.Decision{}, nil
	case n < 0 || int(n) > len(p.g.Buf):
		return abi.Decision{}, fmt.Errorf("%w: decide returned %d", ErrPluginFailed, n)
	}
	d, err := abi.DecodeDecision(p.g.Buf[:n])
	if err != nil {
		return abi.Decision{}, fmt.Errorf("%w: %w", ErrPluginFailed, err)
	}
	return d, nil
}

// Open starts the plugin's transform on one stream.
func (p *Plugin) Open(_ context.Context, info abi.StreamInfo) (abi.StreamTransform, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.next++
	h := p.next
	rc := p.g.Open(h, p.setInput(abi.AppendStreamInfo(nil, &info)))
	p.in = nil
	if rc < 0 {
		return nil, fmt.Errorf("%w: open returned %d", ErrPluginFailed, rc)
	}
	return &nativeStream{p: p, h: h}, nil
}

// OpenStreams is the number of streams opened and not yet closed.
func (p *Plugin) OpenStreams() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.g.Streams()
}

type nativeStream struct {
	p      *Plugin
	h      int64
	rec    []byte
	closed bool
}

func (s *nativeStream) Part(_ context.Context, part *abi.Part) (abi.Verdict, error) {
	s.p.mu.Lock()
	defer s.p.mu.Unlock()
	s.rec = abi.AppendPart(s.rec[:0], part)
	v := s.p.g.Part(s.h, s.p.setInput(s.rec))
	s.p.in = nil
	return s.p.verdict(v)
}

func (s *nativeStream) End(context.Context) (abi.Verdict, error) {
	s.p.mu.Lock()
	defer s.p.mu.Unlock()
	return s.p.verdict(s.p.g.End(s.h))
}

func (s *nativeStream) Close() {
	s.p.mu.Lock()
	defer s.p.mu.Unlock()
	if !s.closed {
		s.closed = true
		s.p.g.Close(s.h)
	}
}

// verdict decodes a packed verdict and its payload as the host does.
func (p *Plugin) verdict(packed uint64) (abi.Verdict, error) {
	a, n, err := abi.UnpackVerdict(packed)
	if err != nil {
		return abi.Verdict{}, fmt.Errorf("%w: %w", ErrPluginFailed, err)
	}
	if int(n) > len(p.g.Buf) {
		return abi.Verdict{}, fmt.Errorf("%w: payload of %d bytes exceeds the buffer", ErrPluginFailed, n)
	}
	payload := p.g.Buf[:n]
	v := abi.Verdict{Action: a}
	switch a {
	case abi.PartError:
		if n == 0 {
			v.Err = &abi.TransformError{Transform: p.name, Class: abi.ClassTransform}
			break
		}
		e, err := abi.DecodeError(payload, p.name)
		if err != nil {
			return abi.Verdict{}, fmt.Errorf("%w: %w", ErrPluginFailed, err)
		}
		v.Err = e
	case abi.PartReplace:
		ps, err := abi.DecodeParts(payload)
		if err != nil {
			return abi.Verdict{}, fmt.Errorf("%w: %w", ErrPluginFailed, err)
		}
		v.Replace = ps
	}
	return v, nil
}
