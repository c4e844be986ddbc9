package record

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/internal/testsvc"
)

// TestNewRefusesANonUTF8MB4Connection: the MySQL record table is utf8mb4 and the Store writes its
// text columns as utf8mb4, but the server converts what it reads back to the connection's character
// set. On a connection in another one (a DSN with charset=utf8, the 3-byte utf8mb3, or latin1) a
// fingerprint came back altered ("fp😀" as "fp?", "é" as one latin1 byte): the record no longer
// matched its own payload, and every honest duplicate got ErrPayloadMismatch instead of the stored
// answer; a stored rejection replayed altered, a gid would be asked of DTM altered. New refuses such
// a DSN, as it refuses clientFoundRows; utf8mb4 (the driver's default) and binary read back the
// bytes stored.
func TestNewRefusesANonUTF8MB4Connection(t *testing.T) {
	const fingerprint, message = "fp😀-é-余", "refusé 😢"
	duplicate := func(t *testing.T, s *Store) error {
		g, err := idemkit.New(s, &idemkit.Options{Lease: 10 * time.Second, TTL: time.Hour})
		must(t, err)
		key := testsvc.Name("k-")
		call := idemkit.Call{Scope: "s", Key: key, Fingerprint: fingerprint}
		res, err := g.Do(ctxb, call, func(context.Context) ([]byte, error) { return []byte("v"), nil })
		if err != nil {
			return err
		}
		res, err = g.Do(ctxb, call, mustNotRun)
		if err != nil || !res.Replayed || string(res.Value) != "v" {
			return errors.Join(errors.New("the duplicate was not replayed"), err)
		}
		call.Key += "-rejected"
		if _, err = g.Do(ctxb, call, func(context.Context) ([]byte, error) { return nil, idemkit.Permanent(errors.New(message)) }); err == nil {
			return errors.New("a permanent error answered success")
		}
		_, err = g.Do(ctxb, call, mustNotRun)
		if rej := (*idemkit.RejectedError)(nil); !errors.As(err, &rej) || rej.Message != message {
			return errors.Join(errors.New("the rejection was not replayed as stored"), err)
		}
		return nil
	}
	for _, params := range []string{"&charset=utf8", "&charset=latin1", "&charset=utf8,utf8mb4", "&collation=latin1_swedish_ci",
		// The character set variables themselves, which the driver sets from the DSN as it does any
		// other system variable (found by a defect hunt).
		"&character_set_results=latin1", "&character_set_client=%27latin1%27", "&collation_connection=latin1_swedish_ci"} {
		t.Run("refused"+strings.ReplaceAll(params, "&", " "), func(t *testing.T) {
			db := testsvc.MySQLWith(t, nil, params)
			s, err := New(db, &Options{Table: testsvc.Name("t_cs_")})
			if err == nil {
				testsvc.DropTable(t, db, s.Table())
				must(t, s.CreateTable(ctxb))
				t.Fatalf("New accepted a connection in another character set than utf8mb4; with it: %v", duplicate(t, s))
			}
			if !strings.Contains(err.Error(), "utf8mb4") {
				t.Fatalf("New: %v; want an error naming utf8mb4", err)
			}
			// A transaction of such a gorm.DB bound to a Store of another is refused too.
			s = newTable(t, testsvc.MySQL(t, nil))
			tx := db.Begin()
			defer tx.Rollback()
			if _, err := s.WithTx(tx).Get(ctxb, "s", "k"); err == nil || !strings.Contains(err.Error(), "utf8mb4") {
				t.Fatalf("WithTx on its transaction: Get = %v; want an error naming utf8mb4", err)
			}
		})
	}
	for _, params := range []string{"", "&charset=utf8mb4", "&charset=utf8mb4,utf8", "&collation=utf8mb4_unicode_ci", "&charset=binary",
		"&character_set_results=utf8mb4", "&character_set_results=NULL", "&collation_connection=%27utf8mb4_bin%27"} {
		t.Run("accepted"+strings.ReplaceAll(params, "&", " "), func(t *testing.T) {
			db := testsvc.MySQLWith(t, nil, params)
			s := newTable(t, db)
			if err := duplicate(t, s); err != nil {
				t.Fatal(err)
			}
		})
	}
}
