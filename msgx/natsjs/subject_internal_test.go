package natsjs

import "testing"

func TestSubjectMatches(t *testing.T) {
	for _, c := range []struct {
		pattern, subject string
		want             bool
	}{
		{"ORDERS.>", "ORDERS.dead", true},
		{"ORDERS.>", "ORDERS.dead.letter", true},
		{"ORDERS.>", "ORDERS", false},
		{"ORDERS.*", "ORDERS.dead", true},
		{"ORDERS.*", "ORDERS.dead.letter", false},
		{"ORDERS.*.x", "ORDERS.a.x", true},
		{"ORDERS.created", "ORDERS.dead", false},
		{">", "DLQ.orders", true},
		{"DLQ", "DLQ", true},
		{"DLQ", "DLQ.orders", false},
	} {
		if got := subjectMatches(c.pattern, c.subject); got != c.want {
			t.Errorf("subjectMatches(%q, %q) = %v, want %v", c.pattern, c.subject, got, c.want)
		}
	}
}
