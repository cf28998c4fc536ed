package main

import (
	"bytes"
	"context"
	"regexp"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestRun_SwapsUnderTrafficWithoutMixingVersions(t *testing.T) {
	var out bytes.Buffer
	require.NoError(t, run(context.Background(), &out))
	sums := regexp.MustCompile(`sha256 ([0-9a-f]{12})…`)
	got := sums.FindAllStringSubmatch(out.String(), -1)
	require.Len(t, got, 3)
	require.NotEqual(t, got[0][1], got[1][1], "v2 is another module")
	require.Equal(t, got[1][1], got[2][1], "the refused v3 left v2 serving")
	require.Equal(t, `style v1 (pass-through) serving, sha256 X…
style v2 (upper-case) swapped in, sha256 X…
64/64 streams during the swap ran whole on one version
stream opened before the swap, finished after: "hello from the model" (still v1)
stream opened after the swap: "HELLO FROM THE MODEL" (v2)
v3 refused: host: load plugin "style": forbidden import: wasi_snapshot_preview1.sock_accept (no files, sockets or other WASI capabilities)
still serving v2, sha256 X…
`, sums.ReplaceAllString(out.String(), "sha256 X…"))
}
