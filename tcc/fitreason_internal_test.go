package tcc

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/idemkit/idemkit/hooks"
)

func TestFitReason(t *testing.T) {
	exact := strings.Repeat("é", maxRollbackReason)
	for _, c := range []struct{ in, want string }{
		{"short", "short"},
		{exact, exact},
		{exact + "x", strings.Repeat("é", maxRollbackReason-1) + hooks.ReasonCut},
		{"bad \xff byte", "bad \uFFFD byte"},
	} {
		got := fitReason(c.in)
		if got != c.want || utf8.RuneCountInString(got) > maxRollbackReason {
			t.Errorf("fitReason(%.20q...) = %.20q... (%d characters), want %.20q...", c.in, got, utf8.RuneCountInString(got), c.want)
		}
	}
}
