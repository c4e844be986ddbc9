package natsjs_test

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idemkit/internal/testsvc/testbroker"
	"github.com/idemkit/idemkit/msgx"
	"github.com/idemkit/idemkit/msgx/natsjs"
)

// publishRaw publishes data with the raw header lines hdrs (each "Key: value"), as a client less strict
// than nats.go's about header keys (the server's and ADR-4's rule: printable ASCII but ':') may.
func publishRaw(t *testing.T, subject string, hdrs []string, data string) {
	t.Helper()
	c, err := net.DialTimeout("tcp", strings.TrimPrefix(testbroker.NATSURL(), "nats://"), 3*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	r := bufio.NewReader(c)
	if _, err := r.ReadString('\n'); err != nil { // INFO
		t.Fatal(err)
	}
	hdr := "NATS/1.0\r\n" + strings.Join(hdrs, "\r\n") + "\r\n\r\n"
	fmt.Fprintf(c, "CONNECT {\"verbose\":false,\"pedantic\":false,\"headers\":true,\"protocol\":1}\r\n")
	fmt.Fprintf(c, "HPUB %s %d %d\r\n%s%s\r\nPING\r\n", subject, len(hdr), len(hdr)+len(data), hdr, data)
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasPrefix(line, "-ERR") {
			t.Fatal(line)
		}
		if strings.HasPrefix(line, "PONG") {
			return
		}
	}
}

// TestDeadLetterKeepsHeadersNatsGoRefuses: a message published by a client less strict than nats.go
// (another language's, the nats CLI) may carry a header key nats.go refuses to publish ("trace/id",
// "user@host": '/', '@' and other separators). Copied as it was onto the dead letter, every publish of
// the copy failed (nats: invalid header key) and the message was redelivered without end, never
// dead-lettered. Such a key is copied with those bytes percent-encoded.
func TestDeadLetterKeepsHeadersNatsGoRefuses(t *testing.T) {
	f := setup(t, &msgx.Options{RetryDelay: 100 * time.Millisecond, MaxRetryDelay: 100 * time.Millisecond})
	publishRaw(t, f.stream+".orders", []string{"Nats-Msg-Id: raw-1", "Kind: perm", "trace/id: abc"}, "order raw-1")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := natsjs.Consume(ctx, f.js, f.cons, f.handler(), &natsjs.Options{DeadLetterSubject: f.dlq}); err != nil {
		t.Fatal(err)
	}
	dead := f.dead(t)
	if len(dead) != 1 {
		t.Fatalf("%d dead letters of a rejected message with header key \"trace/id\", want 1", len(dead))
	}
	if h := dead[0].Header; h.Get("trace%2Fid") != "abc" || h.Get("Kind") != "perm" || h.Get("Idemkit-Orig-Msg-Id") != "raw-1" {
		t.Errorf("dead letter headers %v", h)
	}
	f.drained(t)
}
