package main

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

type result struct {
	ok           bool // 200 and the whole answer, once, in order, with its end marker
	firstByte    time.Duration
	firstContent time.Duration
	done         time.Duration // the whole answer read ([DONE] and the body's end for a stream)
}

// stats add up over the rounds: the open loop's samples are merged, and
// the closed loop's rates and costs are its sums over its sums (requests
// over time, CPU and syscalls over requests), so that a short round
// weighs what it carried.
type stats struct {
	n, intact int
	fb, fc    []time.Duration

	closedN, closedOK int
	closedTime        time.Duration
	cpu               time.Duration // the proxy process's CPU in the closed loop
	genCPU            time.Duration // the load generator's (this process's)
	upCPU             time.Duration // the upstream process's
	syscr, syscw      int64         // the proxy's read and write syscalls
	noIO              bool          // /proc/PID/io could not be read in some round
}

// rps is the closed loop's intact requests a second over all its rounds.
func (st *stats) rps() float64 {
	if st.closedTime <= 0 {
		return 0
	}
	return float64(st.closedOK) / st.closedTime.Seconds()
}

// perReq is a closed-loop sum spread over the closed loop's requests.
func (st *stats) perReq(d time.Duration) time.Duration {
	if st.closedN == 0 {
		return 0
	}
	return d / time.Duration(st.closedN)
}

// roundOrder is the order in which round r runs n targets: all of them,
// starting at r mod n, so that over n rounds each target goes first once
// and no target always follows the same one.
func roundOrder(r, n int) []int {
	o := make([]int, n)
	for i := range o {
		o[i] = (r + i) % n
	}
	return o
}

// share is round r's part of total cut into rounds parts; the parts add
// up to total exactly.
func share(total int64, r, rounds int) int64 {
	return total*int64(r+1)/int64(rounds) - total*int64(r)/int64(rounds)
}

// openLoop sends n requests through t at -rate a second, not waiting for
// the answers, and adds their latencies to st.
func openLoop(ctx context.Context, t *target, stream bool, n int, st *stats) {
	var mu sync.Mutex
	var wg sync.WaitGroup
	tick := time.NewTicker(time.Second / time.Duration(*rate))
	defer tick.Stop()
	for i := 0; i < n && ctx.Err() == nil; i++ {
		<-tick.C
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := t.client.do(ctx, stream)
			mu.Lock()
			defer mu.Unlock()
			st.n++
			if r.ok {
				st.intact++
				st.fb = append(st.fb, r.firstByte)
				st.fc = append(st.fc, r.firstContent)
			}
		}()
	}
	wg.Wait()
}

// closedLoop keeps -conc requests in flight through t for d and adds to
// st what they carried and what the proxy, the generator and the upstream
// spent on them.
func closedLoop(ctx context.Context, t *target, upPid int, stream bool, d time.Duration, st *stats) {
	var n, ok atomic.Int64
	cpu0, gen0, up0 := procCPU(t.pid), selfCPU(), procCPU(upPid)
	r0, w0, io0 := procIO(t.pid)
	start := time.Now()
	end := start.Add(d)
	var wg sync.WaitGroup
	for w := 0; w < *conc; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(end) && ctx.Err() == nil {
				r := t.client.do(ctx, stream)
				n.Add(1)
				if r.ok {
					ok.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	st.closedTime += time.Since(start)
	st.closedN += int(n.Load())
	st.closedOK += int(ok.Load())
	st.genCPU += selfCPU() - gen0
	st.upCPU += procCPU(upPid) - up0
	if t.pid != 0 {
		st.cpu += procCPU(t.pid) - cpu0
		r1, w1, io1 := procIO(t.pid)
		if io0 && io1 {
			st.syscr += r1 - r0
			st.syscw += w1 - w0
		} else {
			st.noIO = true
		}
	}
}

// procIO is a process's read and write syscall counts (Linux
// /proc/PID/io: syscr, syscw, which count read(2)/readv(2) and
// write(2)/writev(2) on sockets too); ok is false where it cannot be read.
func procIO(pid int) (syscr, syscw int64, ok bool) {
	if pid == 0 {
		return 0, 0, false
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/io", pid))
	if err != nil {
		return 0, 0, false
	}
	var gotR, gotW bool
	for _, l := range strings.Split(string(b), "\n") {
		k, v, found := strings.Cut(l, ":")
		if !found {
			continue
		}
		n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		if err != nil {
			continue
		}
		switch k {
		case "syscr":
			syscr, gotR = n, true
		case "syscw":
			syscw, gotW = n, true
		}
	}
	return syscr, syscw, gotR && gotW
}

// selfCPU is this process's user+system CPU time.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// procCPU is the user+system CPU time of a process (Linux /proc; 0 elsewhere).
func procCPU(pid int) time.Duration {
	if pid == 0 {
		return 0
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	if len(f) < 13 {
		return 0
	}
	u, _ := strconv.ParseInt(f[11], 10, 64)
	k, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(u+k) * (time.Second / 100) // USER_HZ is 100 on Linux
}

func pct(d []time.Duration, p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	i := int(p * float64(len(s)-1))
	return s[i]
}

func ms(d time.Duration) string { return fmt.Sprintf("%.2f", float64(d)/float64(time.Millisecond)) }
