package idemkit_test

import (
	"errors"
	"testing"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/memory"
)

func TestGuardIsPermanentFollowsTheClassifier(t *testing.T) {
	errInvalid := errors.New("invalid")
	def, err := idemkit.New(memory.NewStore(), nil)
	if err != nil {
		t.Fatal(err)
	}
	custom, err := idemkit.New(memory.NewStore(), &idemkit.Options{IsPermanent: func(err error) bool { return errors.Is(err, errInvalid) }})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		g    *idemkit.Guard
		err  error
		want bool
	}{
		{def, nil, false},
		{def, errInvalid, false},
		{def, idemkit.Permanent(errInvalid), true},
		{custom, errInvalid, true},
		{custom, errors.New("other"), false},
		// A marked error is permanent whatever the classifier says: adapters (grpcx's permanent
		// codes) and businesses mark the answers that must be replayed.
		{custom, idemkit.Permanent(errors.New("other")), true},
		{custom, nil, false},
	} {
		if got := tc.g.IsPermanent(tc.err); got != tc.want {
			t.Errorf("IsPermanent(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}
