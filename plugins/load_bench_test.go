package plugins_test

import (
	"bytes"
	"context"
	"os"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/retryhost/retryhost/host"
	"github.com/retryhost/retryhost/plugins"
	"github.com/retryhost/retryhost/plugins/internal/plugintest"
)

// BenchmarkColdLoad is what a process pays to start each built-in plugin,
// the embedded C build next to its Go-SDK reference build (and, for the
// refusal detector, its AssemblyScript and Rust SDK builds): a new host
// runtime with no compilation cache (host.New, the default guarded mode),
// Load with the plugin's example config (compile, instantiate, init), and
// Close.
//
//	go test ./plugins -run '^$' -bench ColdLoad -benchtime 5x
//
// ns/op is the cold load's wall time, cpu-ms/op its CPU time (user +
// system, all threads: steadier than wall time on a busy machine);
// peak-RSS-MB is the process's resident memory
// high-water mark during a load above where it started (Linux only:
// /proc/self/clear_refs resets the mark; 0 elsewhere); wasm-KB is the
// module's size.
func BenchmarkColdLoad(b *testing.B) {
	ctx := context.Background()
	for _, p := range plugins.All() {
		if p.Name == "c-status" {
			continue
		}
		type build struct {
			name string
			wasm []byte
		}
		builds := []build{{"c", p.Wasm}, {"go", plugintest.GoRef(p.Name)}}
		if p.Name == "refusal" { // the guest SDKs' builds of it
			builds = append(builds, build{"as", plugintest.SDKBuild("assemblyscript", "refusal")},
				build{"rust", plugintest.SDKBuild("rust", "refusal")})
		}
		for _, build := range builds {
			b.Run(p.Name+"/"+build.name, func(b *testing.B) {
				var peak int64
				cpu0 := cpuTime()
				for b.Loop() {
					b.StopTimer()
					base := resetPeakRSS()
					b.StartTimer()
					rt, err := host.New(ctx)
					require.NoError(b, err)
					_, err = rt.Load(ctx, p.Name, build.wasm, host.WithConfig([]byte(p.ExampleConfig)), host.WithInstances(1))
					require.NoError(b, err)
					b.StopTimer()
					if base > 0 {
						peak = max(peak, peakRSS()-base)
					}
					require.NoError(b, rt.Close(ctx))
					b.StartTimer()
				}
				b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N)/1e6, "cpu-ms/op")
				b.ReportMetric(float64(peak)/(1<<20), "peak-RSS-MB")
				b.ReportMetric(float64(len(build.wasm))/1024, "wasm-KB")
			})
		}
	}
}

// resetPeakRSS resets the process's peak RSS to its current RSS and
// returns it in bytes (0 if the platform has no /proc/self/clear_refs).
func resetPeakRSS() int64 {
	if err := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0); err != nil {
		return 0
	}
	return procStatus("VmRSS:")
}

func peakRSS() int64 { return procStatus("VmHWM:") }

// procStatus reads a "kB" field of /proc/self/status, in bytes.
func procStatus(field string) int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	i := bytes.Index(b, []byte(field))
	if i < 0 {
		return 0
	}
	f := bytes.Fields(b[i+len(field):])
	if len(f) == 0 {
		return 0
	}
	kb, _ := strconv.ParseInt(string(f[0]), 10, 64)
	return kb << 10
}
