package main

import (
	"net/url"
	"testing"
)

// TestPostgresURLWithoutHost: idemctl added connect_timeout to a postgres:// URL by re-encoding it,
// and Go writes a URL without host, user or path without its "//": a URL giving everything in its
// query (postgres://?host=db&dbname=shop, as libpq and psql take it) became "postgres:?...", which
// pgx read as one keyword "postgres:?connect_timeout": idemctl connected to the default socket as
// the OS user and failed (exit 1, "unrecognized configuration parameter"). The URL is now kept as
// given, connect_timeout appended.
func TestPostgresURLWithoutHost(t *testing.T) {
	f := setup(t, "postgres")
	u, err := url.Parse(f.dsn)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("host", u.Hostname())
	if u.Port() != "" {
		q.Set("port", u.Port())
	}
	if u.User != nil {
		q.Set("user", u.User.Username())
		if pw, ok := u.User.Password(); ok {
			q.Set("password", pw)
		}
	}
	q.Set("dbname", u.Path[1:])
	f.env["IDEMCTL_DB"] = "postgres://?" + q.Encode()
	f.populate(t)
	f.want(t, exitOK, nil, []string{"list"}, "POST /orders")
}
