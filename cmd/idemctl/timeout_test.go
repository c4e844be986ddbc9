package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"strings"
	"testing"
	"time"
)

// silentListener accepts connections and never answers on them, as a hung server does.
func silentListener(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		var conns []net.Conn
		for {
			c, err := ln.Accept()
			if err != nil {
				for _, c := range conns {
					_ = c.Close()
				}
				return
			}
			conns = append(conns, c) // held open, never answered
		}
	}()
	t.Cleanup(func() { _ = ln.Close() })
	return ln.Addr().String()
}

// TestTimeoutSaysSo: a command cut short by --timeout (30s by default, or IDEMCTL_TIMEOUT) said only
// "context deadline exceeded", naming neither the bound nor how to raise it: an operator whose purge
// of a large table, or whose slow database, outlasted it could not tell idemctl's own limit from the
// database's or Redis's. The error now says that --timeout ran out, in text and in --json.
func TestTimeoutSaysSo(t *testing.T) {
	f := setup(t, "sqlite")
	s := f.populate(t)
	silent := silentListener(t)
	for _, tc := range []struct {
		name string
		env  map[string]string
		argv []string
	}{
		{"database", map[string]string{"IDEMCTL_DB": "mysql://root@tcp(" + silent + ")/test"}, []string{"list", "--timeout", "1s"}},
		{"Redis", map[string]string{"IDEMCTL_REDIS": silent}, []string{"inspect", "--timeout", "1s", scopeA, s.ok}},
		{"environment", map[string]string{"IDEMCTL_REDIS": silent, "IDEMCTL_TIMEOUT": "1s"}, []string{"inspect", "--json", scopeA, s.ok}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := map[string]string{}
			for k, v := range f.env {
				env[k] = v
			}
			for k, v := range tc.env {
				env[k] = v
			}
			var out, errb bytes.Buffer
			start := time.Now()
			code := runEnv(context.Background(), args{argv: tc.argv, stdin: strings.NewReader(""), stdout: &out, stderr: &errb,
				getenv: func(k string) string { return env[k] }, now: time.Now})
			r := result{code, out.String(), errb.String()}
			if code != exitError || time.Since(start) > 5*time.Second {
				t.Fatalf("idemctl %q: %s\nafter %s; want exit 1 within the timeout", tc.argv, r, time.Since(start))
			}
			if !strings.Contains(r.stderr, "--timeout 1s ran out") {
				t.Fatalf("idemctl %q: %s\nwant the error to say that --timeout 1s ran out", tc.argv, r)
			}
			if strings.Contains(strings.Join(tc.argv, " "), "--json") {
				var doc struct {
					Error string `json:"error"`
				}
				if err := json.Unmarshal(out.Bytes(), &doc); err != nil || !strings.Contains(doc.Error, "--timeout 1s ran out") {
					t.Fatalf("--json error document: %s (%v)", r.stdout, err)
				}
			}
		})
	}
}

// TestSlowConfirmationIsNoTimeout: an answer "no" given after --timeout has passed (the question is
// not timed) is reported as not confirmed, without a --timeout that ran out.
func TestSlowConfirmationIsNoTimeout(t *testing.T) {
	f := setup(t, "sqlite")
	s := f.populate(t)
	in := &answerAfter{r: strings.NewReader("n\n"), change: func() { time.Sleep(1500 * time.Millisecond) }}
	r := f.want(t, exitRefused, in, []string{"release", "--timeout", "1s", scopeA, s.stuck}, "not confirmed")
	if strings.Contains(r.stderr, "ran out") {
		t.Fatalf("a slow answer was reported as a timeout: %s", r)
	}
}
