package main

import (
	"bytes"
	"strings"
	"testing"
)

// TestPasswordInURLQueryIsHidden: a PostgreSQL URL may carry its password as a query parameter
// (postgres://user@host/db?password=...), which pgx accepts. idemctl hid the password of the
// user:password@ form only: a malformed or unreachable URL's error printed the query's password in
// clear on stderr (and into whatever logs a script's output goes to).
func TestPasswordInURLQueryIsHidden(t *testing.T) {
	for _, dsn := range []string{
		"postgres://postgres@127.0.0.1:1/x?password=s3cr3t-pw&sslmode=bogus",   // malformed: exit 2
		"postgres://postgres@127.0.0.1:1/x?sslmode=disable&password=s3cr3t-pw", // unreachable: exit 1
	} {
		var out, errb bytes.Buffer
		code := run([]string{"list", "--db", dsn, "--timeout", "5s"}, &out, &errb)
		if code == exitOK {
			t.Fatalf("%s: exit 0", dsn)
		}
		if strings.Contains(out.String()+errb.String(), "s3cr3t-pw") {
			t.Errorf("exit %d, the password is printed:\n%s%s", code, out.String(), errb.String())
		}
	}
}
