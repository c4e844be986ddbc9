package pgddl

import (
	"errors"
	"fmt"
	"testing"
)

type stateErr string

func (e stateErr) Error() string    { return "pg: " + string(e) }
func (e stateErr) SQLState() string { return string(e) }

func TestLostCreateRace(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{stateErr("23505"), true},
		{fmt.Errorf("creating: %w", stateErr("42P07")), true},
		{stateErr("42710"), true},
		{stateErr("40001"), false},
		{errors.New("23505"), false},
		{nil, false},
	} {
		if got := LostCreateRace(tc.err); got != tc.want {
			t.Errorf("LostCreateRace(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}
