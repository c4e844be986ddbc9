package record

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"unicode/utf8"

	"github.com/idemkit/idemkit"
)

// TestErrorTextTheDatabaseRefuses: a permanent error whose text is longer than the stored limit and
// cut inside a multi-byte character, or that holds invalid UTF-8 or a NUL byte, is stored (REJECTED)
// and replayed; the function runs once (issue 11, item 4).
func TestErrorTextTheDatabaseRefuses(t *testing.T) {
	texts := map[string]string{
		"cut in a rune": "x" + strings.Repeat("é", 600), // byte 1024 falls inside an "é"
		"4-byte runes":  "xy" + strings.Repeat("🔑", 300),
		"invalid utf-8": "card declined: \xff\xfe" + strings.Repeat("\xc3", 5),
		"nul byte":      "card\x00declined",
	}
	eachBackend(t, func(t *testing.T, b backend) {
		s, _ := setup(t, b)
		g, err := idemkit.New(s, nil)
		must(t, err)
		for name, text := range texts {
			var runs atomic.Int32
			call := idemkit.Call{Scope: "errtext", Key: name}
			fn := func(context.Context) ([]byte, error) {
				runs.Add(1)
				return nil, idemkit.Permanent(errors.New(text))
			}
			if _, err := g.Do(ctxb, call, fn); !idemkit.IsPermanent(err) {
				t.Fatalf("%s: first call: %v, want the permanent error", name, err)
			}
			_, err := g.Do(ctxb, call, fn)
			var rej *idemkit.RejectedError
			if !errors.As(err, &rej) {
				t.Fatalf("%s: replay: %v, want the stored rejection", name, err)
			}
			if runs.Load() != 1 {
				t.Fatalf("%s: the function ran %d times", name, runs.Load())
			}
			if len(rej.Message) > 1024 || !utf8.ValidString(rej.Message) || strings.ContainsRune(rej.Message, 0) {
				t.Fatalf("%s: stored text of %d bytes, valid UTF-8 %v", name, len(rej.Message), utf8.ValidString(rej.Message))
			}
		}
	})
}

// TestOutcomeTheStoreCannotHoldNeverRunsTwice: a result larger than the MySQL column is refused by the
// Store; the record is finished REJECTED without it (saying why) instead of being left for a second
// run (issue 11, item 4).
func TestOutcomeTheStoreCannotHoldNeverRunsTwice(t *testing.T) {
	s, _ := setup(t, backends[0]) // MariaDB: MEDIUMBLOB holds 16 MiB - 1
	g, err := idemkit.New(s, nil)
	must(t, err)
	var runs atomic.Int32
	call := idemkit.Call{Scope: "huge", Key: "k"}
	fn := func(context.Context) ([]byte, error) {
		runs.Add(1)
		return make([]byte, maxMySQLResult+1), nil
	}
	if _, err := g.Do(ctxb, call, fn); !errors.Is(err, idemkit.ErrUnstorable) {
		t.Fatalf("first call: %v, want ErrUnstorable", err)
	}
	rec, err := s.Get(ctxb, "huge", "k")
	must(t, err)
	if rec.Status != idemkit.StatusRejected || !strings.Contains(rec.Error, "MEDIUMBLOB") {
		t.Fatalf("record %s %q, want REJECTED saying why", rec.Status, rec.Error)
	}
	if _, err := g.Do(ctxb, call, fn); !errors.Is(err, idemkit.ErrRejected) || runs.Load() != 1 {
		t.Fatalf("retry: %v after %d runs, want the stored rejection and one run", err, runs.Load())
	}
	// A fingerprint too long for its column is the caller's bad input, not an outage.
	_, err = g.Do(ctxb, idemkit.Call{Scope: "huge", Key: "fp", Fingerprint: strings.Repeat("f", 129)}, fn)
	if !errors.Is(err, idemkit.ErrUnstorable) || errors.Is(err, idemkit.ErrStoreUnavailable) {
		t.Fatalf("oversize fingerprint: %v", err)
	}
}
