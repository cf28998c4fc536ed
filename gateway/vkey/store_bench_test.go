package vkey

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/retryhost/retryhost/internal/testkit/redistest"
)

// fillStore writes n key records, as BenchmarkLoad100kKeys's file has
// them, into the key set on srv, a thousand a command.
func fillStore(b testing.TB, srv *redistest.Server, n int) {
	b.Helper()
	args := []string{"HSET", storeRecords}
	flush := func() {
		_, err := srv.Do(args...)
		require.NoError(b, err)
		args = args[:2]
	}
	for i := range n {
		id := fmt.Sprint("key-", i)
		args = append(args, id, fmt.Sprintf(`{"id":%q,"hash":%q,"routes":["gpt-4o","claude-*"],"rpm":600,"tpm":200000,"max_concurrent":8,`+
			`"budget":{"tokens_per_day":1000000},"expires":"2027-06-30T00:00:00Z","metadata":{"owner":"owner-%d@example.com","team":"team-%d"}}`,
			id, Hash(fmt.Sprint("secret-", i)), i, i%50))
		if len(args) == 2+2*1000 {
			flush()
		}
	}
	if len(args) > 2 {
		flush()
	}
	_, err := srv.Do("INCR", "{retryhost:keys}version")
	require.NoError(b, err)
}

// hgetallTime is the time the server has spent in HGETALL so far (its
// INFO commandstats).
func hgetallTime(b testing.TB, srv *redistest.Server) time.Duration {
	out, err := srv.Query("INFO", "commandstats")
	require.NoError(b, err)
	for line := range strings.Lines(strings.Join(out, "\n")) {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_hgetall:"); ok {
			for kv := range strings.SplitSeq(rest, ",") {
				if v, ok := strings.CutPrefix(kv, "usec="); ok {
					us, err := strconv.ParseInt(v, 10, 64)
					require.NoError(b, err)
					return time.Duration(us) * time.Microsecond
				}
			}
		}
	}
	return 0
}

// BenchmarkStoreLoad100k: Store.Load of a key set of 100,000 keys on a
// local redis-server (one MULTI/EXEC round trip, then the records'
// decoding and checks), beside Read alone (without the set's checks and
// maps). cpu-ns/op is this process's CPU time per load; redis-ns/op the
// server's time in its HGETALL (from INFO commandstats), which a Redis
// on a host of its own does not take from the replica's CPUs.
func BenchmarkStoreLoad100k(b *testing.B) {
	srv := redistest.Start(b)
	fillStore(b, srv, 100_000)
	s, err := OpenStore(srv.URL())
	require.NoError(b, err)
	defer s.Close()
	ctx := context.Background()
	b.Run("Load", func(b *testing.B) {
		defer reportCPU(b)()
		defer reportRedis(b, srv)()
		for b.Loop() {
			set, _, err := s.Load(ctx)
			if err != nil || set.Len() != 100_000 {
				b.Fatal(err)
			}
		}
	})
	b.Run("Read", func(b *testing.B) {
		defer reportCPU(b)()
		defer reportRedis(b, srv)()
		for b.Loop() {
			f, _, err := s.Read(ctx)
			if err != nil || len(f.Keys) != 100_000 {
				b.Fatal(err)
			}
		}
	})
}

// reportRedis reports the server's HGETALL time per op as redis-ns/op.
func reportRedis(b *testing.B, srv *redistest.Server) func() {
	t0 := hgetallTime(b, srv)
	return func() { b.ReportMetric(float64(hgetallTime(b, srv)-t0)/float64(b.N), "redis-ns/op") }
}
