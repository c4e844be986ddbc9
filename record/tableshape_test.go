package record

import (
	"strings"
	"testing"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/internal/testsvc"
	idemsql "github.com/idemkit/idemkit/sql"
)

// TestCreateTableRefusesTablesThatCannotDedupe: a record table that exists made by hand can lack
// what deduplication rests on while its key columns are right: on MySQL/MariaDB a unique key on
// exactly (scope, idem_key) (with a plain index every claim's INSERT lands, and two attempts of one
// key both run) and an engine with transactions (on MyISAM or Aria a Tx-mode record stays when its
// transaction rolls back, and the retry is answered with an outcome that never committed); on
// SQLite a unique key comparing bytes (COLLATE NOCASE makes "k1" and "K1" one key, answered with
// each other's results). CreateTable and CheckKeyColumns accepted all three; they refuse them,
// naming the table and the fix.
func TestCreateTableRefusesTablesThatCannotDedupe(t *testing.T) {
	cases := []struct {
		name, backend string
		from, to      string
		want          string // in the error
	}{
		{"plain index", "MariaDB", "PRIMARY KEY (scope, idem_key)", "KEY by_key (scope, idem_key)", "ADD PRIMARY KEY (scope, idem_key)"},
		{"prefix key", "MariaDB", "PRIMARY KEY (scope, idem_key)", "PRIMARY KEY (scope, idem_key(16))", "ADD PRIMARY KEY (scope, idem_key)"},
		{"MyISAM", "MariaDB", "ENGINE=InnoDB", "ENGINE=MyISAM", "ENGINE = InnoDB"},
		{"Aria", "MariaDB", "ENGINE=InnoDB", "ENGINE=Aria", "ENGINE = InnoDB"},
		{"NOCASE", "SQLite", "idem_key    VARCHAR(128) NOT NULL", "idem_key VARCHAR(128) COLLATE NOCASE NOT NULL", "COLLATE NOCASE"},
	}
	for _, b := range backends {
		for _, c := range cases {
			if c.backend != b.name {
				continue
			}
			t.Run(b.name+"/"+c.name, func(t *testing.T) {
				db := b.db(t, nil)
				table := testsvc.Name("t_shape_")
				s, err := New(db, &Options{Table: table})
				must(t, err)
				testsvc.DropTable(t, db, table)
				ddl, err := idemsql.Records(s.Dialect())
				must(t, err)
				if !strings.Contains(ddl, c.from) {
					t.Fatalf("the DDL has no %q", c.from)
				}
				ddl = strings.Replace(ddl, c.from, c.to, 1)
				for _, stmt := range idemsql.Statements(s.q.renderDDL(ddl)) {
					must(t, db.Exec(stmt).Error)
				}
				err = s.CreateTable(ctxb)
				if err == nil {
					// The table's fault, shown.
					must(t, s.Insert(ctxb, &idemkit.Record{Scope: "s", Key: "k1", Status: idemkit.StatusSucceeded, Fence: 1}))
					ierr := s.Insert(ctxb, &idemkit.Record{Scope: "s", Key: "K1", Status: idemkit.StatusProcessing, Fence: 1})
					ierr2 := s.Insert(ctxb, &idemkit.Record{Scope: "s", Key: "k1", Status: idemkit.StatusProcessing, Fence: 1})
					t.Fatalf("CreateTable accepted the table with %s (a second claim of K1: %v; of k1: %v)", c.to, ierr, ierr2)
				}
				for _, want := range []string{table, c.want} {
					if !strings.Contains(err.Error(), want) {
						t.Errorf("CreateTable = %v, want it to name %q", err, want)
					}
				}
				if err2 := s.CheckKeyColumns(ctxb); err2 == nil || err2.Error() != err.Error() {
					t.Errorf("CheckKeyColumns = %v, want %v", err2, err)
				}
			})
		}
	}
}
