package idemkit

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"
)

// Defaults of [Options].
const (
	DefaultLease         = 30 * time.Second
	DefaultTTL           = 24 * time.Hour
	DefaultMaxHold       = 10 * time.Minute
	DefaultFinishTimeout = 5 * time.Second
	DefaultMaxKeyLen     = 255
)

// MaxStoredLen is the longest scope or key stored as is; longer ones (up to [Options.MaxKeyLen]) are
// stored as "sha256:" followed by the hex SHA-256 of the value.
const MaxStoredLen = 128

// Options configure a [Guard]. The zero value works: no lock (database only), fail-closed, defaults
// below. New copies the struct; later changes to it have no effect.
type Options struct {
	// Locker is the lock and result cache in front of the Store (lock.New for Redis, memory.NewLocker
	// in-process). Defaults to none: every call goes to the Store.
	Locker Locker
	// FailOpen makes Locker errors non-fatal: the Guard skips the lock and cache and relies on the
	// Store, which still guarantees one execution. Defaults to false: a Locker error fails the call
	// with ErrLockUnavailable and nothing runs. Store errors always fail the call.
	FailOpen bool
	// Lease is how long a PROCESSING claim is protected before another attempt may take it over.
	// Defaults to DefaultLease (30s). Set it above the function's longest run, or use Watchdog. It
	// counts from when the claim is made, before its write: a claim whose write took longer than a
	// third of it (a stalled database) is made again, at the next fence, before its function runs.
	Lease time.Duration
	// LockTTL is the lock's time to live. Defaults to Lease.
	LockTTL time.Duration
	// TTL is how long a record counts after its claim; afterwards the key is new again and a sweeper
	// may delete it. The Tx modes ([Guard.Tx], [Guard.DoTx]) write their record once the function
	// returned: it counts from that write. A mark written before its function in a transaction
	// ([Guard.TxMark], [Guard.MarkTx]) that the function outlasted counts from the function's end,
	// and so does the record of an Execute or Mark-mode function ([Guard.Do], [Claim.Finish],
	// [Guard.Mark]) that outlasted TTL from its claim (a watchdog holding it, say), or that
	// [Guard.Settle] settled later than that.
	// Defaults to DefaultTTL (24h).
	TTL time.Duration
	// CacheTTL is how long a finished result stays in the Locker's cache, capped by the record's
	// remaining TTL. Defaults to TTL: every result stays cached as long as its record counts, so the
	// cache can vouch that a key it does not hold is new, and Tx mode ([Guard.Tx]) skips the read
	// before its function. A shorter CacheTTL bounds Redis memory (about one result per key finished
	// within it) at the price of that read: one more statement per new key in Tx mode. Negative
	// disables the cache. A Redis that evicts results (maxmemory) breaks the vouching: in Tx mode the
	// next duplicate of an evicted key runs its function (its writes then roll back); set a shorter
	// CacheTTL when Redis may evict. So does a key finished while Redis was unreachable (FailOpen):
	// its call held no lock, and nothing cached its result; and a result Redis refuses to store
	// (larger than its proto-max-bulk-len): every duplicate of that key runs its function.
	CacheTTL time.Duration
	// Watchdog renews the lock and the lease every third of the shorter of LockTTL and Lease (in the Tx
	// modes, whose records have no lease to renew, of LockTTL) while the function runs, up to
	// MaxHold, and cancels the function's context with ErrLockLost when the claim is lost, or half a
	// renewal period before its lease lapses when renewals keep failing or MaxHold has passed (while
	// duplicates are still turned away). In the Tx modes, whose transaction decides the claim, a lock
	// the Locker lost (a Redis restart) is taken again and the function carries on; only a lock
	// another attempt took, or a key finished meanwhile, cancels it. A function so cancelled that
	// returns its context's error answers the call with an error matching ErrLockLost (with the
	// watchdog's reason) and the context's error. Defaults to false.
	Watchdog bool
	// MaxHold caps how long the watchdog keeps a claim alive. Defaults to DefaultMaxHold (10m).
	MaxHold time.Duration
	// FinishTimeout bounds the writes after the function returns; they run on a context that
	// survives the caller's cancellation. (A context that can never be cancelled, such as
	// context.Background(), is used as is, unbounded like every other call made with it.) A finish
	// not written by then (the store too slow, a connection dropped) is written again in the
	// background, fenced on the claim, until the claim's lease ends (a minute at most); the caller gets
	// ErrStoreUnavailable all the same. Defaults to DefaultFinishTimeout (5s).
	FinishTimeout time.Duration
	// Namespace, when set, is prefixed to every scope ("ns/scope") so applications can share a table
	// and a Redis; it must not contain '/', be longer than MaxStoredLen-2 bytes (126) nor start with
	// "sha256:" (every scope would then be stored hashed, see [MaxStoredLen]). Give every application sharing a table its own: a Guard
	// without one stores scopes as they are, so its scope "billing/x" would be namespace "billing"'s
	// scope "x". Defaults to "".
	Namespace string
	// MaxKeyLen is the longest key or scope accepted, in bytes; longer ones fail with ErrInvalidKey.
	// Defaults to DefaultMaxKeyLen (255).
	MaxKeyLen int
	// IsPermanent classifies a function's error: true stores it as REJECTED and replays it, false
	// leaves the record FAILED for a retry. An error marked with [Permanent] is permanent whatever
	// it says (adapters mark the answers they must replay, e.g. grpcx's permanent status codes).
	// Defaults to [IsPermanent].
	IsPermanent func(error) bool
	// Logger receives warnings (fail-open, fenced finishes, store errors) and debug events. Keys are
	// logged as a short hash unless LogKeys is set. Defaults to discarding.
	Logger *slog.Logger
	// LogKeys logs and observes raw keys instead of their hash. Defaults to false.
	LogKeys bool
	// Observer receives every call's outcome, for traces and metrics (see package idemotel).
	// Defaults to none.
	Observer Observer
	// Now is the clock. Defaults to time.Now. Leases and expiry compare times from this clock, so the
	// processes sharing a Store need clocks in reasonable agreement (well under Lease).
	Now func() time.Time
}

func (o *Options) withDefaults() (Options, error) {
	var c Options
	if o != nil {
		c = *o
	}
	lockTTLSet := c.LockTTL != 0 // else it is Lease, checked (and named) as Lease
	c.Lease = cmp.Or(c.Lease, DefaultLease)
	c.LockTTL = cmp.Or(c.LockTTL, c.Lease)
	c.TTL = cmp.Or(c.TTL, DefaultTTL)
	c.CacheTTL = cmp.Or(c.CacheTTL, c.TTL)
	c.MaxHold = cmp.Or(c.MaxHold, DefaultMaxHold)
	c.FinishTimeout = cmp.Or(c.FinishTimeout, DefaultFinishTimeout)
	c.MaxKeyLen = cmp.Or(c.MaxKeyLen, DefaultMaxKeyLen)
	if c.IsPermanent == nil {
		c.IsPermanent = IsPermanent
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	var errs []error
	for _, d := range []struct {
		name  string
		v     time.Duration
		check bool
	}{{"Lease", c.Lease, true}, {"LockTTL", c.LockTTL, lockTTLSet}, {"TTL", c.TTL, true}, {"MaxHold", c.MaxHold, true}, {"FinishTimeout", c.FinishTimeout, true}} {
		if !d.check {
			continue
		}
		if d.v < 0 {
			errs = append(errs, fmt.Errorf("%s must not be negative, got %s", d.name, d.v))
		} else if d.v < time.Millisecond {
			errs = append(errs, fmt.Errorf("%s must be at least 1ms, got %s", d.name, d.v))
		}
	}
	if c.TTL < c.Lease {
		errs = append(errs, fmt.Errorf("TTL (%s) must not be shorter than Lease (%s)", c.TTL, c.Lease))
	}
	if c.MaxKeyLen < 1 {
		errs = append(errs, fmt.Errorf("MaxKeyLen must be positive, got %d", c.MaxKeyLen))
	}
	if c.Namespace != "" {
		if err := ValidateKey(c.Namespace, MaxStoredLen); err != nil {
			errs = append(errs, fmt.Errorf("Namespace: %w", err))
		} else if len(c.Namespace) > MaxStoredLen-2 {
			// "ns/" and a one-byte scope must fit the stored form: every scope would be stored hashed,
			// not under "ns/" (as for the hashed prefix below).
			errs = append(errs, fmt.Errorf("Namespace is %d bytes, longer than %d: with '/' and a scope it exceeds MaxStoredLen (%d), and every scope would be stored hashed", len(c.Namespace), MaxStoredLen-2, MaxStoredLen))
		} else if strings.Contains(c.Namespace, "/") {
			// "a/b" + scope "c" and "a" + scope "b/c" would both be stored as "a/b/c".
			errs = append(errs, fmt.Errorf("Namespace %q contains '/', which separates it from the scope: two namespaces could then share records", c.Namespace))
		} else if strings.HasPrefix(c.Namespace, hashedPrefix) {
			// Every scope would start with it, and StoredForm hashes every such value: no record
			// would be stored under "ns/", where operators' tools look for the namespace's records.
			errs = append(errs, fmt.Errorf("Namespace %q starts with %q, the prefix of hashed stored forms: every scope would be stored hashed", c.Namespace, hashedPrefix))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return Options{}, fmt.Errorf("idemkit: invalid options: %w", err)
	}
	return c, nil
}
