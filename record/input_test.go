package record

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/idemtest"
	"gorm.io/gorm"
)

func TestRoundTripEdgeValues(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		s, _ := setup(t, b)
		now := time.Now()
		base := func(key string) *idemkit.Record {
			return &idemkit.Record{Scope: "s", Key: key, Status: idemkit.StatusSucceeded, Fence: 1, Owner: strings.Repeat("o", maxOwner),
				Fingerprint: strings.Repeat("f", maxText), GID: strings.Repeat("g", maxText), BranchID: strings.Repeat("b", maxText),
				LeaseUntil: now, ExpiresAt: now.Add(time.Hour), CreatedAt: now, UpdatedAt: now}
		}
		mib := bytes.Repeat([]byte{0, 0xff, 'a', 0}, 1<<18)
		cases := map[string]func(r *idemkit.Record){
			"max": func(r *idemkit.Record) { r.Scope, r.Key = strings.Repeat("s", 128), strings.Repeat("k", 128) },
			"unicode": func(r *idemkit.Record) {
				r.Scope, r.Key, r.Error = "POST /заказы", "ключ-🔑-"+strings.Repeat("é", 50), "ошибка ✗"
			},
			"zeros": func(r *idemkit.Record) { r.Response = []byte{0, 0, 0} },
			"mib":   func(r *idemkit.Record) { r.Response = mib },
			"nil":   func(r *idemkit.Record) { r.Response = nil },
			"empty": func(r *idemkit.Record) { r.Response = []byte{} },
			"notime": func(r *idemkit.Record) {
				r.LeaseUntil, r.ExpiresAt, r.CreatedAt, r.UpdatedAt = time.Time{}, time.Time{}, time.Time{}, time.Time{}
			},
			"minimal": func(r *idemkit.Record) {
				*r = idemkit.Record{Scope: "s", Key: "minimal", Status: idemkit.StatusProcessing}
			},
		}
		for name, mod := range cases {
			rec := base(name)
			mod(rec)
			must(t, s.Insert(ctxb, rec))
			got, err := s.Get(ctxb, rec.Scope, rec.Key)
			must(t, err)
			idemtest.RequireSameRecord(t, rec, got)
			if len(rec.Response) == 0 && got.Response != nil {
				t.Fatalf("%s: empty response read back as %#v, want nil", name, got.Response)
			}
			if rec.ExpiresAt.IsZero() && !got.ExpiresAt.IsZero() {
				t.Fatalf("%s: zero time read back as %v", name, got.ExpiresAt)
			}
			// Update writes the same values through the other statement.
			next := *got
			next.Response, next.Fence = mib, got.Fence+1
			must(t, s.Update(ctxb, &next, got.Version()))
			got2, err := s.Get(ctxb, rec.Scope, rec.Key)
			must(t, err)
			idemtest.RequireSameRecord(t, &next, got2)
		}
	})
}

func TestRejectsWhatColumnsCannotHold(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		s, db := setup(t, b)
		long := strings.Repeat("x", idemkit.MaxStoredLen+1)
		for name, mod := range map[string]func(r *idemkit.Record){
			"long key":         func(r *idemkit.Record) { r.Key = long },
			"long scope":       func(r *idemkit.Record) { r.Scope = long },
			"empty key":        func(r *idemkit.Record) { r.Key = "" },
			"empty scope":      func(r *idemkit.Record) { r.Scope = "" },
			"long owner":       func(r *idemkit.Record) { r.Owner = strings.Repeat("o", maxOwner+1) },
			"long fingerprint": func(r *idemkit.Record) { r.Fingerprint = long },
			"long gid":         func(r *idemkit.Record) { r.GID = long },
			"long branch":      func(r *idemkit.Record) { r.BranchID = long },
			"long status":      func(r *idemkit.Record) { r.Status = "PROCESSING_FOR_A_WHILE" },
		} {
			rec := &idemkit.Record{Scope: "s", Key: "k", Status: idemkit.StatusProcessing, Fence: 1, Owner: "o"}
			mod(rec)
			err := s.Insert(ctxb, rec)
			if err == nil {
				t.Fatalf("%s: Insert succeeded", name)
			}
			if strings.Contains(name, "key") || strings.Contains(name, "scope") {
				if !errors.Is(err, idemkit.ErrInvalidKey) {
					t.Fatalf("%s: %v, want ErrInvalidKey", name, err)
				}
			}
			if err := s.Update(ctxb, rec, rec.Version()); err == nil || errors.Is(err, idemkit.ErrFenced) {
				t.Fatalf("%s: Update = %v, want a validation error", name, err)
			}
		}
		if err := s.Insert(ctxb, nil); err == nil {
			t.Fatal("Insert(nil) succeeded")
		}
		var n int
		must(t, db.Raw("SELECT count(*) FROM "+s.Table()).Row().Scan(&n))
		if n != 0 {
			t.Fatalf("%d rows stored by rejected inserts", n)
		}
	})
}

func TestCancelledContextIsNotFenced(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		s, _ := setup(t, b)
		rec := &idemkit.Record{Scope: "s", Key: "k", Status: idemkit.StatusProcessing, Fence: 1, Owner: "o"}
		must(t, s.Insert(ctxb, rec))
		ctx, cancel := context.WithCancel(ctxb)
		cancel()
		if err := s.Update(ctx, rec, rec.Version()); !errors.Is(err, context.Canceled) {
			t.Fatalf("Update on a cancelled context = %v, want context.Canceled", err)
		}
		if err := s.Delete(ctx, "s", "k", rec.Version()); !errors.Is(err, context.Canceled) {
			t.Fatalf("Delete on a cancelled context = %v, want context.Canceled", err)
		}
		if _, err := s.DeleteExpired(ctx, time.Now(), 10); !errors.Is(err, context.Canceled) {
			t.Fatalf("DeleteExpired on a cancelled context = %v", err)
		}
	})
}

// TestCallValuesCheckedBeforeRunning: a fingerprint, gid or branch id no Store could hold (too long,
// not UTF-8, a NUL) fails every mode as bad input before the function runs — in Tx mode the record is
// written after it, and a value refused then cost a run (and a 503) on every retry.
func TestCallValuesCheckedBeforeRunning(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		s, db := setup(t, b)
		g, err := idemkit.New(s, nil)
		must(t, err)
		long := strings.Repeat("f", idemkit.MaxStoredLen+1)
		for name, call := range map[string]idemkit.Call{
			"long fingerprint":   {Fingerprint: long},
			"binary fingerprint": {Fingerprint: string([]byte{0xde, 0xad, 0xbe, 0xef})},
			"nul gid":            {GID: "g\x00"},
			"long branch":        {BranchID: long},
		} {
			call.Scope, call.Key = "s", name
			ran := 0
			fn := func(context.Context) ([]byte, error) { ran++; return []byte("v"), nil }
			check := func(mode string, err error) {
				t.Helper()
				if !errors.Is(err, idemkit.ErrUnstorable) || errors.Is(err, idemkit.ErrStoreUnavailable) || ran != 0 {
					t.Fatalf("%s, %s: ran %d, %v; want ErrUnstorable before running", name, mode, ran, err)
				}
			}
			_, err := g.Do(ctxb, call, fn)
			check("Do", err)
			_, err = s.Tx(ctxb, g, call, func(ctx context.Context, _ *gorm.DB) ([]byte, error) { return fn(ctx) })
			check("Tx", err)
			err = db.Transaction(func(tx *gorm.DB) error {
				_, err := g.DoTx(ctxb, s.WithTx(tx), call, fn)
				return err
			})
			check("DoTx", err)
			if _, err := g.Get(ctxb, "s", name); !errors.Is(err, idemkit.ErrNotFound) {
				t.Fatalf("%s: a record was written: %v", name, err)
			}
		}
	})
}
