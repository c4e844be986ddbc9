package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/glebarez/sqlite"
	"gorm.io/gorm"

	"github.com/idemkit/idemkit/record"
)

// TestSQLitePathIsTakenAsIs: idemctl opened --db sqlite://PATH as the URI "file:PATH", where SQLite
// decodes %XX and ends the path at '#': for a file named "orders%41.db" or "shop#1.db" it opened
// (and created, empty) "ordersA.db" or "shop", and failed with "no record table" — although idemctl
// "opens an existing database only". The path is now the file's, and a missing one is never created.
func TestSQLitePathIsTakenAsIs(t *testing.T) {
	for _, name := range []string{"orders%41.db", "shop#1.db"} {
		dir := t.TempDir()
		path := filepath.Join(dir, name)
		db, err := gorm.Open(sqlite.Open(path), &gorm.Config{})
		if err != nil {
			t.Fatal(err)
		}
		st, err := record.New(db, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := st.CreateTable(context.Background()); err != nil {
			t.Fatal(err)
		}
		if sqlDB, err := db.DB(); err == nil {
			sqlDB.Close()
		}
		var out, errb bytes.Buffer
		if code := run([]string{"list", "--db", "sqlite://" + path}, &out, &errb); code != exitOK {
			t.Errorf("list on %s: exit %d: %s", name, code, errb.String())
		}
		entries, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			if e.Name() != name {
				t.Errorf("idemctl created %q beside %q", e.Name(), name)
			}
		}
	}
}
