package abi_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/retryhost/retryhost/abi"
)

func TestPolicyHints(t *testing.T) {
	pol := abi.TransformPolicy{Fail: abi.FailClosed, MaxHeldParts: 8}
	v10 := abi.AppendPolicy(nil, &pol)
	for _, tc := range []struct {
		name string
		rec  []byte
		want abi.Hints
	}{
		{"a v1.0 record has no hints", v10, abi.Hints{}},
		{"zero hints", abi.AppendPolicyHints(nil, &pol, &abi.Hints{}), abi.Hints{}},
		{"auto-close and statics", abi.AppendPolicyHints(nil, &pol, &abi.Hints{AutoClose: true,
			Static: map[abi.PartKind]abi.PartAction{abi.KindStreamStart: abi.PartHold, abi.KindFinish: abi.PartPass}}),
			abi.Hints{AutoClose: true, Static: map[abi.PartKind]abi.PartAction{abi.KindStreamStart: abi.PartHold, abi.KindFinish: abi.PartPass}}},
		{"undeclarable statics are left out", abi.AppendPolicyHints(nil, &pol, &abi.Hints{
			Static: map[abi.PartKind]abi.PartAction{abi.KindInvalid: abi.PartHold, abi.KindTextDelta: abi.PartError, abi.KindTextEnd: abi.PartDrop}}),
			abi.Hints{Static: map[abi.PartKind]abi.PartAction{abi.KindTextEnd: abi.PartDrop}}},
		{"unknown flags and a longer tail are ignored (a later minor)",
			append(append(append([]byte{}, v10...), 0xfe, 0xff, 0xff, 0xff, 2, 0, 0, 0, 0xff, 5), 9, 9, 9),
			abi.Hints{Static: map[abi.PartKind]abi.PartAction{abi.KindStreamStart: abi.PartDetach}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, h, err := abi.DecodePolicyHints(tc.rec)
			require.NoError(t, err)
			require.Equal(t, pol, p)
			require.Equal(t, tc.want, h)
			old, err := abi.DecodePolicy(tc.rec)
			require.NoError(t, err, "a v1.0 host reads the same policy and ignores the hints")
			require.Equal(t, pol, old)
		})
	}
}

func TestHintsTable(t *testing.T) {
	h := abi.Hints{Static: map[abi.PartKind]abi.PartAction{abi.KindTextStart: abi.PartHold, abi.KindFinish: abi.PartPass}}
	tab := h.Table()
	require.Equal(t, uint8(abi.PartHold), tab[abi.KindTextStart])
	require.Equal(t, uint8(abi.PartPass), tab[abi.KindFinish])
	require.Equal(t, uint8(abi.StaticCall), tab[abi.KindTextDelta])
	var zero abi.Hints
	ztab := zero.Table()
	for k := range ztab {
		require.Equal(t, uint8(abi.StaticCall), ztab[k], "kind %d", k)
	}
}
