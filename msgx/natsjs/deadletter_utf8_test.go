package natsjs_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/msgx"
	"github.com/idemkit/idemkit/msgx/natsjs"
)

// TestDeadLetterErrorCutOnARuneBoundary: the Idemkit-Error header of a dead letter is cut at 1 KiB.
// It was cut at byte 1024 whatever was there, so an error in a language written outside ASCII lost
// half a character and the header was not UTF-8 (a dead-letter consumer decoding it as text got a
// broken character, or refused it). It is cut before the character that would cross the limit.
func TestDeadLetterErrorCutOnARuneBoundary(t *testing.T) {
	f := setup(t, nil)
	// Two messages whose errors differ by one ASCII byte: whatever comes before the handler's
	// text in the error, one of them has a two-byte character across byte 1024.
	f.publish(t, "long-1", "")
	f.publish(t, "long-2", "")
	h := f.mg.Execute(func(_ context.Context, m *msgx.Message) error {
		pad := strings.Repeat("x", int(m.ID[len(m.ID)-1]-'1')) // "" or "x"
		return idemkit.Permanent(errors.New(pad + strings.Repeat("é", 800)))
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	decided := make(chan struct{}, 2)
	go func() {
		done <- natsjs.Consume(ctx, f.js, f.cons, h, &natsjs.Options{DeadLetterSubject: f.dlq,
			Observe: func(*msgx.Message, msgx.Decision) { decided <- struct{}{} }})
	}()
	<-decided
	<-decided
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	f.drained(t)
	dead := f.dead(t)
	if len(dead) != 2 {
		t.Fatalf("%d dead letters, want 2", len(dead))
	}
	for _, raw := range dead {
		e := raw.Header.Get(natsjs.HeaderError)
		if len(e) > 1024 || len(e) < 1021 {
			t.Errorf("Idemkit-Error of %d bytes, want at most 1024 and no fewer than 1021", len(e))
		}
		if !utf8.ValidString(e) {
			t.Errorf("Idemkit-Error is not UTF-8: it ends in %q", e[len(e)-4:])
		}
	}
}
