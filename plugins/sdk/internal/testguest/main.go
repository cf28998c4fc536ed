// Command testguest is a transform for the SDK's own tests and
// benchmarks, built at test time (never committed as .wasm): its streams
// hold every text delta without reading it, so what a part costs is the
// SDK's; with the config "garbage=N" every part also allocates N bytes of
// garbage, to check that the SDK's yields keep the guest's heap bounded;
// with "rooms=N" it has room for N open streams and refuses another with
// transform.ErrNoRoom.
package main

import (
	"errors"
	"strconv"
	"strings"

	"github.com/retryhost/retryhost/abi"
	"github.com/retryhost/retryhost/plugins/sdk/transform"
)

func init() {
	transform.Register(func(config []byte) (transform.Transform, error) {
		t := &tr{}
		if c := string(config); c != "" {
			key, v, _ := strings.Cut(c, "=")
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 || (key != "garbage" && key != "rooms") {
				return nil, errors.New("config: garbage=N or rooms=N")
			}
			if key == "garbage" {
				t.garbage = n
			} else {
				t.rooms = n
			}
		}
		return t, nil
	})
}

func main() {}

type tr struct{ garbage, rooms, open int }

// Sink keeps the garbage reachable until the next part.
var Sink []byte

func (t *tr) Open(abi.StreamInfo) (transform.Stream, error) {
	if t.rooms > 0 && t.open == t.rooms {
		return nil, transform.ErrNoRoom
	}
	t.open++
	return stream{t}, nil
}

// Static: the preamble is held without a call.
func (t *tr) Static() map[abi.PartKind]abi.PartAction {
	return map[abi.PartKind]abi.PartAction{abi.KindStreamStart: abi.PartHold, abi.KindResponseMeta: abi.PartHold, abi.KindTextStart: abi.PartHold}
}

type stream struct{ t *tr }

func (s stream) Part(p *abi.Part) (abi.Verdict, error) {
	if s.t.garbage > 0 {
		Sink = make([]byte, s.t.garbage)
	}
	if p.Kind != abi.KindTextDelta {
		return abi.Verdict{Action: abi.PartDetach}, nil
	}
	return abi.Verdict{Action: abi.PartHold}, nil
}
func (s stream) End() (abi.Verdict, error) { return abi.Verdict{}, nil }
func (s stream) Close()                    { s.t.open-- }
