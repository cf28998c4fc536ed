package main

import (
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// closedAfter serves data, then fails every read as a closed server body does.
type closedAfter struct{ r io.Reader }

func (c *closedAfter) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	if err == io.EOF {
		return n, http.ErrBodyReadAfterClose
	}
	return n, err
}

func (c *closedAfter) Close() error { return nil }

func TestDeclaredBody(t *testing.T) {
	tests := []struct {
		name     string
		data     string
		declared int64
		want     string
		err      error
	}{
		{name: "ends at its length without reading on", data: `{"stream":true}`, declared: 15, want: `{"stream":true}`},
		{name: "longer than declared", data: `{"stream":true}xx`, declared: 15, want: `{"stream":true}`},
		{name: "shorter than declared", data: `{"stream"`, declared: 15, want: `{"stream"`, err: http.ErrBodyReadAfterClose},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := &declaredBody{rc: &closedAfter{r: strings.NewReader(tt.data)}, left: tt.declared}
			got, err := io.ReadAll(b)
			require.Equal(t, tt.want, string(got))
			if tt.err == nil {
				require.NoError(t, err)
				n, err := b.Read(make([]byte, 8)) // the transport's check that the body ends
				require.Zero(t, n)
				require.ErrorIs(t, err, io.EOF)
			} else {
				require.True(t, errors.Is(err, tt.err), "%v", err)
			}
		})
	}
}

func TestRoundOrder(t *testing.T) {
	tests := []struct {
		name     string
		round, n int
		want     []int
	}{
		{name: "round 0 starts at the first target", round: 0, n: 3, want: []int{0, 1, 2}},
		{name: "round 1 starts at the second", round: 1, n: 3, want: []int{1, 2, 0}},
		{name: "round 2 starts at the third", round: 2, n: 3, want: []int{2, 0, 1}},
		{name: "round n starts over", round: 3, n: 3, want: []int{0, 1, 2}},
		{name: "one target", round: 4, n: 1, want: []int{0}},
		{name: "no target", round: 1, n: 0, want: []int{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.Equal(t, tt.want, roundOrder(tt.round, tt.n))
		})
	}
}

func TestShare(t *testing.T) {
	tests := []struct {
		name   string
		total  int64
		rounds int
		want   []int64
	}{
		{name: "even", total: 1000, rounds: 5, want: []int64{200, 200, 200, 200, 200}},
		{name: "uneven parts add up", total: 10, rounds: 3, want: []int64{3, 3, 4}},
		{name: "fewer than rounds", total: 2, rounds: 5, want: []int64{0, 0, 1, 0, 1}},
		{name: "one round", total: 7, rounds: 1, want: []int64{7}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []int64
			for r := 0; r < tt.rounds; r++ {
				got = append(got, share(tt.total, r, tt.rounds))
			}
			require.Equal(t, tt.want, got)
		})
	}
}
