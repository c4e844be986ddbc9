package main

import (
	"bytes"
	"context"
	"net"
	"strings"
	"testing"
	"time"
)

// TestSilentDatabaseEndsWithTimeout: a database address that accepts connections and never answers
// (a hung server, a proxy without a backend) held idemctl list on MySQL/MariaDB past --timeout, and
// past SIGTERM, for as long as the connection stayed open: opening the database asked the server's
// version on a context of its own. Every command now ends with --timeout (found by a defect hunt).
func TestSilentDatabaseEndsWithTimeout(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var conns []net.Conn
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns = append(conns, c) // held open, never answered
		}
	}()
	t.Cleanup(func() { _ = ln.Close() })
	for _, db := range []string{"mysql://root@tcp(" + ln.Addr().String() + ")/test", "postgres://postgres@" + ln.Addr().String() + "/test"} {
		done := make(chan result, 1)
		start := time.Now()
		go func() {
			var out, errb bytes.Buffer
			code := runEnv(context.Background(), args{argv: []string{"list", "--db", db, "--timeout", "1s"},
				stdin: strings.NewReader(""), stdout: &out, stderr: &errb, getenv: func(string) string { return "" }, now: time.Now})
			done <- result{code, out.String(), errb.String()}
		}()
		select {
		case r := <-done:
			if r.code != exitError || time.Since(start) > 5*time.Second {
				t.Errorf("list --db %s --timeout 1s: %s\nafter %s; want exit 1 within the timeout", db, r, time.Since(start))
			}
		case <-time.After(10 * time.Second):
			t.Errorf("list --db %s --timeout 1s: still running after 10s", db)
		}
	}
}
