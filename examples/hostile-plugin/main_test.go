package main

import (
	"bytes"
	"context"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestRun_HostileCodeIsContainedAndTheRequestSucceeds(t *testing.T) {
	var out bytes.Buffer
	require.NoError(t, run(context.Background(), &out))
	require.Equal(t, `load forbidden_file: refused: host: load plugin "forbidden_file": forbidden import: wasi_snapshot_preview1.path_open (no files, sockets or other WASI capabilities)
load loop: ok (kinds: condition=true transform=true, fail policy fail-open)
load upper: ok
attempt 1 on openai/gpt-4o failed: overloaded
condition loop: decide: host: plugin call timed out → no opinion (fail-open)
transform loop: part: host: plugin call timed out → detached, the stream goes on (fail-open)
answer: "THE REQUEST STILL SUCCEEDS."
`, out.String())
}
