package idemkit

import "strconv"

// Address is where a Guard keeps the record and the lock of one (scope, key): the forms its Store and
// Locker see. Operators' tools use it to find a call's record without reimplementing the namespace and
// hashing rules.
type Address struct {
	// Scope is the stored scope: Options.Namespace + "/" + scope when a namespace is set, replaced by
	// its [HashedForm] when longer than [MaxStoredLen] bytes (see [StoredForm]).
	Scope string
	// Key is the stored key ([StoredForm] of the key).
	Key string
	// LockKey is the key the Guard passes to its Locker for this record.
	LockKey string
}

// Address returns where the Guard keeps the record of scope and key (given as in [Call]). It returns
// an error wrapping ErrInvalidKey when the scope or key is one the Guard would refuse (empty, longer
// than Options.MaxKeyLen, not UTF-8, control characters). It touches no backend.
func (g *Guard) Address(scope, key string) (Address, error) {
	id, err := g.identify(&Call{Scope: scope, Key: key})
	if err != nil {
		return Address{}, err
	}
	return Address{Scope: id.scope, Key: id.key, LockKey: id.lockKey}, nil
}

// LockKey returns the key a Guard passes to its Locker for the record of a stored scope and key (as
// a Store holds them, see [Address]): unambiguous, since it starts with the scope's length.
func LockKey(storedScope, storedKey string) string {
	return strconv.Itoa(len(storedScope)) + ":" + storedScope + ":" + storedKey
}
