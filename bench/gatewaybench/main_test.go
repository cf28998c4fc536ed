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
