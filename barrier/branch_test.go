package barrier

import (
	"errors"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
)

func TestFromQuery(t *testing.T) {
	tests := []struct {
		name    string
		query   string
		wantErr string // substring; "" means success
	}{
		{"complete", "trans_type=saga&gid=g1&branch_id=01&op=action", ""},
		{"missing all", "", "missing trans_type, gid, branch_id, op"},
		{"missing gid and op", "trans_type=tcc&branch_id=01", "missing gid, op"},
		{"empty value", "trans_type=tcc&gid=&branch_id=01&op=try", "missing gid"},
		{"gid too long", "trans_type=tcc&gid=" + strings.Repeat("g", 129) + "&branch_id=01&op=try", "gid longer than 128"},
		{"op too long", "trans_type=tcc&gid=g&branch_id=01&op=" + strings.Repeat("o", 46), "op longer than 45"},
		{"invalid utf8", "trans_type=tcc&gid=%ff&branch_id=01&op=try", "gid not valid UTF-8"},
		{"gid 129 characters", "trans_type=tcc&gid=" + strings.Repeat("%C3%BC", 129) + "&branch_id=01&op=try", "gid longer than 128 characters"},
		{"only escaped characters", "trans_type=tcc&gid=%3B%0D%0A&branch_id=01&op=try", "missing gid"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			q, err := url.ParseQuery(tt.query)
			if err != nil {
				t.Fatal(err)
			}
			b, err := FromQuery(q)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("FromQuery: %v", err)
				}
				if b.TransType != "saga" || b.Gid != "g1" || b.BranchID != "01" || b.Op != "action" {
					t.Fatalf("got %+v", b)
				}
				return
			}
			if !errors.Is(err, ErrInvalidBranch) || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("err = %v, want ErrInvalidBranch containing %q", err, tt.wantErr)
			}
		})
	}
}

// TestFromQueryEscapesAsDTMCli: ';', CR and LF are removed from every field, as dtmcli's
// BarrierFromQuery does, and a gid of 128 characters fits however many bytes it takes.
func TestFromQueryEscapesAsDTMCli(t *testing.T) {
	q := url.Values{"trans_type": {"tc;c"}, "gid": {"a;b\r\nc"}, "branch_id": {"0;1"}, "op": {"can\ncel"}}
	b, err := FromQuery(q)
	if err != nil {
		t.Fatal(err)
	}
	if got := *b; got != (Branch{TransType: "tcc", Gid: "abc", BranchID: "01", Op: "cancel"}) {
		t.Fatalf("got %+v", got)
	}
	cjk := strings.Repeat("日", 128)
	if b, err := FromQuery(url.Values{"trans_type": {"tcc"}, "gid": {cjk}, "branch_id": {"01"}, "op": {"try"}}); err != nil || b.Gid != cjk {
		t.Fatalf("128 characters in 384 bytes: %v", err)
	}
}

// TestNewBranchRefusesDTMEscapedCharacters: a branch built directly may not carry ';', CR or LF (dtmcli
// keys it one way from a query string and another way elsewhere): NewBranch, Validate (so Gorm.Enter and
// Redis.Call) and ValidateGid refuse it with ErrInvalidBranch.
func TestNewBranchRefusesDTMEscapedCharacters(t *testing.T) {
	for _, gid := range []string{"a;b", "a\rb", "a\nb", ";"} {
		if _, err := NewBranch(TransTCC, gid, "01", OpCancel); !errors.Is(err, ErrInvalidBranch) || !strings.Contains(err.Error(), "dtmcli removes") {
			t.Errorf("NewBranch(gid %q): %v, want ErrInvalidBranch", gid, err)
		}
		if err := ValidateGid(gid); !errors.Is(err, ErrInvalidBranch) {
			t.Errorf("ValidateGid(%q): %v", gid, err)
		}
		if err := (&Branch{TransType: TransTCC, Gid: gid, BranchID: "01", Op: OpTry}).Validate(); !errors.Is(err, ErrInvalidBranch) {
			t.Errorf("Validate(gid %q): %v", gid, err)
		}
	}
	for _, f := range [][4]string{{"tc;c", "g", "01", "try"}, {"tcc", "g", "0\n1", "try"}, {"tcc", "g", "01", "tr;y"}} {
		if _, err := NewBranch(f[0], f[1], f[2], f[3]); !errors.Is(err, ErrInvalidBranch) {
			t.Errorf("NewBranch(%q): %v, want ErrInvalidBranch", f, err)
		}
	}
	if err := ValidateGid("ok-" + strings.Repeat("日", 125)); err != nil {
		t.Errorf("ValidateGid of 128 characters: %v", err)
	}
	if err := ValidateGid(""); !errors.Is(err, ErrInvalidBranch) {
		t.Errorf("ValidateGid(\"\"): %v", err)
	}
}

func TestFromRequest(t *testing.T) {
	r := httptest.NewRequest("POST", "/TransOut?gid=g2&trans_type=tcc&branch_id=0101&op=cancel&dtm=x", nil)
	b, err := FromRequest(r)
	if err != nil {
		t.Fatal(err)
	}
	if got := b.String(); got != "tcc g2 0101 cancel" {
		t.Fatalf("String() = %q", got)
	}
	if _, err := FromRequest(httptest.NewRequest("POST", "/TransOut", nil)); !errors.Is(err, ErrInvalidBranch) {
		t.Fatalf("err = %v, want ErrInvalidBranch", err)
	}
	if _, err := FromRequest(nil); !errors.Is(err, ErrInvalidBranch) {
		t.Fatalf("nil request: err = %v", err)
	}
}

func TestOriginOp(t *testing.T) {
	for op, want := range map[string]string{
		OpCancel: OpTry, OpCompensate: OpAction, OpRollback: OpAction,
		OpTry: "", OpConfirm: "", OpAction: "", OpCommit: "", OpMsg: "", "other": "",
	} {
		if got := OriginOp(op); got != want {
			t.Errorf("OriginOp(%q) = %q, want %q", op, got, want)
		}
	}
}

func TestBarrierIDFormat(t *testing.T) {
	b := &Branch{}
	var got []string
	for range 11 {
		got = append(got, b.nextBarrierID())
	}
	want := "01 02 03 04 05 06 07 08 09 10 11" // DTM's fmt.Sprintf("%02d")
	if strings.Join(got, " ") != want {
		t.Fatalf("barrier ids %v, want %s", got, want)
	}
}

func TestOutcomeString(t *testing.T) {
	for o, want := range map[Outcome]string{Proceed: "proceed", Duplicate: "duplicate",
		NullCompensation: "null-compensation", Hanging: "hanging", 0: "Outcome(0)"} {
		if o.String() != want {
			t.Errorf("%d.String() = %q, want %q", int(o), o.String(), want)
		}
	}
}

func TestTableNameValidation(t *testing.T) {
	good := []string{"barrier", "dtm_barrier.barrier", "B_1", "_x.y", strings.Repeat("x", 51), strings.Repeat("s", 63) + ".barrier"}
	bad := []string{"", "a.b.c", "bar rier", "barrier;drop table x", "a`b", `a"b`, "1abc", "a.", ".a",
		"barrier--", strings.Repeat("x", 64),
		strings.Repeat("x", 52), "s." + strings.Repeat("x", 52)} // over 51: its index name would be cut at 63 on PostgreSQL
	for _, name := range good {
		for _, d := range []string{"mysql", "postgres", "sqlite"} {
			if _, err := newDialect(d, name); err != nil {
				t.Errorf("newDialect(%s, %q): %v", d, name, err)
			}
		}
	}
	for _, name := range bad {
		if name == "" {
			continue // empty means the default
		}
		if _, err := newDialect("mysql", name); err == nil {
			t.Errorf("newDialect(mysql, %q) accepted", name)
		}
	}
	if _, err := newDialect("sqlserver", ""); err == nil {
		t.Error("sqlserver accepted")
	}
	d, _ := newDialect("mysql", "")
	if d.table != DefaultTable {
		t.Errorf("mysql default table %q", d.table)
	}
	d, _ = newDialect("sqlite", "")
	if d.table != DefaultSQLiteTable {
		t.Errorf("sqlite default table %q", d.table)
	}
}

func TestSlotTag(t *testing.T) {
	tests := []struct {
		keys     []string
		explicit string
		want     string
		err      bool
	}{
		{keys: []string{"{acct}:1", "{acct}:2"}, want: "acct"},
		{keys: []string{"acct:1"}, want: "acct:1"},
		{keys: []string{"x{}y"}, err: true}, // empty tag: the whole key hashes, and it has braces
		{keys: []string{"acct:1", "acct:2"}, err: true},
		{keys: []string{"{a}:1", "{b}:1"}, err: true},
		{keys: nil, want: "gid-1"},
		{keys: nil, explicit: "t", want: "t"},
		{keys: []string{"{t}:k"}, explicit: "t", want: "t"},
		{keys: []string{"{u}:k"}, explicit: "t", err: true},
		{keys: []string{"a{b}c{d}"}, want: "b"},
	}
	for _, tt := range tests {
		got, err := slotTag(tt.keys, tt.explicit, "gid-1")
		if tt.err {
			if !errors.Is(err, ErrCrossSlot) {
				t.Errorf("slotTag(%q, %q) = %q, %v; want ErrCrossSlot", tt.keys, tt.explicit, got, err)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("slotTag(%q, %q) = %q, %v; want %q", tt.keys, tt.explicit, got, err, tt.want)
		}
	}
}

// TestGIDTag: a call without keys hashes on its gid's own tag, or on the gid, or on a digest of a gid
// whose braces leave neither usable: never a tag Redis Cluster refuses.
func TestGIDTag(t *testing.T) {
	for gid, want := range map[string]string{"gid-1": "gid-1", "{acct7}-x": "acct7", "a{b}c": "b"} {
		if got, err := slotTag(nil, "", gid); err != nil || got != want {
			t.Errorf("slotTag(nil, %q) = %q, %v; want %q", gid, got, err, want)
		}
	}
	for _, gid := range []string{"{}x", "a{b", "x}y"} {
		got, err := slotTag(nil, "", gid)
		if err != nil || !strings.HasPrefix(got, "gid#") || got != gidTag(gid) || got == gidTag(gid+"z") {
			t.Errorf("slotTag(nil, %q) = %q, %v; want a digest of the gid", gid, got, err)
		}
	}
}
