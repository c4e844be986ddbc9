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

// TestStormTx: the Storm in Tx mode (Guard.Tx, one transaction committed per key), as
// internal/integration runs it on MariaDB and PostgreSQL, with and without a Locker: the memory Store's
// transactions lock the keys they touch, as those databases lock rows.
func TestStormTx(t *testing.T) {
	t.Run("Locker", func(t *testing.T) {
		s := memory.NewStore()
		l := memory.NewLocker(nil)
		idemtest.Storm(t, idemtest.StormConfig{Stores: []idemkit.Store{s, s, s}, Lockers: []idemkit.Locker{l, l, l}, Tx: true})
	})
	t.Run("StoreOnly", func(t *testing.T) {
		s := memory.NewStore()
		idemtest.Storm(t, idemtest.StormConfig{Stores: []idemkit.Store{s, s, s}, Tx: true})
	})
}
