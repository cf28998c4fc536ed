package vkey

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestParseAndLookup(t *testing.T) {
	secret, hash := NewSecret()
	require.True(t, strings.HasPrefix(secret, SecretPrefix))
	s, err := Parse([]byte(`{"keys": [{"id": "a", "hash": "` + hash + `", "routes": ["gpt-*", "claude"], "rpm": 5,
		"metadata": {"team": "a"}, "budget": {"tokens_per_day": 9}}]}`))
	require.NoError(t, err)
	require.Equal(t, StoreDownLocal, s.OnStoreDown)
	k, ok := s.Lookup(secret)
	require.True(t, ok)
	require.Equal(t, "a", k.ID)
	require.Equal(t, "a", k.Metadata["team"])
	_, ok = s.Lookup(secret + "x")
	require.False(t, ok)
	require.True(t, k.Allows("gpt-4o"))
	require.True(t, k.Allows("claude"))
	require.False(t, k.Allows("claude-3"))
	require.True(t, (&Key{}).Allows("anything"))
}

func TestParseRefusesBadFiles(t *testing.T) {
	h := Hash("x")
	for name, f := range map[string]string{
		"bad json":       `{"keys": [`,
		"no hash":        `{"keys": [{"id": "a"}]}`,
		"short hash":     `{"keys": [{"id": "a", "hash": "sha256:abc"}]}`,
		"bad id":         `{"keys": [{"id": "a b", "hash": "` + h + `"}]}`,
		"duplicate id":   `{"keys": [{"id": "a", "hash": "` + h + `"}, {"id": "a", "hash": "` + Hash("y") + `"}]}`,
		"duplicate hash": `{"keys": [{"id": "a", "hash": "` + h + `"}, {"id": "b", "hash": "` + h + `"}]}`,
		"negative rpm":   `{"keys": [{"id": "a", "hash": "` + h + `", "rpm": -1}]}`,
		"star inside":    `{"keys": [{"id": "a", "hash": "` + h + `", "routes": ["g*t"]}]}`,
		"store down":     `{"on_store_down": "maybe", "keys": []}`,
		"cost over max":  `{"keys": [{"id": "a", "hash": "` + h + `", "budget": {"cost_per_month": 1e13}}]}`,
		"negative cost":  `{"keys": [{"id": "a", "hash": "` + h + `", "budget": {"cost_per_day": -0.5}}]}`,
	} {
		_, err := Parse([]byte(f))
		require.ErrorIs(t, err, ErrKeyFile, name)
		var fe *FileError
		require.True(t, errors.As(err, &fe), name)
	}
}

func TestStatusAt(t *testing.T) {
	now := time.Now()
	require.Equal(t, Valid, (&Key{}).StatusAt(now))
	require.Equal(t, Valid, (&Key{Expires: now.Add(time.Second)}).StatusAt(now))
	require.Equal(t, Expired, (&Key{Expires: now}).StatusAt(now))
	require.Equal(t, Revoked, (&Key{Revoked: true, Expires: now}).StatusAt(now))
}

func TestWriteFileRoundTrips(t *testing.T) {
	path := filepath.Join(t.TempDir(), "keys.json")
	_, hash := NewSecret()
	f := &File{Keys: []*Key{{ID: "a", Hash: hash, TPM: 7, Expires: time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)}}}
	require.NoError(t, WriteFile(path, f))
	st, err := os.Stat(path)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), st.Mode().Perm())
	s, err := Load(path)
	require.NoError(t, err)
	k, ok := s.ByID("a")
	require.True(t, ok)
	require.Equal(t, int64(7), k.TPM)
	require.Equal(t, f.Keys[0].Expires, k.Expires)
}

// TestLocalRPMIsAMinuteAtOnceThenTheRate: GCRA lets a key spend its whole
// minute at once, then one request per 60s/rpm.
func TestLocalRPMIsAMinuteAtOnceThenTheRate(t *testing.T) {
	l := NewLocal()
	k := &Key{ID: "a", RPM: 6}
	now := time.Unix(1_800_000_000, 0)
	for i := range 6 {
		d := l.Admit(context.Background(), k, 0, now)
		require.Equal(t, Admitted, d.Reason, i)
		require.Equal(t, int64(5-i), d.RemainingRequests)
	}
	d := l.Admit(context.Background(), k, 0, now)
	require.Equal(t, OverRPM, d.Reason)
	require.Equal(t, 10*time.Second, d.RetryAfter)
	require.Equal(t, Admitted, l.Admit(context.Background(), k, 0, now.Add(10*time.Second)).Reason)
	require.Equal(t, OverRPM, l.Admit(context.Background(), k, 0, now.Add(10*time.Second)).Reason)
}

// TestLocalTPMSettles: the estimate is charged at admission, the
// difference at settlement, both ways; a refused request charges nothing.
func TestLocalTPMSettles(t *testing.T) {
	l := NewLocal()
	k := &Key{ID: "a", TPM: 100, RPM: 1000}
	now := time.Unix(1_800_000_000, 0)
	require.Equal(t, Admitted, l.Admit(context.Background(), k, 80, now).Reason)
	d := l.Admit(context.Background(), k, 30, now)
	require.Equal(t, OverTPM, d.Reason)
	require.Equal(t, int64(20), d.RemainingTokens)
	l.Settle(context.Background(), k, -70, 0, now) // used 10 of 80
	d = l.Admit(context.Background(), k, 30, now)
	require.Equal(t, Admitted, d.Reason)
	require.Equal(t, int64(60), d.RemainingTokens)
	l.Settle(context.Background(), k, 60, 0, now) // used 90 of 30
	require.Equal(t, OverTPM, l.Admit(context.Background(), k, 1, now).Reason)
	require.Equal(t, Admitted, l.Admit(context.Background(), k, 500, now.Add(time.Minute)).Reason, "an estimate over the TPM is charged the TPM")
}

// TestLocalBudgetPerDayAndMonth: spent, a budget refuses until its UTC
// day (or month) ends.
func TestLocalBudgetPerDayAndMonth(t *testing.T) {
	l := NewLocal()
	k := &Key{ID: "a", Budget: Budget{TokensPerDay: 100, TokensPerMonth: 150}}
	day1 := time.Date(2027, 3, 30, 23, 0, 0, 0, time.UTC)
	require.Equal(t, Admitted, l.Admit(context.Background(), k, 10, day1).Reason)
	l.Settle(context.Background(), k, 90, 0, day1)
	d := l.Admit(context.Background(), k, 10, day1)
	require.Equal(t, OverBudget, d.Reason)
	require.Equal(t, time.Hour, d.RetryAfter)
	day2 := day1.Add(2 * time.Hour)
	require.Equal(t, Admitted, l.Admit(context.Background(), k, 50, day2).Reason)
	d = l.Admit(context.Background(), k, 1, day2)
	require.Equal(t, OverBudget, d.Reason, "150 a month")
	require.Equal(t, time.Date(2027, 4, 1, 0, 0, 0, 0, time.UTC).Sub(day2), d.RetryAfter)
	require.Equal(t, Admitted, l.Admit(context.Background(), k, 1, time.Date(2027, 4, 1, 0, 0, 0, 0, time.UTC)).Reason)
}

// TestLocalSpendBudget: a request's cost is settled after it; the
// admission after the request that crossed a day's spend budget is
// refused until the UTC day ends, the month's until the month ends, and a
// new period starts from nothing.
func TestLocalSpendBudget(t *testing.T) {
	ctx := context.Background()
	l := NewLocal()
	k := &Key{ID: "a", Budget: Budget{CostPerDay: 0.001, CostPerMonth: 0.0025}}
	require.True(t, k.Limited(), "a spend budget alone is a limit")
	day1 := time.Date(2027, 3, 30, 23, 0, 0, 0, time.UTC)
	for range 2 { // 0, then 0.0006 spent
		require.Equal(t, Admitted, l.Admit(ctx, k, 100, day1).Reason)
		l.Settle(ctx, k, 0, 0.0006, day1)
	}
	d := l.Admit(ctx, k, 1, day1)
	require.Equal(t, OverSpend, d.Reason, "0.0012 spent of 0.001")
	require.Equal(t, time.Hour, d.RetryAfter, "until the day ends")

	day2 := day1.Add(2 * time.Hour)
	require.Equal(t, Admitted, l.Admit(ctx, k, 1, day2).Reason, "a new day")
	l.Settle(ctx, k, 0, 0.0009, day2) // the month: 0.0021
	require.Equal(t, Admitted, l.Admit(ctx, k, 1, day2).Reason)
	l.Settle(ctx, k, 0, 0.0005, day2) // the month: 0.0026
	d = l.Admit(ctx, k, 1, day2)
	require.Equal(t, OverSpend, d.Reason)
	require.Equal(t, time.Date(2027, 4, 1, 0, 0, 0, 0, time.UTC).Sub(day2), d.RetryAfter, "until the month ends")
	require.Equal(t, Admitted, l.Admit(ctx, k, 1, time.Date(2027, 4, 1, 0, 0, 0, 0, time.UTC)).Reason, "a new month")

	free := &Key{ID: "free", RPM: 1000}
	l.Settle(ctx, free, 0, 5, day1)
	require.Equal(t, Admitted, l.Admit(ctx, free, 0, day1).Reason, "a key without a spend budget is not held to one")
}

// TestLocalSpendSettledInANewDay: a request admitted late on a day and
// ending on the next charges its cost to the next day.
func TestLocalSpendSettledInANewDay(t *testing.T) {
	ctx := context.Background()
	l := NewLocal()
	k := &Key{ID: "a", Budget: Budget{CostPerDay: 1}}
	late := time.Date(2027, 3, 30, 23, 59, 59, 0, time.UTC)
	require.Equal(t, Admitted, l.Admit(ctx, k, 0, late).Reason)
	next := late.Add(2 * time.Second)
	l.Settle(ctx, k, 0, 1, next)
	require.Equal(t, OverSpend, l.Admit(ctx, k, 0, next).Reason)
}

func writeKeys(b testing.TB, n int) string {
	var sb strings.Builder
	sb.WriteString(`{"keys": [`)
	for i := range n {
		if i > 0 {
			sb.WriteString(",\n")
		}
		fmt.Fprintf(&sb, `{"id": "key-%d", "hash": %q, "routes": ["gpt-4o", "claude-*"], "rpm": 600, "tpm": 200000, "max_concurrent": 8,`+
			` "budget": {"tokens_per_day": 1000000}, "expires": "2027-06-30T00:00:00Z", "metadata": {"team": "team-%d", "owner": "owner-%d@example.com"}}`,
			i, Hash(fmt.Sprint("secret-", i)), i%50, i)
	}
	sb.WriteString("]}\n")
	path := filepath.Join(b.TempDir(), "keys.json")
	require.NoError(b, os.WriteFile(path, []byte(sb.String()), 0o600))
	return path
}

// BenchmarkLoad100kKeys: a key file of 100,000 keys (what the manual
// promises loads within a second), by Load and, side by side, by the
// same read and checks with encoding/json alone decoding it. cpu-ns/op
// is the process's CPU time per load, which a shared machine's load
// stretches less than the wall time.
func BenchmarkLoad100kKeys(b *testing.B) {
	path := writeKeys(b, 100_000)
	b.Run("Load", func(b *testing.B) {
		defer reportCPU(b)()
		for b.Loop() {
			s, err := Load(path)
			if err != nil || s.Len() != 100_000 {
				b.Fatal(err)
			}
		}
	})
	b.Run("Load-1cpu", func(b *testing.B) {
		defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
		defer reportCPU(b)()
		for b.Loop() {
			s, err := Load(path)
			if err != nil || s.Len() != 100_000 {
				b.Fatal(err)
			}
		}
	})
	// Load-fresh is serve's load at start: each op a fresh process (this
	// test binary, running TestLoadInAFreshProcess), whose heap has not
	// grown yet, so that every page the load touches is a fault; its
	// load's wall time, CPU and faults are reported (the ns/op is the
	// whole process's).
	b.Run("Load-fresh", func(b *testing.B) {
		var wall, cpu, faults int64
		for b.Loop() {
			cmd := exec.Command(os.Args[0], "-test.run=^TestLoadInAFreshProcess$", "-test.count=1")
			cmd.Env = append(os.Environ(), "VKEY_FRESH_FILE="+path)
			out, err := cmd.Output()
			if err != nil {
				b.Fatalf("%v: %s", err, out)
			}
			_, line, ok := strings.Cut(string(out), "fresh-load ")
			var w, c, f, n int64
			if _, err := fmt.Sscan(line, &w, &c, &f, &n); !ok || err != nil || n != 100_000 {
				b.Fatalf("the child printed %q", out)
			}
			wall, cpu, faults = wall+w, cpu+c, faults+f
		}
		b.ReportMetric(float64(wall)/float64(b.N), "load-ns/op")
		b.ReportMetric(float64(cpu)/float64(b.N), "cpu-ns/op")
		b.ReportMetric(float64(faults)/float64(b.N), "faults/op")
	})
	b.Run("encoding-json", func(b *testing.B) {
		defer reportCPU(b)()
		for b.Loop() {
			data, err := os.ReadFile(path)
			if err != nil {
				b.Fatal(err)
			}
			f, err := decodeWithJSON(data)
			if err != nil {
				b.Fatal(err)
			}
			s, err := f.Set()
			if err != nil || s.Len() != 100_000 {
				b.Fatal(err)
			}
		}
	})
}

// TestLoadInAFreshProcess is BenchmarkLoad100kKeys/Load-fresh's child:
// with VKEY_FRESH_FILE set it loads that file and prints the load's wall
// time, CPU time (ns) and page faults, and the number of keys.
func TestLoadInAFreshProcess(t *testing.T) {
	path := os.Getenv("VKEY_FRESH_FILE")
	if path == "" {
		t.Skip("BenchmarkLoad100kKeys/Load-fresh runs it")
	}
	cpu0, faults0 := cpuTime()
	t0 := time.Now()
	s, err := Load(path)
	wall := time.Since(t0)
	cpu, faults := cpuTime()
	require.NoError(t, err)
	fmt.Printf("fresh-load %d %d %d %d\n", wall.Nanoseconds(), (cpu - cpu0).Nanoseconds(), faults-faults0, s.Len())
}

// BenchmarkLookup is what the key set adds to a request, in a set of 100
// keys and of 100,000 side by side: the secret's SHA-256, the map lookup,
// the status and route checks. Each op looks up the next of 4,096 secrets
// spread over the whole set, as requests of many teams would (not one
// key that stays in the CPU's cache).
func BenchmarkLookup(b *testing.B) {
	for _, n := range []int{100, 100_000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			s, err := Load(writeKeys(b, n))
			require.NoError(b, err)
			secrets := make([]string, 4096)
			for i := range secrets {
				secrets[i] = fmt.Sprint("secret-", i*n/len(secrets))
			}
			now := time.Now()
			i := 0
			for b.Loop() {
				k, ok := s.Lookup(secrets[i%len(secrets)])
				if !ok || k.StatusAt(now) != Valid || !k.Allows("gpt-4o") {
					b.Fatal("not found")
				}
				i++
			}
		})
	}
}

// BenchmarkLocalAdmit: the in-process limiter's admission and settlement
// of one request of a key with every limit.
func BenchmarkLocalAdmit(b *testing.B) {
	l := NewLocal()
	k := &Key{ID: "a", RPM: 1 << 40, TPM: 1 << 40, Budget: Budget{TokensPerDay: 1 << 50}}
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			now := time.Now()
			l.Admit(context.Background(), k, 100, now)
			l.Settle(context.Background(), k, -50, 0, now)
		}
	})
}

// reportCPU starts counting the process's CPU time and page faults; the
// func it returns reports them per op as cpu-ns/op and faults/op.
func reportCPU(b *testing.B) func() {
	cpu0, faults0 := cpuTime()
	return func() {
		cpu, faults := cpuTime()
		b.ReportMetric(float64(cpu-cpu0)/float64(b.N), "cpu-ns/op")
		b.ReportMetric(float64(faults-faults0)/float64(b.N), "faults/op")
	}
}

// TestSetOfManyKeysNamesTheFirstMistake: in a set large enough to be
// checked and indexed in parallel, the error is the first mistake in the
// file's order, whatever its kind and wherever the others are.
func TestSetOfManyKeysNamesTheFirstMistake(t *testing.T) {
	const n = 3 * checkParallelMin
	keys := func() []*Key {
		ks := make([]*Key, n)
		for i := range ks {
			ks[i] = &Key{ID: fmt.Sprint("k", i), Hash: Hash(fmt.Sprint("s", i))}
		}
		return ks
	}
	s, err := (&File{Keys: keys()}).Set()
	require.NoError(t, err)
	require.Equal(t, n, s.Len())
	k, ok := s.Lookup(fmt.Sprint("s", n-1))
	require.True(t, ok)
	require.Equal(t, fmt.Sprint("k", n-1), k.ID)

	for _, tc := range []struct {
		name  string
		edit  func(ks []*Key)
		index int
		msg   string
	}{
		{"an invalid key late", func(ks []*Key) { ks[n-2].RPM = -1 }, n - 2, "must not be negative"},
		{"a null key", func(ks []*Key) { ks[n/2] = nil }, n / 2, "null"},
		{"a duplicate id before an invalid key", func(ks []*Key) { ks[n-1].RPM = -1; ks[n-3].ID = "k5" }, n - 3, "a second key with this id"},
		{"an invalid key before a duplicate id", func(ks []*Key) { ks[n-1].ID = "k5"; ks[n-3].Hash = "md5:0" }, n - 3, "64 hex digits"},
		{"a duplicate hash", func(ks []*Key) { ks[n-1].Hash = ks[7].Hash }, n - 1, `the same hash as "k7"`},
		{"a duplicate id in the first chunk", func(ks []*Key) { ks[3].ID = "k1"; ks[n-1].RPM = -1 }, 3, "a second key with this id"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ks := keys()
			tc.edit(ks)
			_, err := (&File{Keys: ks}).Set()
			var fe *FileError
			require.ErrorAs(t, err, &fe)
			require.Equal(t, tc.index, fe.Index)
			require.Contains(t, fe.Msg, tc.msg)
		})
	}
}

// TestLocalPeriodFollowsTheClock: the in-process limiter's cached day
// and month are Period's, across a day's and a month's end and back.
func TestLocalPeriodFollowsTheClock(t *testing.T) {
	l := NewLocal()
	end := time.Date(2027, 1, 31, 23, 59, 59, 999_999_999, time.UTC)
	for _, now := range []time.Time{end.Add(-time.Hour), end, end.Add(1), end.Add(time.Hour), end, end.Add(-48 * time.Hour),
		end.Add(time.Nanosecond).In(time.FixedZone("east", 5*3600))} {
		d, m, de, me := Period(now)
		gd, gm, gde, gme := l.periodOf(now)
		require.Equal(t, []any{d, m, de, me}, []any{gd, gm, gde, gme}, "%v", now)
	}
}

// TestLookupAllocatesNothing: finding a key by a secret of NewSecret's
// length (over the 32 bytes a string converts to on the stack) allocates
// nothing, found or not.
func TestLookupAllocatesNothing(t *testing.T) {
	secret, hash := NewSecret()
	s, err := (&File{Keys: []*Key{{ID: "a", Hash: hash}}}).Set()
	require.NoError(t, err)
	other, _ := NewSecret()
	require.Zero(t, testing.AllocsPerRun(100, func() {
		if _, ok := s.Lookup(secret); !ok {
			t.Fatal("not found")
		}
		if _, ok := s.Lookup(other); ok {
			t.Fatal("found")
		}
	}))
}
