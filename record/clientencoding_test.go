package record

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/internal/testsvc"
)

// TestPostgresRefusesANonUTF8ClientEncoding: pgx sends text parameters as UTF-8 and reads text back
// as it comes, but the server converts both from and to the session's client_encoding (set by the DSN,
// PGOPTIONS, ALTER ROLE/DATABASE ... SET, or the database's own encoding). On a LATIN1 or WIN1252
// session key "é" was stored as "Ã©": an instance on such a session and one on a UTF8 session ran the
// same key twice, and one's "Ã©" was answered with the other's "é" result; on EUC_JP valid keys were
// refused as unstorable. The Store checks the session's encoding before its first statement and
// refuses, naming the setting; UTF8 and SQL_ASCII (no conversion) are served.
func TestPostgresRefusesANonUTF8ClientEncoding(t *testing.T) {
	home := testsvc.Postgres(t, nil)
	owner := newTable(t, home)
	g := func(t *testing.T, s *Store) *idemkit.Guard {
		g, err := idemkit.New(s, &idemkit.Options{Lease: 10 * time.Second, TTL: time.Hour})
		must(t, err)
		return g
	}
	utf8 := g(t, owner)
	answer := func(v string) func(context.Context) ([]byte, error) {
		return func(context.Context) ([]byte, error) { return []byte(v), nil }
	}
	for _, enc := range []string{"LATIN1", "WIN1252", "EUC_JP", "SQL_ASCII", "UTF8"} {
		t.Run(enc, func(t *testing.T) {
			other := testsvc.PostgresWith(t, nil, " client_encoding="+enc)
			s, err := New(other, &Options{Table: owner.Table()})
			must(t, err)
			og := g(t, s)
			é, mojibake := "é-"+testsvc.Name(""), "Ã©-"+testsvc.Name("")
			// The same key through a UTF8 instance, then through this one.
			_, err = utf8.Do(ctxb, idemkit.Call{Scope: "s", Key: é}, answer("utf8"))
			must(t, err)
			refused := enc != "UTF8" && enc != "SQL_ASCII"
			res, err := og.Do(ctxb, idemkit.Call{Scope: "s", Key: é}, answer(enc))
			switch {
			case refused && (err == nil || !strings.Contains(err.Error(), "client_encoding")):
				t.Fatalf("Do on a %s session = %q, %v; want an error naming client_encoding", enc, res.Value, err)
			case !refused && (err != nil || !res.Replayed || string(res.Value) != "utf8"):
				t.Fatalf("Do on a %s session = %q (replayed %v), %v; want the UTF8 instance's answer replayed", enc, res.Value, res.Replayed, err)
			}
			// Another key, which only looks like the first one's bytes read as LATIN1.
			res, err = og.Do(ctxb, idemkit.Call{Scope: "s", Key: mojibake}, answer(enc))
			if !refused && (err != nil || res.Replayed || string(res.Value) != enc) {
				t.Fatalf("Do(%q) on a %s session = %q (replayed %v), %v; want its own run", mojibake, enc, res.Value, res.Replayed, err)
			}
			if refused {
				// A transaction of such a gorm.DB bound to the UTF8 Store, and its *sql.Tx, are refused too.
				tx := other.Begin()
				defer tx.Rollback()
				if _, err := owner.WithTx(tx).Get(ctxb, "s", é); err == nil || !strings.Contains(err.Error(), "client_encoding") {
					t.Fatalf("WithTx on a %s transaction: Get = %v; want an error naming client_encoding", enc, err)
				}
				sdb, err := other.DB()
				must(t, err)
				stx, err := sdb.BeginTx(ctxb, nil)
				must(t, err)
				defer stx.Rollback()
				if _, err := owner.WithSQLTx(stx).Get(ctxb, "s", é); err == nil || !strings.Contains(err.Error(), "client_encoding") {
					t.Fatalf("WithSQLTx on a %s transaction: Get = %v; want an error naming client_encoding", enc, err)
				}
			}
		})
	}
	// A check that could not run (here: its caller left) is not kept: the next call checks again.
	s, err := New(home, &Options{Table: owner.Table()})
	must(t, err)
	gone, cancel := context.WithCancel(ctxb)
	cancel()
	if _, err := s.Get(gone, "s", "k"); !errors.Is(err, context.Canceled) {
		t.Fatalf("Get on a cancelled context = %v; want context.Canceled", err)
	}
	if _, err := s.Get(ctxb, "s", "k"); !errors.Is(err, idemkit.ErrNotFound) {
		t.Fatalf("Get after a check that could not run = %v; want ErrNotFound", err)
	}
}

// TestPostgresLatin1Database: pgx sets no client_encoding, so on a database in LATIN1 its sessions
// default to LATIN1 and are refused; a DSN with client_encoding=UTF8 is served (the server converts
// UTF-8 to the database's encoding and back), and SQL_ASCII, which would store the UTF-8 bytes
// unconverted where a UTF8 session's are converted, is refused.
func TestPostgresLatin1Database(t *testing.T) {
	admin := testsvc.Postgres(t, nil)
	name := testsvc.Name("m2_latin1_")
	must(t, admin.Exec("CREATE DATABASE "+name+" ENCODING 'LATIN1' LC_COLLATE 'C' LC_CTYPE 'C' TEMPLATE template0").Error)
	open := func(params string) *gorm.DB {
		db, err := gorm.Open(postgres.Open(testsvc.PostgresDSN()+" dbname="+name+" connect_timeout=3"+params), &gorm.Config{Logger: logger.Discard})
		must(t, err)
		sdb, err := db.DB()
		must(t, err)
		t.Cleanup(func() { _ = sdb.Close() })
		return db
	}
	t.Cleanup(func() { _ = admin.Exec("DROP DATABASE IF EXISTS " + name + " WITH (FORCE)").Error })
	table := testsvc.Name("t_enc_")
	utf8, err := New(open(" client_encoding=UTF8"), &Options{Table: table})
	must(t, err)
	must(t, utf8.CreateTable(ctxb))
	g, err := idemkit.New(utf8, nil)
	must(t, err)
	res, err := g.Do(ctxb, idemkit.Call{Scope: "s", Key: "é"}, func(context.Context) ([]byte, error) { return []byte("v"), nil })
	must(t, err)
	if res, err = g.Do(ctxb, idemkit.Call{Scope: "s", Key: "é"}, mustNotRun); err != nil || !res.Replayed {
		t.Fatalf("duplicate on a UTF8 session = %+v, %v; want a replay", res, err)
	}
	for _, params := range []string{"", " client_encoding=SQL_ASCII"} {
		s, err := New(open(params), &Options{Table: table})
		must(t, err)
		if _, err := s.Get(ctxb, "s", "é"); err == nil || !strings.Contains(err.Error(), "client_encoding") {
			t.Fatalf("Get on a LATIN1 database with%q = %v; want an error naming client_encoding", params, err)
		}
	}
}
