//go:build !wasip1

package sdk

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"unsafe"

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

// ErrStaticBroken is wrapped by the error of a natively loaded plugin's
// Part when the transform broke the promise of its static verdicts
// (transform.Static): for a part of a declared kind, Stream.Part answered
// another verdict or changed the stream's state. A v1.1 host never calls
// the guest for those parts, so the plugin would behave differently there.
var ErrStaticBroken = errors.New("sdk: static verdict promise broken")

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
	hints  abi.Hints
	next   int64   // the highest handle used
	free   []int64 // handles of closed streams, reused first (ABI.md §6.3)
	broken error   // the static promise broken in the current call
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
			pol, hints, err := abi.DecodePolicyHints(rec)
			if err != nil {
				return int32(abi.StatusInvalid)
			}
			p.policy, p.hints = pol, hints
			return 0
		},
		CheckStatic: p.checkStatic,
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

// Hints returns the hints the plugin declared at load: its static
// verdicts and auto_close (which the SDK always declares for a transform).
func (p *Plugin) Hints() abi.Hints { return p.hints }

// checkStatic runs Stream.Part for a part of a kind with a static verdict
// (the Wasm guest answers those without a call) and checks the promise:
// the declared verdict, and no change to the stream's own fields (a
// shallow, byte-wise comparison of the struct a pointer stream points to).
func (p *Plugin) checkStatic(s guest.Stream, part *abi.Part, declared abi.PartAction) (abi.Verdict, error) {
	before := snapshot(s)
	v, err := s.Part(part)
	switch {
	case err != nil:
		return v, err
	case v.Action != declared:
		p.broken = fmt.Errorf("%w: %s: a %s part was declared %s, Stream.Part answered %s", ErrStaticBroken, p.name, part.Kind, declared, v.Action)
	case before != nil && !bytes.Equal(before, snapshot(s)):
		p.broken = fmt.Errorf("%w: %s: a %s part was declared %s, and Stream.Part changed the stream's state", ErrStaticBroken, p.name, part.Kind, declared)
	default:
		return v, nil
	}
	return abi.Verdict{}, p.broken
}

// snapshot copies the bytes of the struct s points to (nil if s is not a
// pointer to a struct).
func snapshot(s guest.Stream) []byte {
	v := reflect.ValueOf(s)
	if v.Kind() != reflect.Pointer || v.IsNil() || v.Elem().Kind() != reflect.Struct {
		return nil
	}
	return bytes.Clone(unsafe.Slice((*byte)(v.UnsafePointer()), v.Elem().Type().Size()))
}

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
	h := p.handle()
	rc := p.g.Open(h, p.setInput(abi.AppendStreamInfo(nil, &info)))
	p.in = nil
	if rc == abi.OpenNoRoom {
		p.free = append(p.free, h)
		return nil, fmt.Errorf("sdk: open refused: %w", guest.ErrNoRoom)
	}
	if rc < 0 {
		p.free = append(p.free, h)
		return nil, fmt.Errorf("%w: open returned %d", ErrPluginFailed, rc)
	}
	return &nativeStream{p: p, h: h}, nil
}

// handle picks a stream handle as the host does: a closed stream's first,
// so handles stay dense (ABI.md §6.3).
func (p *Plugin) handle() int64 {
	if n := len(p.free); n > 0 {
		h := p.free[n-1]
		p.free = p.free[:n-1]
		return h
	}
	p.next++
	return p.next
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
	if err := s.p.broken; err != nil {
		s.p.broken = nil
		return abi.Verdict{}, err
	}
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
		s.p.g.Close(s.h) // a no-op after an auto-close
		s.p.free = append(s.p.free, s.h)
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
