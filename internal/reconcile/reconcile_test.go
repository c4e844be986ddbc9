package reconcile

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/idemkit/idemkit"
)

// listing is a pending listing of keys in order, paged by key.
func listing(keys ...string) Lister {
	return func(_ context.Context, after *idemkit.Record, limit int) ([]*idemkit.Record, error) {
		var out []*idemkit.Record
		for _, k := range keys {
			if (after == nil || k > after.Key) && len(out) < limit {
				out = append(out, &idemkit.Record{Key: k})
			}
		}
		return out, nil
	}
}

func TestWalkPagesPastUnsettledAndWraps(t *testing.T) {
	var c Cursor
	list := listing("a", "b", "c", "d", "e", "f", "g", "h", "i", "j")
	var seen []string
	settleOnly := func(keys ...string) func(*idemkit.Record) bool {
		return func(r *idemkit.Record) bool {
			seen = append(seen, r.Key)
			return slices.Contains(keys, r.Key)
		}
	}
	// Pages of 2, 4 pages per walk: a..h looked at, only h settled.
	n, err := c.Walk(context.Background(), list, true, 2, settleOnly("h"))
	if err != nil || n != 1 || fmt.Sprint(seen) != "[a b c d e f g h]" {
		t.Fatalf("first walk: %d, %v, saw %v", n, err, seen)
	}
	// The next walk goes on after h, reaches the end (a short page) and wraps.
	seen = nil
	n, _ = c.Walk(context.Background(), list, true, 2, settleOnly())
	if n != 0 || fmt.Sprint(seen) != "[i j]" {
		t.Fatalf("second walk: %d, saw %v", n, seen)
	}
	seen = nil
	n, _ = c.Walk(context.Background(), list, true, 2, settleOnly("a", "b"))
	if n != 2 || fmt.Sprint(seen) != "[a b]" {
		t.Fatalf("third walk (from the head, stops at limit settled): %d, saw %v", n, seen)
	}
	// A lister that cannot page: one page, from the head, every time.
	seen = nil
	n, _ = c.Walk(context.Background(), list, false, 3, settleOnly())
	if n != 0 || fmt.Sprint(seen) != "[a b c]" {
		t.Fatalf("unpageable walk: %d, saw %v", n, seen)
	}
	// A listing error ends the walk and is returned.
	boom := func(context.Context, *idemkit.Record, int) ([]*idemkit.Record, error) { return nil, fmt.Errorf("boom") }
	if _, err := c.Walk(context.Background(), boom, true, 2, settleOnly()); err == nil {
		t.Fatal("a listing error was not returned")
	}
}

func TestWalkUntilStopsAndResumesAfter(t *testing.T) {
	var c Cursor
	list := listing("a", "b", "c", "d", "e")
	var seen []string
	stopAt := func(key string) func(*idemkit.Record) (bool, bool) {
		return func(r *idemkit.Record) (bool, bool) {
			seen = append(seen, r.Key)
			return false, r.Key == key
		}
	}
	// Pages of 2: the walk stops at c, in its second page, and looks at nothing after it.
	if n, err := c.WalkUntil(context.Background(), list, true, 2, stopAt("c")); n != 0 || err != nil || fmt.Sprint(seen) != "[a b c]" {
		t.Fatalf("first walk: %d, %v, saw %v", n, err, seen)
	}
	// The next goes on after c, and stops at d: the one after that goes on with e, the end of the
	// listing (a short page), and wraps.
	seen = nil
	if _, _ = c.WalkUntil(context.Background(), list, true, 2, stopAt("d")); fmt.Sprint(seen) != "[d]" {
		t.Fatalf("second walk saw %v", seen)
	}
	seen = nil
	if _, _ = c.WalkUntil(context.Background(), list, true, 2, stopAt("e")); fmt.Sprint(seen) != "[e]" {
		t.Fatalf("third walk saw %v", seen)
	}
	seen = nil
	if _, _ = c.WalkUntil(context.Background(), list, true, 2, stopAt("a")); fmt.Sprint(seen) != "[a]" {
		t.Fatalf("fourth walk (from the head) saw %v", seen)
	}
}

func TestSilenceStopsAfterMaxUnansweredInARow(t *testing.T) {
	var s Silence
	for i, answered := range []bool{false, false, true, false, false} {
		if s.Note(answered) {
			t.Fatalf("stopped at record %d with a break in the silence", i)
		}
	}
	if !s.Note(false) || !s.Stop() {
		t.Fatalf("did not stop after %d unanswered records in a row", MaxUnanswered)
	}
	if got := s.Err("p", "M").Error(); got != "p: M did not answer about 3 records in a row: this pass stops here, the next goes on after them" {
		t.Fatalf("Err = %q", got)
	}
}
