package sql

import (
	"embed"
	"fmt"
	"strings"
)

// FS holds every DDL file of this directory (*.sql).
//
//go:embed *.sql
var FS embed.FS

// RecordsTable is the record table's name in the records_*.sql files.
const RecordsTable = "idemkit_records"

// Dialect returns the canonical dialect name ("mysql", "postgres" or "sqlite") for name, which may be
// a gorm Dialector name or a common alias (mariadb, postgresql, pgx, sqlite3). It returns an error for
// any other name.
func Dialect(name string) (string, error) {
	switch strings.ToLower(name) {
	case "mysql", "mariadb":
		return "mysql", nil
	case "postgres", "postgresql", "pgx":
		return "postgres", nil
	case "sqlite", "sqlite3":
		return "sqlite", nil
	}
	return "", fmt.Errorf("idemkit/sql: unsupported dialect %q (want mysql, postgres or sqlite)", name)
}

// Records returns the DDL of the record table idemkit_records for dialect (see [Dialect] for the
// accepted names), or an error for an unsupported dialect.
func Records(dialect string) (string, error) { return File("records", dialect) }

// File returns the DDL file <table>_<dialect>.sql for dialect (see [Dialect]), or an error when the
// dialect is unsupported or there is no such file.
func File(table, dialect string) (string, error) {
	d, err := Dialect(dialect)
	if err != nil {
		return "", err
	}
	b, err := FS.ReadFile(table + "_" + d + ".sql")
	if err != nil {
		return "", fmt.Errorf("idemkit/sql: no DDL for %s on %s: %w", table, d, err)
	}
	return string(b), nil
}

// Statements splits ddl into its statements: it cuts at each ';' outside single-quoted literals and
// $$-quoted bodies (PostgreSQL's DO blocks), and drops "--" comments outside them (to the end of their
// line) and empty statements; /* */ comments are kept as they are. The results carry no trailing
// semicolon. Statements suits the files of this package; it is not a general SQL parser.
func Statements(ddl string) []string {
	var (
		out            []string
		cur            strings.Builder
		quoted, dollar bool
	)
	flush := func() {
		if s := strings.TrimSpace(cur.String()); s != "" {
			out = append(out, s)
		}
		cur.Reset()
	}
	for i := 0; i < len(ddl); i++ {
		c := ddl[i]
		switch {
		case !quoted && c == '$' && i+1 < len(ddl) && ddl[i+1] == '$':
			dollar = !dollar
			cur.WriteString("$$")
			i++
			continue
		case dollar:
		case c == '\'':
			quoted = !quoted
		case !quoted && c == '-' && i+1 < len(ddl) && ddl[i+1] == '-':
			for i < len(ddl) && ddl[i] != '\n' {
				i++
			}
			c = '\n'
		case !quoted && c == ';':
			flush()
			continue
		}
		cur.WriteByte(c)
	}
	flush()
	return out
}

// Migration returns the statements that upgrade the record table idemkit_records from its v1 layout
// (an AUTO_INCREMENT id primary key) to v2 (primary key (scope, idem_key), one secondary index) on
// dialect (see [Dialect]): the file migrate_v1_to_v2_<dialect>.sql.
func Migration(dialect string) (string, error) { return File("migrate_v1_to_v2", dialect) }
