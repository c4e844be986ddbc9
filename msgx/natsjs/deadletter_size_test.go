package natsjs_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/msgx"
	"github.com/idemkit/idemkit/msgx/natsjs"
)

// TestDeadLetterOfALargeMessageFits: a rejected message whose data and headers were within the
// server's max payload, but not with the dead letter's headers saying why (its Idemkit-Error up to 1
// KiB), was never dead-lettered: the client refused every publish of the copy (maximum payload
// exceeded) and the message was redelivered without end. The error header gives way to the data.
func TestDeadLetterOfALargeMessageFits(t *testing.T) {
	f := setup(t, &msgx.Options{RetryDelay: 100 * time.Millisecond, MaxRetryDelay: 100 * time.Millisecond})
	m := nats.NewMsg(f.stream + ".orders")
	m.Header.Set("Kind", "perm")
	m.Data = []byte(strings.Repeat("x", int(f.nc.MaxPayload())-800))
	if _, err := f.js.PublishMsg(context.Background(), m, f.msgID("big-1")...); err != nil {
		t.Fatal(err)
	}
	long := "order is invalid: " + strings.Repeat("field x is wrong; ", 60) // over 1 KiB: cut to 1 KiB
	h := f.mg.Execute(func(context.Context, *msgx.Message) error { return idemkit.Permanent(errors.New(long)) })
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if err := natsjs.Consume(ctx, f.js, f.cons, h, &natsjs.Options{DeadLetterSubject: f.dlq}); err != nil {
		t.Fatal(err)
	}
	dead := f.dead(t)
	if len(dead) != 1 {
		t.Fatalf("%d dead letters of a rejected message of %d bytes (max payload %d), want 1", len(dead), len(m.Data), f.nc.MaxPayload())
	}
	if string(dead[0].Data) != string(m.Data) || dead[0].Header.Get(natsjs.HeaderOutcome) != "rejected" ||
		!strings.HasPrefix(long, dead[0].Header.Get(natsjs.HeaderError)) {
		t.Errorf("dead letter of %d bytes, headers %v", len(dead[0].Data), dead[0].Header)
	}
	f.drained(t)
}
