package amqp_test

import (
	"context"
	"strings"
	"testing"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/idemkit/idemkit/msgx"
)

// TestByteArrayHeaderIsText: AMQP has two text-like header types, the long string and the byte array
// (what pika sends for a bytes value, the Java client for a byte[]). A byte array value reached
// Message.Header as Go's formatting of a byte slice ("[111 114 100 ...]"): a key taken from it
// (msgx.Options.Key) was not the publisher's, and one of 100 bytes became some 300 characters, past
// the Guard's MaxKeyLen — the message dead-lettered as poison. It is the bytes as text.
func TestByteArrayHeaderIsText(t *testing.T) {
	orderID := "order-" + strings.Repeat("7", 94) // 100 bytes
	f := setup(t, &msgx.Options{Key: func(m *msgx.Message) (string, error) { return m.Header.Get("order-id"), nil }}, nil)
	for _, id := range []string{"m-1", "m-2"} { // two publishes of one order
		p := amqp091.Publishing{MessageId: id, Body: []byte("pay"), Headers: amqp091.Table{"order-id": []byte(orderID)}}
		dc, err := f.pub.PublishWithDeferredConfirmWithContext(context.Background(), "", f.topo.Queue, false, false, p)
		if err != nil {
			t.Fatal(err)
		}
		if ok, err := dc.WaitContext(context.Background()); !ok || err != nil {
			t.Fatalf("publish not confirmed: %v %v", ok, err)
		}
	}
	ds := f.run(t, 2, nil)
	if got := ds[0].m.Header.Get("order-id"); got != orderID {
		t.Errorf("header order-id %q, want %q", got, orderID)
	}
	if ds[0].d.Outcome != msgx.Processed || ds[1].d.Outcome != msgx.Duplicate {
		t.Errorf("outcomes %v, %v; want processed, then duplicate", ds[0].d, ds[1].d)
	}
}

// TestVoidHeaderIsEmpty: a header present without a value (AMQP's void field, what pika sends for
// None and the Java client for null) reached Message.Header as Go's formatting of nil, "<nil>": a
// key taken from it (msgx.Options.Key) was "<nil>" for every such message, so the first ran and
// every later one, whatever its order, was acknowledged as its Duplicate without running. A void
// value is empty text: no key, the message Poison, dead-lettered.
func TestVoidHeaderIsEmpty(t *testing.T) {
	f := setup(t, &msgx.Options{Key: func(m *msgx.Message) (string, error) { return m.Header.Get("order-id"), nil }}, nil)
	for _, id := range []string{"m-1", "m-2"} { // two orders whose publisher lost the order id
		p := amqp091.Publishing{MessageId: id, Body: []byte("pay " + id), Headers: amqp091.Table{"order-id": nil}}
		dc, err := f.pub.PublishWithDeferredConfirmWithContext(context.Background(), "", f.topo.Queue, false, false, p)
		if err != nil {
			t.Fatal(err)
		}
		if ok, err := dc.WaitContext(context.Background()); !ok || err != nil {
			t.Fatalf("publish not confirmed: %v %v", ok, err)
		}
	}
	for _, d := range f.run(t, 2, nil) {
		if v, ok := d.m.Header["order-id"]; !ok || len(v) != 1 || v[0] != "" {
			t.Errorf("header order-id %q, want present and empty", v)
		}
		if d.d.Outcome != msgx.Poison {
			t.Errorf("message %s: %v, want poison (no key)", d.m.ID, d.d)
		}
	}
	f.eventually(t, f.topo.DeadLetterQueue, 2)
}
