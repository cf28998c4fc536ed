package host

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/retryhost/retryhost/abi"
)

func TestLoad_Rejects(t *testing.T) {
	tests := []struct {
		name    string
		fixture string
		bytes   []byte
		opts    []LoadOption
		reason  error
		says    string
	}{
		{name: "garbage bytes are not a module", bytes: []byte("\x00asm garbage"), reason: ErrInvalidModule},
		{name: "wrong ABI version", fixture: "wrongabi", reason: ErrABIVersion, says: "v2"},
		{name: "file access import", fixture: "forbidden_file", reason: ErrForbiddenImport, says: "path_open"},
		{name: "socket import", fixture: "forbidden_sock", reason: ErrForbiddenImport, says: "sock_accept"},
		{name: "rejected config carries the plugin's reason", fixture: "rejectconfig", reason: ErrConfigRejected, says: "bad config!!"},
		{name: "condition without its required config", fixture: "condition", reason: ErrConfigRejected, says: "fallback model"},
		{name: "panic in init", fixture: "initpanic", reason: ErrInit, says: "unreachable"},
		{name: "buffer outside memory", fixture: "oob", reason: ErrNoBuffer},
		{name: "neither condition nor transform", fixture: "nokind", reason: ErrNoKind},
		{name: "retryhost_open_part with the wrong signature", fixture: "badopenpart", reason: ErrBadExport, says: "retryhost_open_part"},
		{name: "sha256 pin mismatch", fixture: "upper", opts: []LoadOption{WithSHA256("00")}, reason: ErrChecksum},
	}
	engines(t, func(t *testing.T, opts ...Option) {
		rt := newRuntime(t, opts...)
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				b := tc.bytes
				if tc.fixture != "" {
					b = fixture(t, tc.fixture)
				}
				p, err := rt.Load(context.Background(), tc.name, b, tc.opts...)
				require.Nil(t, p)
				require.ErrorIs(t, err, tc.reason)
				var le *LoadError
				require.True(t, errors.As(err, &le))
				require.Equal(t, tc.name, le.Plugin)
				require.Contains(t, err.Error(), tc.says)
			})
		}
	})
}

func TestLoad_FileWithPinAndCache(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "upper.wasm")
	b := fixture(t, "upper")
	require.NoError(t, os.WriteFile(path, b, 0o644))
	cache := filepath.Join(dir, "cache")
	for range 2 { // the second runtime loads from the disk cache
		rt, err := New(context.Background(), WithCacheDir(cache))
		require.NoError(t, err)
		p, err := rt.LoadFile(context.Background(), "upper", path, WithSHA256(sha(b)))
		require.NoError(t, err)
		require.True(t, p.IsTransform())
		require.False(t, p.IsCondition())
		require.Equal(t, sha(b), p.SHA256())
		require.NoError(t, rt.Close(context.Background()))
	}
	entries, err := os.ReadDir(cache)
	require.NoError(t, err)
	require.NotEmpty(t, entries, "the compilation cache must be on disk")

	rt := newRuntime(t)
	_, err = rt.LoadFile(context.Background(), "missing", filepath.Join(dir, "nope.wasm"))
	require.ErrorIs(t, err, ErrInvalidModule)
}

func TestLoad_AfterClose(t *testing.T) {
	rt, err := New(context.Background())
	require.NoError(t, err)
	require.NoError(t, rt.Close(context.Background()))
	require.NoError(t, rt.Close(context.Background()), "Close is idempotent")
	_, err = rt.Load(context.Background(), "upper", fixture(t, "upper"))
	require.ErrorIs(t, err, ErrClosed)
}

func TestCondition_Conformance(t *testing.T) {
	tests := []struct {
		name    string
		attempt abi.Attempt
		want    abi.Decision
	}{
		{name: "429 retries after retry-after", attempt: abi.Attempt{Number: 1, Status: 429, Class: abi.ClassRateLimit, RetryAfter: time.Second},
			want: abi.Decision{Action: abi.ActionRetry, UseRetryAfter: true, MaxAttempts: 3}},
		{name: "503 switches to the configured model", attempt: abi.Attempt{Number: 2, Status: 503, Message: "overloaded"},
			want: abi.Decision{Action: abi.ActionSwitch, Model: "anthropic/claude"}},
		{name: "400 is no opinion", attempt: abi.Attempt{Number: 1, Status: 400}},
		{name: "a result attempt is no opinion", attempt: abi.Attempt{Number: 1, Finish: abi.FinishReason{Unified: abi.ReasonStop}}},
	}
	engines(t, func(t *testing.T, opts ...Option) {
		rt := newRuntime(t, opts...)
		p, err := rt.Load(context.Background(), "cond", fixture(t, "condition"), WithConfig([]byte("anthropic/claude")))
		require.NoError(t, err)
		require.True(t, p.IsCondition())
		require.Equal(t, abi.FailOpen, p.FailPolicy())
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				got, err := p.Decide(context.Background(), &tc.attempt)
				require.NoError(t, err)
				require.Equal(t, tc.want, got)
			})
		}
	})
}

func TestTransform_Conformance(t *testing.T) {
	engines(t, func(t *testing.T, opts ...Option) {
		rt := newRuntime(t, opts...)
		ctx := context.Background()
		upper, err := rt.Load(ctx, "upper", fixture(t, "upper"))
		require.NoError(t, err)
		refusal, err := rt.Load(ctx, "refusal", fixture(t, "refusal"))
		require.NoError(t, err)

		t.Run("upper replaces text deltas and passes the rest", func(t *testing.T) {
			r := run(ctx, upper, 1, textStream("Hello, ", "world"))
			require.NoError(t, r.fail)
			require.NoError(t, r.err)
			require.Equal(t, render(textStream("HELLO, ", "WORLD")), render(r.out))
		})
		t.Run("refusal holds the matching prefix, then fails with a RefusalError", func(t *testing.T) {
			st, err := refusal.Open(ctx, abi.StreamInfo{ID: 7, Model: "m", Attempt: 1})
			require.NoError(t, err)
			defer st.Close()
			for _, step := range []struct {
				part abi.Part
				want abi.PartAction
			}{
				{abi.Part{Kind: abi.KindStreamStart}, abi.PartPass},
				{abi.Part{Kind: abi.KindTextStart, ID: "t0"}, abi.PartPass},
				{abi.Part{Kind: abi.KindTextDelta, ID: "t0", Delta: "I ca"}, abi.PartHold},
				{abi.Part{Kind: abi.KindTextDelta, ID: "t0", Delta: "n't help"}, abi.PartError},
			} {
				v, err := st.Part(ctx, &step.part)
				require.NoError(t, err)
				require.Equal(t, step.want, v.Action, "part %q", step.part.Delta)
				if v.Action == abi.PartError {
					var re *abi.RefusalError
					require.ErrorAs(t, v.Err, &re)
					require.Equal(t, &abi.RefusalError{Transform: "refusal", Phrase: "i can't", Text: "I can't"}, re)
				}
			}
		})
		t.Run("refusal detaches at the first mismatch and releases what it held", func(t *testing.T) {
			in := textStream("I ", "think so")
			r := run(ctx, refusal, 2, in)
			require.NoError(t, r.fail)
			require.NoError(t, r.err)
			require.Equal(t, render(in), render(r.out))
		})
		t.Run("hold at the end of the stream resolves to pass", func(t *testing.T) {
			in := textStream("I can")
			r := run(ctx, refusal, 3, in)
			require.NoError(t, r.fail)
			require.NoError(t, r.err)
			require.Equal(t, render(in), render(r.out))
		})
		t.Run("a condition-only method on a transform is a wrong-kind error", func(t *testing.T) {
			_, err := upper.Decide(ctx, &abi.Attempt{})
			require.ErrorIs(t, err, ErrWrongKind)
		})
	})
}
