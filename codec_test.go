package idemkit

import (
	"bytes"
	"testing"
	"unicode/utf8"
)

func utf8Valid(s string) bool { return utf8.ValidString(s) }

func TestCachedRoundTrip(t *testing.T) {
	for _, r := range []Record{
		{Status: StatusSucceeded, Fence: 1, Response: []byte(`{"ok":true}`)},
		{Status: StatusSucceeded, Fence: 1 << 40, Fingerprint: "abc", Response: []byte{0, 0, 1}},
		{Status: StatusRejected, Fence: 3, Error: "insufficient funds", Response: []byte("partial")},
		{Status: StatusSucceeded, Fence: 2},
	} {
		b := encodeCached(&r)
		got, err := decodeCached(b)
		if err != nil {
			t.Fatalf("decode(%+v): %v", r, err)
		}
		if got.Status != r.Status || got.Fence != r.Fence || got.Fingerprint != r.Fingerprint || got.Error != r.Error || !bytes.Equal(got.Response, r.Response) {
			t.Fatalf("round trip: got %+v, want %+v", got, r)
		}
	}
	for _, st := range []Status{StatusProcessing, StatusFailed} {
		if encodeCached(&Record{Status: st}) != nil {
			t.Fatalf("%s must never be cached", st)
		}
	}
}

func TestDecodeCachedRejectsGarbage(t *testing.T) {
	for _, b := range [][]byte{nil, {1}, {2, 1, 1}, {1, 9, 1}, {1, 1}, {1, 1, 1, 5, 'a'}, {1, 1, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}} {
		if _, err := decodeCached(b); err == nil {
			t.Fatalf("decodeCached(%v) accepted garbage", b)
		}
	}
}

func FuzzDecodeCached(f *testing.F) {
	f.Add(encodeCached(&Record{Status: StatusSucceeded, Fence: 7, Fingerprint: "fp", Response: []byte("body")}))
	f.Add(encodeCached(&Record{Status: StatusRejected, Fence: 1, Error: "no"}))
	f.Add([]byte{1, 1, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := decodeCached(b)
		if err != nil {
			return
		}
		again, err := decodeCached(encodeCached(&r))
		if err != nil || again.Status != r.Status || again.Fence != r.Fence || again.Fingerprint != r.Fingerprint ||
			again.Error != r.Error || !bytes.Equal(again.Response, r.Response) {
			t.Fatalf("re-encoding %+v gave %+v, %v", r, again, err)
		}
	})
}
