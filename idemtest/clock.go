package idemtest

import (
	"sync"
	"time"
)

// Clock is a manual clock for Options.Now. It starts at a fixed instant and moves only when told.
// It is safe for concurrent use.
type Clock struct {
	mu  sync.Mutex
	now time.Time
}

// NewClock returns a Clock set to 2030-01-01T00:00:00Z.
func NewClock() *Clock { return &Clock{now: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)} }

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock forward by d.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}
