package pgddl

import (
	"context"
	"fmt"
	"sync/atomic"
)

// EncodingCheck remembers that the PostgreSQL sessions of one pool exchange text with the server in
// UTF-8. The driver (pgx) sends text arguments as UTF-8 and reads text results as they come, while the
// server converts both from and to the session's client_encoding — set by the DSN, PGOPTIONS, the
// role's or database's settings, and by default the database's own encoding, as pgx sets none. In
// another encoding a key or gid would be stored altered ("é" as "Ã©" in LATIN1: another instance's "é"
// would be another key, and its "Ã©" this one's "é") or refused (EUC_JP).
//
// The check runs once, before the first statement on the pool; one that failed or refused is not
// kept, so the next statement checks again. Every connection of a pool opens with the same settings;
// a SET client_encoding run by hand on one pooled connection afterwards is not seen. The zero value
// is ready to use.
type EncodingCheck struct{ ok atomic.Bool }

// Check returns nil when the sessions are known to exchange UTF-8, and otherwise asks, with show
// running SHOW of the setting it names on the session about to be used and returning its value: SHOW,
// which, unlike a SELECT, takes no snapshot in a REPEATABLE READ transaction it is the first statement
// of. It accepts client_encoding UTF8, and SQL_ASCII (no conversion) on a UTF8 or SQL_ASCII database.
// It returns show's error, wrapped, or one naming client_encoding and how to set it.
func (e *EncodingCheck) Check(ctx context.Context, show func(ctx context.Context, setting string) (string, error)) error {
	if e.ok.Load() {
		return nil
	}
	client, err := show(ctx, "client_encoding")
	if err != nil {
		return fmt.Errorf("reading the session's client_encoding: %w", err)
	}
	on := ""
	if client == "SQL_ASCII" {
		// A SQL_ASCII session converts nothing: on a UTF8 database the server checks the UTF-8 bytes
		// and reads them back unchanged, as a UTF8 session's (on a SQL_ASCII one it stores them as they
		// are, as a UTF8 session's too). On a database in another encoding it would store them
		// unconverted, where a UTF8 session's are converted: another key.
		server, err := show(ctx, "server_encoding")
		if err != nil {
			return fmt.Errorf("reading the database's server_encoding: %w", err)
		}
		if server == "UTF8" || server == "SQL_ASCII" {
			client = "UTF8"
		}
		on = " on a database in " + server
	}
	if client != "UTF8" {
		return fmt.Errorf("the PostgreSQL session's client_encoding is %s%s: the driver sends and reads text as "+
			"UTF-8, and the server would take it as %s, so a key or gid would be stored altered (\"é\" as \"Ã©\": "+
			"another key than a UTF8 session's \"é\") or refused; set client_encoding=UTF8 in the DSN, or take the "+
			"setting out of PGOPTIONS and the role's and database's settings (ALTER ROLE/DATABASE ... RESET "+
			"client_encoding; a session's default is the database's encoding)", client, on, client)
	}
	e.ok.Store(true)
	return nil
}
