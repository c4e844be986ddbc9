package natsjs_test

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/idemkit/idemkit/msgx"
	"github.com/idemkit/idemkit/msgx/natsjs"
)

// TestDeadLetterOfATooLargeMessageIsKeptLoudly: a rejected message within the dead letter's own
// headers of the server's max payload cannot be dead-lettered at all (its copy would exceed it even
// without the error), and no copy can be made smaller without losing its data or headers. It is
// kept — redelivered, never terminated — and said so at error level: it was a warning like any
// failed publish, which a retry would cure.
func TestDeadLetterOfATooLargeMessageIsKeptLoudly(t *testing.T) {
	f := setup(t, &msgx.Options{RetryDelay: 100 * time.Millisecond, MaxRetryDelay: 100 * time.Millisecond})
	m := nats.NewMsg(f.stream + ".orders")
	m.Header.Set("Kind", "perm")
	m.Data = []byte(strings.Repeat("x", int(f.nc.MaxPayload())-100))
	if _, err := f.js.PublishMsg(context.Background(), m, f.msgID("huge-1")...); err != nil {
		t.Fatal(err)
	}
	logs := &errorLog{}
	ds := f.run(t, 2, &natsjs.Options{DeadLetterSubject: f.dlq, Logger: slog.New(logs)})
	for i, d := range ds {
		if d.m.ID != "huge-1" || d.d.Outcome != msgx.Rejected || d.m.Attempt != i+1 {
			t.Errorf("decision %d: %v of %s, attempt %d", i, d.d, d.m.ID, d.m.Attempt)
		}
	}
	if n := len(f.dead(t)); n != 0 {
		t.Errorf("%d dead letters, want none (it cannot fit)", n)
	}
	if !logs.has("cannot be dead-lettered") {
		t.Errorf("errors logged: %q, want the message that cannot be dead-lettered", logs.errors())
	}
}

// errorLog is a slog.Handler keeping the messages of error records.
type errorLog struct {
	mu   sync.Mutex
	msgs []string
}

func (l *errorLog) Enabled(context.Context, slog.Level) bool { return true }
func (l *errorLog) WithAttrs([]slog.Attr) slog.Handler       { return l }
func (l *errorLog) WithGroup(string) slog.Handler            { return l }
func (l *errorLog) Handle(_ context.Context, r slog.Record) error {
	if r.Level >= slog.LevelError {
		l.mu.Lock()
		l.msgs = append(l.msgs, r.Message)
		l.mu.Unlock()
	}
	return nil
}

func (l *errorLog) errors() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.msgs...)
}

func (l *errorLog) has(s string) bool {
	for _, m := range l.errors() {
		if strings.Contains(m, s) {
			return true
		}
	}
	return false
}
