package host

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/retryhost/retryhost/abi"
)

// u32s is a config of little-endian u32s.
func u32s(vs ...uint32) []byte {
	var b []byte
	for _, v := range vs {
		b = binary.LittleEndian.AppendUint32(b, v)
	}
	return b
}

func TestBuffer_OverTheCapFailsTheLoad(t *testing.T) {
	ctx := context.Background()
	rt := newRuntime(t)
	_, err := rt.Load(ctx, "bigbuffer", fixture(t, "bigbuffer"))
	require.ErrorIs(t, err, ErrNoBuffer)
	require.ErrorContains(t, err, "StatusTooLarge")
	rt = newRuntime(t, WithMaxBuffer(16<<20))
	_, err = rt.Load(ctx, "bigbuffer", fixture(t, "bigbuffer"))
	require.NoError(t, err, "the operator may allow a larger buffer")
}

// TestReplace_Caps: a REPLACE over a cap fails the stream with ErrLimit and
// a LimitError naming the cap, found while decoding; the instance is kept.
// A REPLACE injecting a stream-start is an ABI violation (ABI.md §8.6).
func TestReplace_Caps(t *testing.T) {
	ctx := context.Background()
	delta := abi.Part{Kind: abi.KindTextDelta, ID: "t0", Delta: "hi"}
	tests := []struct {
		name      string
		count     uint32
		kind      abi.PartKind
		okParts   int // parts judged before the failure
		limit     string
		violation bool
	}{
		{name: "per call", count: 65535, kind: abi.KindTextDelta, limit: "replace parts per call"},
		{name: "per stream", count: 1000, kind: abi.KindTextDelta, okParts: 1, limit: "replace parts per stream"},
		{name: "stream-start injected", count: 1, kind: abi.KindStreamStart, violation: true},
		{name: "finish injected", count: 1, kind: abi.KindFinish, violation: true},
	}
	engines(t, func(t *testing.T, opts ...Option) {
		rt := newRuntime(t, opts...)
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				p, err := rt.Load(ctx, "replacebomb", fixture(t, "replacebomb"), WithInstances(1),
					WithConfig(u32s(tc.count, uint32(tc.kind))))
				require.NoError(t, err)
				defer p.Close(ctx)
				st, err := p.Open(ctx, abi.StreamInfo{ID: 1})
				require.NoError(t, err)
				defer st.Close()
				for range tc.okParts {
					v, err := st.Part(ctx, &delta)
					require.NoError(t, err)
					require.Len(t, v.Replace, int(tc.count))
				}
				gen := p.slots[0].gen
				_, err = st.Part(ctx, &delta)
				if tc.violation {
					require.ErrorIs(t, err, ErrABIViolation)
					require.ErrorContains(t, err, "which a REPLACE may not carry")
					return
				}
				require.ErrorIs(t, err, ErrLimit)
				var le *LimitError
				require.ErrorAs(t, err, &le)
				require.Equal(t, tc.limit, le.Limit)
				require.Equal(t, gen, p.slots[0].gen, "over a cap the instance is kept")
				// The instance still serves other streams.
				st2, err := p.Open(ctx, abi.StreamInfo{ID: 2})
				require.NoError(t, err)
				defer st2.Close()
				if tc.count < 1024 {
					_, err = st2.Part(ctx, &delta)
					require.NoError(t, err)
				}
			})
		}
	})
}

// TestFrame runs the framing conformance vectors (testdata/abi/framing.json,
// ABI.md §6.4): whatever a transform answers, the framing parts it held are
// neither dropped nor duplicated.
func TestFrame(t *testing.T) {
	raw, err := os.ReadFile("../testdata/abi/framing.json")
	require.NoError(t, err)
	var file struct {
		Cases []struct {
			Name  string
			Steps []struct {
				Part      string
				Guest     string
				GuestList []string `json:"guest_list"`
				Host      string
				HostList  []string `json:"host_list"`
			}
		}
	}
	require.NoError(t, json.Unmarshal(raw, &file))
	require.NotEmpty(t, file.Cases)
	actions := map[string]abi.PartAction{}
	for a := abi.PartPass; a.Valid(); a++ {
		actions[a.String()] = a
	}
	part := func(s string) abi.Part {
		kind, delta, _ := strings.Cut(s, ":")
		for k := abi.KindStreamStart; k.Valid(); k++ {
			if k.String() == kind {
				return abi.Part{Kind: k, Delta: delta}
			}
		}
		t.Fatalf("unknown kind %q", kind)
		return abi.Part{}
	}
	verdict := func(a string, list []string) abi.Verdict {
		act, ok := actions[a]
		require.True(t, ok, "unknown verdict %q", a)
		v := abi.Verdict{Action: act}
		if act == abi.PartReplace {
			v.Replace = []abi.Part{}
			for _, s := range list {
				v.Replace = append(v.Replace, part(s))
			}
		}
		return v
	}
	for _, tc := range file.Cases {
		t.Run(tc.Name, func(t *testing.T) {
			st := &stream{}
			for i, s := range tc.Steps {
				in := verdict(s.Guest, s.GuestList)
				var got abi.Verdict
				if s.Part == "end" {
					got = st.frameEnd(in)
				} else {
					p := part(s.Part)
					got = st.frame(&p, in)
				}
				want := verdict(s.Host, s.HostList)
				require.Equal(t, want.Action, got.Action, "step %d", i)
				if want.Action == abi.PartReplace {
					require.Equal(t, len(want.Replace), len(got.Replace), "step %d: %v", i, got.Replace)
					for j := range want.Replace {
						require.Equal(t, want.Replace[j].Kind, got.Replace[j].Kind, "step %d part %d", i, j)
						require.Equal(t, want.Replace[j].Delta, got.Replace[j].Delta, "step %d part %d", i, j)
					}
				}
			}
		})
	}
}

// TestErrorRecord_ShortAndClassMapped: a transform error without the
// optional phrase and text is an error verdict, not an ABI violation (under
// fail-open that made the filter's text reach the caller), and a class a
// guest may not claim (auth) becomes transform.
func TestErrorRecord_ShortAndClassMapped(t *testing.T) {
	engines(t, func(t *testing.T, opts ...Option) {
		rt := newRuntime(t, opts...)
		p, err := rt.Load(context.Background(), "errclass", fixture(t, "errclass"))
		require.NoError(t, err)
		r := run(context.Background(), p, 1, textStream("secret"))
		require.NoError(t, r.fail)
		require.Equal(t, &abi.TransformError{Transform: "errclass", Class: abi.ClassTransform, Code: 7, Message: "blocked"}, r.err)
		for _, part := range r.out {
			require.NotEqual(t, "secret", part.Delta, "the text the filter stopped never passes")
		}
	})
}

// TestHoldCaps_ClampedToOperatorMaxima: a plugin may only tighten the hold
// caps; WithPolicy is the operator's own word.
func TestHoldCaps_ClampedToOperatorMaxima(t *testing.T) {
	ctx := context.Background()
	rt := newRuntime(t)
	p, err := rt.Load(ctx, "holdall", fixture(t, "holdall"))
	require.NoError(t, err)
	pol := p.Policy()
	require.Equal(t, abi.TransformPolicy{MaxHeldParts: 256, MaxHeldBytes: 64 << 10, MaxHoldTime: 10 * time.Second}, pol)
	require.False(t, pol.FailsAtCap(), "fail-open flushes at a cap by default")

	closed, err := rt.Load(ctx, "holdall", fixture(t, "holdall"), WithConfig([]byte{1}))
	require.NoError(t, err)
	pol = closed.Policy()
	require.Equal(t, abi.FailClosed, pol.Fail)
	require.True(t, pol.FailsAtCap(), "a fail-closed transform fails at a cap by default: no unchecked text")

	rt = newRuntime(t, WithHoldLimits(1000, 1<<20, time.Minute))
	p, err = rt.Load(ctx, "holdall", fixture(t, "holdall"))
	require.NoError(t, err)
	require.Equal(t, abi.TransformPolicy{MaxHeldParts: 1000, MaxHeldBytes: 1 << 20, MaxHoldTime: time.Minute}, p.Policy())
	p, err = rt.Load(ctx, "holdall", fixture(t, "holdall"), WithPolicy(abi.TransformPolicy{MaxHeldParts: 5000}))
	require.NoError(t, err)
	require.Equal(t, abi.TransformPolicy{MaxHeldParts: 5000}, p.Policy())
}

// TestCapacity: a declared capacity is never exceeded and a refusal for
// lack of room, declared or answered with OpenNoRoom, never trips the
// breaker nor discards the instance.
func TestCapacity(t *testing.T) {
	ctx := context.Background()
	part := abi.Part{Kind: abi.KindTextDelta, Delta: "x"}
	for _, declared := range []bool{true, false} {
		name := map[bool]string{true: "declared", false: "refused by the guest"}[declared]
		t.Run(name, func(t *testing.T) {
			rt := newRuntime(t, WithBreaker(1, time.Hour))
			cfg := []byte{0}
			if declared {
				cfg[0] = 1
			}
			p, err := rt.Load(ctx, "capacity", fixture(t, "capacity"), WithInstances(1), WithConfig(cfg))
			require.NoError(t, err)
			if declared {
				require.Equal(t, 2, p.Hints().MaxStreams)
			}
			gen := p.slots[0].gen
			var open []abi.StreamTransform
			for i := range 2 {
				st, err := p.Open(ctx, abi.StreamInfo{ID: uint64(i)})
				require.NoError(t, err)
				_, err = st.Part(ctx, &part)
				require.NoError(t, err)
				open = append(open, st)
			}
			for range 10 {
				st, err := p.Open(ctx, abi.StreamInfo{ID: 9})
				if err == nil {
					_, err = st.Part(ctx, &part)
					st.Close()
				}
				require.ErrorIs(t, err, ErrNoCapacity)
				require.NotErrorIs(t, err, ErrPluginFailed)
			}
			require.Equal(t, gen, p.slots[0].gen, "a refusal keeps the instance")
			if declared {
				require.EqualValues(t, 2, p.slots[0].inst.mod.ExportedGlobal("opens").Get(), "the host never asked for a third")
			}
			open[0].Close()
			st, err := p.Open(ctx, abi.StreamInfo{ID: 3})
			require.NoError(t, err, "room again, and the plugin was never disabled")
			_, err = st.Part(ctx, &part)
			require.NoError(t, err)
			st.Close()
			open[1].Close()
		})
	}
}

// manualClock is a settable clock for the runtime (nanoseconds).
type manualClock struct{ ns atomic.Int64 }

func (c *manualClock) now() int64              { return c.ns.Load() }
func (c *manualClock) advance(d time.Duration) { c.ns.Add(int64(d)) }

// TestBreaker_CooldownAndProbe: a broken plugin is disabled, refused during
// the cooldown, probed after it (one probe at a time), disabled again while
// the probe fails, and re-enabled when it succeeds.
func TestBreaker_CooldownAndProbe(t *testing.T) {
	ctx := context.Background()
	clk := &manualClock{}
	clk.ns.Store(int64(time.Hour))
	var logs logBuffer
	rt := newRuntime(t, withTestClock(clk.now, nil), WithBreaker(3, time.Minute), WithBreakerCooldown(30*time.Second), WithLogger(logs.logger()))
	p, err := rt.Load(ctx, "flaky", fixture(t, "flaky"))
	require.NoError(t, err)
	broken, healthy := &abi.Attempt{Number: 100}, &abi.Attempt{Number: 1}
	for range 3 {
		_, err := p.Decide(ctx, broken)
		require.ErrorIs(t, err, ErrTrap)
	}
	_, err = p.Decide(ctx, healthy)
	require.ErrorIs(t, err, ErrDisabled, "disabled after 3 failures in a row")
	require.Contains(t, logs.String(), "plugin disabled")

	clk.advance(29 * time.Second)
	_, err = p.Decide(ctx, healthy)
	require.ErrorIs(t, err, ErrDisabled, "still cooling down")

	clk.advance(2 * time.Second)
	_, err = p.Decide(ctx, broken)
	require.ErrorIs(t, err, ErrTrap, "the probe runs, and fails")
	_, err = p.Decide(ctx, healthy)
	require.ErrorIs(t, err, ErrDisabled, "a failed probe disables it for another cooldown")

	clk.advance(31 * time.Second)
	_, err = p.Decide(ctx, healthy)
	require.NoError(t, err, "the probe succeeds")
	require.Contains(t, logs.String(), "plugin re-enabled")
	for range 5 {
		_, err = p.Decide(ctx, healthy)
		require.NoError(t, err, "re-enabled")
	}
}

// TestBreaker_ProbeStream: for a transform the probe is one stream; others
// are refused until its first verdict.
func TestBreaker_ProbeStream(t *testing.T) {
	ctx := context.Background()
	clk := &manualClock{}
	clk.ns.Store(int64(time.Hour))
	rt := newRuntime(t, withTestClock(clk.now, nil), WithBreaker(2, time.Minute), WithBreakerCooldown(time.Second))
	p, err := rt.Load(ctx, "boom", fixture(t, "boom"))
	require.NoError(t, err)
	boom := abi.Part{Kind: abi.KindTextDelta, ID: "t0", Delta: "boom"}
	hello := abi.Part{Kind: abi.KindTextDelta, ID: "t0", Delta: "hello"}
	for i := range 2 {
		st, err := p.Open(ctx, abi.StreamInfo{ID: uint64(i)})
		require.NoError(t, err)
		_, err = st.Part(ctx, &boom)
		require.ErrorIs(t, err, ErrTrap)
		st.Close()
	}
	_, err = p.Open(ctx, abi.StreamInfo{ID: 3})
	require.ErrorIs(t, err, ErrDisabled)
	clk.advance(2 * time.Second)
	probe, err := p.Open(ctx, abi.StreamInfo{ID: 4})
	require.NoError(t, err, "the probe")
	_, err = p.Open(ctx, abi.StreamInfo{ID: 5})
	require.ErrorIs(t, err, ErrDisabled, "one probe at a time")
	_, err = probe.Part(ctx, &hello)
	require.NoError(t, err)
	probe.Close()
	st, err := p.Open(ctx, abi.StreamInfo{ID: 6})
	require.NoError(t, err, "re-enabled by the probe's verdict")
	st.Close()
}

// TestBreaker_RareFailuresNeverTrip: failures spread over many successful
// calls are a rate far below one half: the plugin stays enabled.
func TestBreaker_RareFailuresNeverTrip(t *testing.T) {
	ctx := context.Background()
	rt := newRuntime(t, WithBreaker(3, time.Hour))
	p, err := rt.Load(ctx, "flaky", fixture(t, "flaky"))
	require.NoError(t, err)
	for i := range 100 {
		a := &abi.Attempt{Number: 1}
		if i%5 == 4 {
			a.Number = 100
		}
		_, err := p.Decide(ctx, a)
		require.NotErrorIs(t, err, ErrDisabled, "call %d", i)
	}
}

func TestLogLimit_IsALifetimeBudget(t *testing.T) {
	var logs logBuffer
	rt := newRuntime(t, WithLogLimit(2), WithLogger(logs.logger()))
	p, err := rt.Load(context.Background(), "chatty", fixture(t, "chatty"), WithInstances(1))
	require.NoError(t, err)
	for range 5 {
		_, err := p.Decide(context.Background(), &abi.Attempt{})
		require.NoError(t, err)
	}
	n, warned := 0, 0
	for _, m := range logs.messages() {
		switch m {
		case "decided":
			n++
		case "plugin log budget spent; dropping every further line of this plugin":
			warned++
		}
	}
	require.Equal(t, 2, n, "the first 2 lines of the instance's life, then none")
	require.Equal(t, 1, warned, "one warning when the budget is spent")
}

// TestCapacity_OpenPartNoRoom: the i64 OpenNoRoom from retryhost_open_part
// is a refusal for lack of room, not a failure: no breaker count, no
// discarded instance, no close owed.
func TestCapacity_OpenPartNoRoom(t *testing.T) {
	ctx := context.Background()
	rt := newRuntime(t, WithBreaker(1, time.Hour))
	p, err := rt.Load(ctx, "noroom", fixture(t, "noroom_openpart"), WithInstances(1))
	require.NoError(t, err)
	part := abi.Part{Kind: abi.KindTextDelta, Delta: "x"}
	first, err := p.Open(ctx, abi.StreamInfo{ID: 1})
	require.NoError(t, err)
	_, err = first.Part(ctx, &part)
	require.NoError(t, err)
	gen := p.slots[0].gen
	for i := range 5 {
		st, err := p.Open(ctx, abi.StreamInfo{ID: uint64(2 + i)})
		require.NoError(t, err, "no capacity declared: the host opens lazily")
		_, err = st.Part(ctx, &part)
		require.ErrorIs(t, err, ErrNoCapacity)
		var re *ResultError
		require.ErrorAs(t, err, &re)
		require.Equal(t, ResultError{Export: abi.ExportOpenPart, Result: int64(abi.OpenNoRoom)}, *re)
		st.Close()
	}
	require.Equal(t, gen, p.slots[0].gen, "the instance is kept")
	first.Close()
	st, err := p.Open(ctx, abi.StreamInfo{ID: 9})
	require.NoError(t, err, "not disabled")
	_, err = st.Part(ctx, &part)
	require.NoError(t, err, "room again after the close")
	st.Close()
}

// TestLogBudget_SurvivesInstanceReplacement: every call of logtrap logs a
// line, writes a line to stdout and one to stderr, then traps, so each
// call runs on a fresh instance. The budgets are the plugin's: however
// many instances it burns, it gets the log lines and stdout/stderr bytes
// of one plugin, not of one instance per trap.
func TestLogBudget_SurvivesInstanceReplacement(t *testing.T) {
	var logs logBuffer
	rt := newRuntime(t, WithLogLimit(3), WithBreaker(0, time.Hour), WithLogger(logs.logger()))
	rt.cfg.outputCap = 16 // two 8-byte lines on each of stdout and stderr
	p, err := rt.Load(context.Background(), "logtrap", fixture(t, "logtrap"), WithInstances(2))
	require.NoError(t, err)
	for range 12 {
		_, err := p.Decide(context.Background(), &abi.Attempt{})
		require.ErrorIs(t, err, ErrTrap)
	}
	lines, out, warned := 0, 0, 0
	for _, m := range logs.messages() {
		switch m {
		case "decided":
			lines++
		case "decided\n":
			out++
		case "plugin log budget spent; dropping every further line of this plugin",
			"plugin output limit reached; dropping the rest":
			warned++
		}
	}
	require.Equal(t, 3, lines, "the log import's budget is the plugin's, across 12 instances")
	require.Equal(t, 4, out, "two lines each on stdout and stderr, across 12 instances")
	require.Equal(t, 3, warned, "one warning per budget spent")
}

// TestBreaker_TripsOnAFailureRate: with the default breaker (5 failures
// within a window of 15 calls) a plugin failing one call in three is
// disabled right after its fifth failure, though it never failed twice in
// a row; one failing one call in four stays enabled; and WithBreakerWindow
// moves the line.
func TestBreaker_TripsOnAFailureRate(t *testing.T) {
	for _, tc := range []struct {
		name  string
		opts  []Option
		every int // every k-th call fails
		trip  int // the call refused first (0: none in 60 calls)
	}{
		{"one in three trips after 5 failures in 13 calls", nil, 3, 15},
		{"one in four never trips", nil, 4, 0},
		{"a wider window catches one in four", []Option{WithBreakerWindow(20)}, 4, 20},
		{"a window below n means failures in a row", []Option{WithBreakerWindow(1)}, 2, 0},
		{"failures in a row trip at once", nil, 1, 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			rt := newRuntime(t, append(tc.opts, WithBreaker(5, time.Hour))...)
			p, err := rt.Load(ctx, "flaky", fixture(t, "flaky"))
			require.NoError(t, err)
			for i := range 60 {
				a := &abi.Attempt{Number: 1}
				if i%tc.every == tc.every-1 {
					a.Number = 100
				}
				_, err := p.Decide(ctx, a)
				if tc.trip > 0 && i >= tc.trip {
					require.ErrorIs(t, err, ErrDisabled, "call %d", i)
					continue
				}
				require.NotErrorIs(t, err, ErrDisabled, "call %d", i)
				if a.Number == 100 {
					require.ErrorIs(t, err, ErrTrap, "call %d", i)
				} else {
					require.NoError(t, err, "call %d", i)
				}
			}
		})
	}
}

// TestBreaker_CountsEveryKindOfFailure: a trap, a timeout, a memory fault,
// garbage output, an exit and a negative result, each one call in three,
// all count: the default breaker trips right after the fifth of them.
func TestBreaker_CountsEveryKindOfFailure(t *testing.T) {
	ctx := context.Background()
	rt := newRuntime(t, WithCallTimeout(20*time.Millisecond))
	p, err := rt.Load(ctx, "failmix", fixture(t, "failmix"))
	require.NoError(t, err)
	kinds := []struct {
		number int
		kind   error
	}{{100, ErrTrap}, {101, ErrTimeout}, {102, ErrTrap}, {103, ErrABIViolation}, {104, ErrExit}, {105, ErrPluginFailed}}
	failures := 0
	for i := range 18 {
		a := &abi.Attempt{Number: 1}
		var want error
		if i%3 == 2 {
			k := kinds[failures%len(kinds)]
			a.Number, want = k.number, k.kind
			failures++
		}
		_, err := p.Decide(ctx, a)
		if i >= 15 {
			require.ErrorIs(t, err, ErrDisabled, "call %d, after %d failures in %d calls", i, failures, i)
			continue
		}
		if want == nil {
			require.NoError(t, err, "call %d", i)
			continue
		}
		var pe *PluginError
		require.ErrorAs(t, err, &pe, "call %d", i)
		require.Equal(t, want, pe.Kind, "call %d: %v", i, err)
	}
}
