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

// TestCachedFormat1StillRead: results cached by earlier versions (format 1, without the checksum)
// are still replayed; a format-2 value whose checksum does not match is not.
func TestCachedFormat1StillRead(t *testing.T) {
	v1 := []byte{1, 1, 7, 2, 'f', 'p', 0, 'b', 'o', 'd', 'y'}
	r, err := decodeCached(v1)
	if err != nil || r.Status != StatusSucceeded || r.Fence != 7 || r.Fingerprint != "fp" || string(r.Response) != "body" {
		t.Fatalf("decodeCached(format 1) = %+v, %v", r, err)
	}
	v2 := encodeCached(&Record{Status: StatusSucceeded, Fence: 7, Fingerprint: "fp", Response: []byte("body")})
	for i := range v2 {
		bad := bytes.Clone(v2)
		bad[i] ^= 0x01
		if _, err := decodeCached(bad); err == nil {
			t.Fatalf("a cached value with byte %d changed was accepted", i)
		}
	}
}
