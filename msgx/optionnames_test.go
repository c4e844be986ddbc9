package msgx_test

import (
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/memory"
	"github.com/idemkit/idemkit/msgx"
)

// TestInvalidOptionErrorsNameWhatWasSet: a RetryDelay above DefaultMaxRetryDelay, MaxRetryDelay left
// unset, was refused as "MaxRetryDelay (1m0s) must not be shorter than RetryDelay": an option the
// caller never set; and a negative RetryDelay was reported with MaxRetryDelay's value beside it (found
// by a defect hunt). MaxRetryDelay now defaults to RetryDelay when that is longer, and each error
// names the option given.
func TestInvalidOptionErrorsNameWhatWasSet(t *testing.T) {
	g, err := idemkit.New(memory.NewStore(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := msgx.New(g, &msgx.Options{RetryDelay: 2 * time.Minute}); err != nil {
		t.Errorf("RetryDelay 2m, MaxRetryDelay unset: %v; want it accepted (the cap follows RetryDelay)", err)
	}
	for _, c := range []struct {
		o         msgx.Options
		name, not string
	}{
		{msgx.Options{RetryDelay: -time.Second}, "RetryDelay must not be negative", "MaxRetryDelay"},
		{msgx.Options{MaxRetryDelay: -time.Second}, "MaxRetryDelay must not be negative", "RetryDelay ("},
		{msgx.Options{RetryDelay: time.Minute, MaxRetryDelay: time.Second}, "MaxRetryDelay (1s) must not be shorter than RetryDelay (1m0s)", "negative"},
	} {
		_, err := msgx.New(g, &c.o)
		if err == nil || !strings.Contains(err.Error(), c.name) || strings.Contains(err.Error(), c.not) {
			t.Errorf("%+v: %v; want an error saying %q and not naming %q", c.o, err, c.name, c.not)
		}
	}
}
