package barrier

import (
	"errors"
	"net/url"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/dtm-labs/client/dtmcli"
	"github.com/dtm-labs/client/dtmcli/dtmimp"
)

// FuzzFromQuery feeds arbitrary query strings to the branch parser and to dtmcli's BarrierFromQuery: it
// never panics; whatever it accepts fits DTM's columns, is valid UTF-8 and is exactly what dtmcli reads
// (so both use the same barrier rows); whatever dtmcli refuses it refuses too, and it refuses more only
// for a value dtmcli would store mangled or cut (not UTF-8, or longer than its column). Every refusal
// matches ErrInvalidBranch.
func FuzzFromQuery(f *testing.F) {
	for _, s := range []string{
		"trans_type=saga&gid=g1&branch_id=01&op=action",
		"trans_type=tcc&gid=g&branch_id=01&op=cancel&dtm=http://x",
		"gid=&op=try", "trans_type=%ff&gid=g&branch_id=b&op=o", "%zz", "",
		"trans_type=tcc&gid=a%3Bb&branch_id=01&op=can%0D%0Acel",
		"trans_type=tcc&gid=%3B&branch_id=01&op=try",
		"trans_type=tcc&gid=%E6%97%A5%00&branch_id=0%3B1&op=try",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		q, err := url.ParseQuery(raw)
		if err != nil {
			return
		}
		theirs, theirErr := dtmcli.BarrierFromQuery(q)
		b, err := FromQuery(q)
		if err != nil {
			if !errors.Is(err, ErrInvalidBranch) {
				t.Fatalf("error %v does not match ErrInvalidBranch", err)
			}
			if theirErr != nil {
				return
			}
			// dtmcli accepted: only a value it would mangle may be refused here.
			mangled := false
			for _, f := range []struct {
				v   string
				max int
			}{{theirs.TransType, maxTransType}, {theirs.Gid, maxGid}, {theirs.BranchID, maxBranchID}, {theirs.Op, maxOp}} {
				mangled = mangled || !utf8.ValidString(f.v) || utf8.RuneCountInString(f.v) > f.max
			}
			if !mangled {
				t.Fatalf("refused %q (%v), which dtmcli reads as %+v", raw, err, theirs)
			}
			return
		}
		if theirErr != nil {
			t.Fatalf("accepted %q as %+v, which dtmcli refuses: %v", raw, b, theirErr)
		}
		if b.TransType != theirs.TransType || b.Gid != theirs.Gid || b.BranchID != theirs.BranchID || b.Op != theirs.Op {
			t.Fatalf("read %q as %+v, dtmcli as %+v", raw, b, theirs)
		}
		for _, f := range []struct {
			v   string
			max int
		}{{b.TransType, maxTransType}, {b.Gid, maxGid}, {b.BranchID, maxBranchID}, {b.Op, maxOp}} {
			if f.v == "" || utf8.RuneCountInString(f.v) > f.max || !utf8.ValidString(f.v) || strings.ContainsAny(f.v, ";\r\n") {
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

// FuzzEscape: escape removes exactly what dtmcli's dtmimp.Escape removes.
func FuzzEscape(f *testing.F) {
	for _, s := range []string{"", "a;b", "\r\n", ";;;", "日;\x00\r", "\xff;"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if got, want := escape(s), dtmimp.Escape(s); got != want {
			t.Fatalf("escape(%q) = %q, dtmcli %q", s, got, want)
		}
	})
}
