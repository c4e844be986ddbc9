package memory_test

import (
	"testing"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/idemtest"
	"github.com/idemkit/idemkit/memory"
)

var (
	_ idemkit.Store      = (*memory.Store)(nil)
	_ idemkit.Locker     = (*memory.Locker)(nil)
	_ idemtest.Sweepable = (*memory.Store)(nil)
)

func TestStoreConformance(t *testing.T) {
	idemtest.RunStore(t, func(t *testing.T) idemkit.Store { return memory.NewStore() })
}

func TestLockerConformance(t *testing.T) {
	idemtest.RunLocker(t, func(t *testing.T) idemkit.Locker { return memory.NewLocker(nil) })
}

func TestStormWithLockers(t *testing.T) {
	s := memory.NewStore()
	l := memory.NewLocker(nil)
	idemtest.Storm(t, idemtest.StormConfig{
		Stores:  []idemkit.Store{s, s, s},
		Lockers: []idemkit.Locker{l, l, l},
	})
}
