package admin_test

import (
	"context"
	"strings"
	"testing"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/admin"
	"github.com/idemkit/idemkit/internal/testsvc"
)

// TestCheckRefusesANonUTF8ClientEncoding: on a PostgreSQL session in LATIN1 (a DSN's
// client_encoding, PGOPTIONS, a role's or database's setting) the server takes the Admin's UTF-8
// filters as LATIN1: idemctl listed no record of scope "é" the application wrote, and showed stored
// keys altered. Check, which idemctl runs before every command, refuses such a session naming
// client_encoding; UTF8 and SQL_ASCII are served.
func TestCheckRefusesANonUTF8ClientEncoding(t *testing.T) {
	ctx := context.Background()
	st, tbl := table(t, testsvc.Postgres(t, nil))
	g, err := idemkit.New(st, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := g.Do(ctx, idemkit.Call{Scope: "é", Key: "k"}, func(context.Context) ([]byte, error) { return []byte("v"), nil }); err != nil {
		t.Fatal(err)
	}
	for _, enc := range []string{"LATIN1", "WIN1252", "SQL_ASCII", "UTF8"} {
		adm, err := admin.New(testsvc.PostgresWith(t, nil, " client_encoding="+enc), &admin.Options{Table: tbl})
		if err != nil {
			t.Fatal(err)
		}
		err = adm.Check(ctx)
		if enc == "UTF8" || enc == "SQL_ASCII" {
			if err != nil {
				t.Fatalf("Check on a %s session: %v", enc, err)
			}
			if n, err := adm.Count(ctx, admin.Filter{Scope: "é"}); err != nil || n != 1 {
				t.Fatalf("Count of scope é on a %s session = %d, %v; want 1", enc, n, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), "client_encoding") {
			n, cerr := adm.Count(ctx, admin.Filter{Scope: "é"})
			t.Fatalf("Check on a %s session = %v (Count of scope é: %d, %v); want an error naming client_encoding", enc, err, n, cerr)
		}
	}
}
