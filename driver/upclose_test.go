package driver

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// closeProbe is an upstream whose Recv blocks until Close, and whose Close
// takes a while and notes whether another Close entered meanwhile.
type closeProbe struct {
	closed     chan struct{}
	once       sync.Once
	in         atomic.Int32
	calls      atomic.Int32
	concurrent atomic.Bool
}

func (p *closeProbe) Recv() (Part, error) {
	<-p.closed
	return Part{}, errors.New("closed")
}

func (p *closeProbe) Close() error {
	p.calls.Add(1)
	if p.in.Add(1) > 1 {
		p.concurrent.Store(true)
	}
	p.once.Do(func() { close(p.closed) })
	time.Sleep(20 * time.Millisecond) // a provider's close that takes time: the window
	p.in.Add(-1)
	return nil
}

type closeProbeModel struct{ streams chan *closeProbe }

func (m *closeProbeModel) Key() string { return "p/probe" }
func (m *closeProbeModel) Generate(context.Context, *Request) (*Response, error) {
	return nil, errors.New("not used")
}
func (m *closeProbeModel) Stream(context.Context, *Request) (Stream, error) {
	p := &closeProbe{closed: make(chan struct{})}
	m.streams <- p
	return p, nil
}

// A deadline that fires while the upstream is silent closes it (the
// attempt's AfterFunc), and the attempt's end closes it too: the driver
// makes that one Close, never two at once (a provider's Close need not be
// safe against itself; examples/stream-timeout-switch's panicked, 1 run in
// ~600 under -race).
func TestRunAttempt_upstreamClosedOnceWhenADeadlineFires(t *testing.T) {
	m := &closeProbeModel{streams: make(chan *closeProbe, 1)}
	r, err := New(m)
	require.NoError(t, err)
	rm, err := NewRetryableModel(r, WithFirstContentTimeout(5*time.Millisecond))
	require.NoError(t, err)
	_, err = rm.Stream(t.Context(), &Request{})
	var de *DeadlineError
	require.ErrorAs(t, err, &de)
	p := <-m.streams
	require.False(t, p.concurrent.Load(), "two Closes of the upstream ran at once")
	require.Equal(t, int32(1), p.calls.Load(), "the upstream is closed once")
}
