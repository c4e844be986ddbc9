package record

import (
	"context"

	idemsql "github.com/idemkit/idemkit/sql"
)

// CreateTable creates the record table and its indexes if they do not exist, from the DDL file of
// package github.com/idemkit/idemkit/sql for the Store's dialect, renamed for Options.Table (index
// names are derived from the table name). It is idempotent. DDL commits implicitly on MySQL: call it
// on a Store that is not bound to a transaction. It returns the first failing statement's error.
func (s *Store) CreateTable(ctx context.Context) error {
	ddl, err := s.DDL()
	if err != nil {
		return err
	}
	for _, stmt := range idemsql.Statements(ddl) {
		if _, err := s.c.exec(ctx, stmt); err != nil {
			return s.q.interpretError("creating table", err)
		}
	}
	return nil
}

// DDL returns the statements CreateTable runs, as one text: the records DDL of package
// github.com/idemkit/idemkit/sql for the Store's dialect, renamed for Options.Table.
func (s *Store) DDL() (string, error) {
	ddl, err := idemsql.Records(s.q.dialect)
	if err != nil {
		return "", err
	}
	return s.q.renderDDL(ddl), nil
}
