package httpx

import (
	"context"
	"sync"
	"time"

	"github.com/idemkit/idemkit"
)

// MemoryTokenOptions configure a [MemoryTokenStore]. The zero value works.
type MemoryTokenOptions struct {
	// Now is the clock that expires tokens. Defaults to time.Now.
	Now func() time.Time
}

// MemoryTokenStore is an in-process [TokenStore] for tests and single-process programs: tokens
// vanish with the process. Expired tokens are dropped as they are met and by a sweep every so many
// Puts, so no goroutine is needed. It is safe for concurrent use.
type MemoryTokenStore struct {
	now    func() time.Time
	mu     sync.Mutex
	tokens map[string]memToken
	puts   int
}

type memToken struct {
	value   []byte
	expires time.Time
}

// memSweepEvery is how many Puts pass between sweeps of expired tokens.
const memSweepEvery = 1024

// NewMemoryTokenStore returns an empty MemoryTokenStore configured by opts (nil for defaults).
func NewMemoryTokenStore(opts *MemoryTokenOptions) *MemoryTokenStore {
	s := &MemoryTokenStore{now: time.Now, tokens: make(map[string]memToken)}
	if opts != nil && opts.Now != nil {
		s.now = opts.Now
	}
	return s
}

// Put implements [TokenStore].
func (s *MemoryTokenStore) Put(ctx context.Context, id string, value []byte, ttl time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.puts++; s.puts%memSweepEvery == 0 {
		for k, t := range s.tokens {
			if !now.Before(t.expires) {
				delete(s.tokens, k)
			}
		}
	}
	s.tokens[id] = memToken{value: append([]byte(nil), value...), expires: now.Add(ttl)}
	return nil
}

// Take implements [TokenStore].
func (s *MemoryTokenStore) Take(ctx context.Context, id string) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	t, ok := s.tokens[id]
	if !ok {
		return nil, idemkit.ErrNotFound
	}
	delete(s.tokens, id)
	if !now.Before(t.expires) {
		return nil, idemkit.ErrNotFound
	}
	return t.value, nil
}

// Len returns the number of tokens held, expired ones included.
func (s *MemoryTokenStore) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.tokens)
}
