package gateway

import (
	"runtime"
	"sync"
	"sync/atomic"
)

// openers run the opening of policy requests (up to their commit) on
// long-lived goroutines, off the handler's stack.
//
// Opening a policy request is deep work: the SDK's reflective request
// encoding and the HTTP round trip grow a goroutine's stack to tens of KiB.
// Done on the handler's goroutine, that stack would stay with a stream held
// open for minutes: thousands of held streams would each carry it for
// nothing. Done on a goroutine of its own per request (as before), every
// request paid the growth again, 2 KiB doubling to 32 (runtime.newstack and
// copystack were ~5% of the gateway's CPU), because a goroutine that ends
// gives its grown stack back. A worker here keeps its grown stack between
// requests, so an opening runs on a stack that is already large enough; the
// runtime's own stack shrinking at garbage collection bounds what an idle
// worker keeps.
//
// At most maxIdle workers wait for work; a request that finds none idle
// starts one, which afterwards waits too, or ends when enough wait already.
// So the goroutines are as many as the openings in flight, never a queue:
// no request waits for another's opening. The hand-off costs what the
// per-request goroutine cost (a switch on the same P), nothing more.
type openers struct {
	jobs    chan *openJob // unbuffered: a job goes only to a worker waiting for one
	quit    chan struct{} // closed by stop
	idle    atomic.Int32  // workers waiting (or about to) on jobs
	maxIdle int32
	wg      sync.WaitGroup
	stopped sync.Once
}

// opening is the work an opener runs: a request's call (chat.go).
type opening interface{ open() }

// openFunc is a func as an opening.
type openFunc func()

func (f openFunc) open() { f() }

// openJob is one run: the work and, back from the worker, how it ended.
type openJob struct {
	fn       opening
	panicked bool
	p        any
	done     chan struct{} // buffered: the worker never waits on the caller
}

var openJobs = sync.Pool{New: func() any { return &openJob{done: make(chan struct{}, 1)} }}

// defaultMaxIdleOpeners is how many workers wait for work at most: enough
// for the openings a loaded gateway has in flight at once on each core,
// few enough that the stacks they keep (at most 32 KiB each, less once a
// garbage collection has shrunk them) are nothing beside its streams.
func defaultMaxIdleOpeners() int32 { return int32(max(8, 4*runtime.GOMAXPROCS(0))) }

func newOpeners(maxIdle int32) *openers {
	return &openers{jobs: make(chan *openJob), quit: make(chan struct{}), maxIdle: maxIdle}
}

// run runs fn.open on a worker and waits for it. A panic in it is raised again
// here, on the caller's goroutine (where net/http recovers a handler's
// panic), never on the worker's, which would end the process. After stop,
// run still runs fn, on a goroutine that ends with it.
func (o *openers) run(fn opening) {
	j := openJobs.Get().(*openJob)
	j.fn = fn
	select {
	case o.jobs <- j:
	default:
		o.wg.Add(1)
		go o.work(j)
	}
	<-j.done
	panicked, p := j.panicked, j.p
	j.fn, j.p = nil, nil
	openJobs.Put(j)
	if panicked {
		panic(p)
	}
}

// work runs j, then waits for more while fewer than maxIdle others wait.
func (o *openers) work(j *openJob) {
	defer o.wg.Done()
	for {
		j.do()
		if o.idle.Add(1) > o.maxIdle {
			o.idle.Add(-1)
			return
		}
		select {
		case <-o.quit:
			o.idle.Add(-1)
			return
		case j = <-o.jobs:
			o.idle.Add(-1)
		}
	}
}

// do runs the job's work and reports its end: its panic, recovered, goes
// back with it. A runtime.Goexit in the work ends the worker after the
// report (the caller sees a nil panic value raised again).
func (j *openJob) do() {
	defer func() {
		if j.panicked {
			j.p = recover()
		}
		j.done <- struct{}{}
	}()
	j.panicked = true
	j.fn.open()
	j.panicked = false
}

// stop ends the idle workers and waits for every worker to end. A run in
// flight finishes first; call it once no run can start (the gateway has
// drained).
func (o *openers) stop() {
	o.stopped.Do(func() { close(o.quit) })
	o.wg.Wait()
}
