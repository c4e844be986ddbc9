package barrier

import (
	"errors"
	"net/url"
	"testing"
	"unicode/utf8"
)

// FuzzFromQuery feeds arbitrary query strings to the branch parser: it never panics, and whatever it
// accepts fits DTM's columns and is valid UTF-8; whatever it refuses matches ErrInvalidBranch.
func FuzzFromQuery(f *testing.F) {
	for _, s := range []string{
		"trans_type=saga&gid=g1&branch_id=01&op=action",
		"trans_type=tcc&gid=g&branch_id=01&op=cancel&dtm=http://x",
		"gid=&op=try", "trans_type=%ff&gid=g&branch_id=b&op=o", "%zz", "",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		q, err := url.ParseQuery(raw)
		if err != nil {
			return
		}
		b, err := FromQuery(q)
		if err != nil {
			if !errors.Is(err, ErrInvalidBranch) {
				t.Fatalf("error %v does not match ErrInvalidBranch", err)
			}
			return
		}
		for _, f := range []struct {
			v   string
			max int
		}{{b.TransType, maxTransType}, {b.Gid, maxGid}, {b.BranchID, maxBranchID}, {b.Op, maxOp}} {
			if f.v == "" || len(f.v) > f.max || !utf8.ValidString(f.v) {
				t.Fatalf("accepted field %q from %q", f.v, raw)
			}
		}
		if o := OriginOp(b.Op); o == b.Op {
			t.Fatalf("origin op of %q is itself", b.Op)
		}
		if b.nextBarrierID() != "01" || b.nextBarrierID() != "02" {
			t.Fatal("barrier ids do not count from 01")
		}
	})
}
