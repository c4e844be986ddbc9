package msgx_test

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/idemkit/idemkit/msgx"
)

// TestKeyOrFingerprintPanicIsPoison: Options.Key and Options.Fingerprint run on the adapter's worker,
// outside the handler's recovery: one that panicked on a malformed message (a key read from the
// payload) took the consumer's process down, and the redelivery the next one, without end. The
// message cannot be guarded: it is Poison, dead-lettered and never run, the panic in its error.
func TestKeyOrFingerprintPanicIsPoison(t *testing.T) {
	orderID := func(m *msgx.Message) string {
		var v map[string]any
		_ = json.Unmarshal(m.Data, &v)
		return v["order"].(string) // panics on a message without an order
	}
	for name, opts := range map[string]*msgx.Options{
		"Key":         {Key: func(m *msgx.Message) (string, error) { return orderID(m), nil }},
		"Fingerprint": {Fingerprint: orderID},
	} {
		t.Run(name, func(t *testing.T) {
			f := newExec(t, nil, opts)
			var d msgx.Decision
			func() {
				defer func() {
					if v := recover(); v != nil {
						t.Fatalf("the %s function's panic reached the adapter: %v", name, v)
					}
				}()
				d = f.handle(msg("no-order"), nil) // Data {"id":1}: no "order"
			}()
			want(t, d, msgx.DeadLetter, msgx.Poison)
			var pe *msgx.PanicError
			if !errors.As(d.Err, &pe) {
				t.Errorf("decision error %v, want a *msgx.PanicError", d.Err)
			}
			if name == "Key" && !errors.Is(d.Err, msgx.ErrNoKey) {
				t.Errorf("decision error %v, want ErrNoKey", d.Err)
			}
			if n := f.runs.Load(); n != 0 {
				t.Fatalf("handler ran %d times, want none", n)
			}
		})
	}
}
