package grpcx_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"google.golang.org/grpc/metadata"

	"github.com/idemkit/idemkit/grpcx"
)

// TestKeyFuncConstructorsRefuseBadArguments: a key function built from arguments that can never
// work panics when it is built, with a message naming the constructor, as httpx's key sources do.
// FirstOf accepted a nil KeyFunc (every call then panicked) and no KeyFunc at all (no call ever had
// a key); MetadataKeyFunc accepted an empty or impossible metadata name, and FieldKey an empty field
// name, that no call ever carries: a Required method refused every call, an optional one ran
// unguarded every time (found by a review).
func TestKeyFuncConstructorsRefuseBadArguments(t *testing.T) {
	for _, tc := range []struct {
		name  string
		build func()
		want  string
	}{
		{"FirstOf nil", func() { grpcx.FirstOf(grpcx.MetadataKeyFunc(grpcx.MetadataKey), nil) }, "grpcx: FirstOf: nil KeyFunc"},
		{"FirstOf none", func() { grpcx.FirstOf() }, "grpcx: FirstOf: no KeyFunc"},
		{"MetadataKeyFunc empty", func() { grpcx.MetadataKeyFunc("") }, "grpcx: MetadataKeyFunc: "},
		{"MetadataKeyFunc space", func() { grpcx.MetadataKeyFunc("idempotency key") }, "grpcx: MetadataKeyFunc: "},
		{"MetadataKeyFunc pseudo-header", func() { grpcx.MetadataKeyFunc(":authority") }, "grpcx: MetadataKeyFunc: "},
		{"FieldKey empty", func() { grpcx.FieldKey("") }, "grpcx: FieldKey: "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			defer func() {
				v := recover()
				if msg := fmt.Sprint(v); v == nil || !strings.HasPrefix(msg, tc.want) {
					t.Fatalf("panic %v, want one starting %q", v, tc.want)
				}
			}()
			tc.build()
		})
	}

	// Valid names still build and work: metadata names are compared ignoring case.
	ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs("x-request_id.v2", "k1"))
	for _, name := range []string{"X-Request_ID.v2", "x-request_id.v2"} {
		if k, err := grpcx.FirstOf(grpcx.MetadataKeyFunc(name), grpcx.FieldKey("id"))(ctx, "/s/M", nil); k != "k1" || err != nil {
			t.Fatalf("MetadataKeyFunc(%q): %q, %v", name, k, err)
		}
	}
}
