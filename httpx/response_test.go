package httpx

import (
	"bytes"
	"net/http/httptest"
	"reflect"
	"testing"
)

func TestResponseRoundTrip(t *testing.T) {
	tests := []storedResponse{
		{status: 201, header: []headerField{add("Content-Type", "application/json"), add("Location", "/o/1"), add("Link", "<a>"), add("Link", "<b>")}, body: []byte(`{"id":1}`)},
		{status: 204},
		{status: 422, body: []byte{0, 1, 2, 0xff}},
		{status: 200, header: []headerField{add("Etag", `"v1"`)}, omitted: true, size: 5 << 20},
		{status: 200, omitted: true, encoded: true, size: 7},
		{status: 999, header: []headerField{add("X-Tab", "a\tb")}},
		{status: 200, header: []headerField{{name: "Vary", clear: true}, add("Vary", "Origin"), {name: "Cache-Control", clear: true}}},
	}
	for _, s := range tests {
		got, err := decodeResponse(s.encode())
		if err != nil {
			t.Fatalf("%+v: %v", s, err)
		}
		if !reflect.DeepEqual(got, s) {
			t.Fatalf("round trip: %+v, want %+v", got, s)
		}
	}
}

func add(name, value string) headerField { return headerField{name: name, value: value} }

// TestDecodeResponseFormat1 reads responses stored before the format had header operations:
// every field is an add.
func TestDecodeResponseFormat1(t *testing.T) {
	b := []byte{1, 0, 201, 1, 2, 1, 'A', 1, 'b', 1, 'C', 1, 'd', 'x'}
	s, err := decodeResponse(b)
	want := storedResponse{status: 201, header: []headerField{add("A", "b"), add("C", "d")}, body: []byte("x")}
	if err != nil || !reflect.DeepEqual(s, want) {
		t.Fatalf("%+v, %v", s, err)
	}
}

func TestDecodeResponseRejects(t *testing.T) {
	good := (&storedResponse{status: 200, header: []headerField{add("A", "b")}, body: []byte("x")}).encode()
	// Statuses in these vectors are below 128, one uvarint byte.
	tests := map[string][]byte{
		"empty":                nil,
		"one byte":             {2},
		"wrong version":        append([]byte{4}, good[1:]...),
		"trailer in format 2":  {2, 0, 101, 1, 2, 1, 'A', 1, 'a'},
		"unknown op in 3":      {3, 0, 101, 1, 3, 1, 'A'},
		"unknown flag":         append([]byte{2, 4}, good[2:]...),
		"v1 encoded flag":      {1, 3, 101, 0, 1},
		"encoded, not omitted": {2, 2, 101, 0},
		"status 99":            {2, 0, 99, 0},
		"status 1000":          {2, 0, 0xe8, 0x07, 0},
		"truncated count":      {2, 0, 101},
		"too many fields":      {2, 0, 101, 0x81, 0x02},
		"missing op":           {2, 0, 101, 1},
		"unknown op":           {2, 0, 101, 1, 3, 1, 'A'},
		"field too long":       {2, 0, 101, 1, 0, 10, 'A'},
		"bad name":             {2, 0, 101, 1, 0, 2, 'A', ' ', 0},
		"bad name in clear":    {2, 0, 101, 1, 1, 2, 'A', ' '},
		"empty name":           {2, 0, 101, 1, 0, 0, 0},
		"CRLF in value":        {2, 0, 101, 1, 0, 1, 'A', 3, 'a', '\r', '\n'},
		"NUL in value":         {2, 0, 101, 1, 0, 1, 'A', 1, 0},
		"v1 CRLF in value":     {1, 0, 101, 1, 1, 'A', 3, 'a', '\r', '\n'},
		"omitted no size":      {2, 1, 101, 0},
		"omitted + rest":       {2, 1, 101, 0, 5, 'x'},
	}
	for name, b := range tests {
		if s, err := decodeResponse(b); err == nil {
			t.Errorf("%s: accepted as %+v", name, s)
		}
	}
}

// TestReplayWrite: a replay applies the stored changes to the headers outer middleware set, drops
// never-replayed fields even if stored (by an older version), sets Idempotent-Replayed, and leaves
// Content-Length to net/http (outer middleware may re-encode the body).
func TestReplayWrite(t *testing.T) {
	s := storedResponse{status: 201, header: []headerField{add("Content-Type", "text/plain"), add("Set-Cookie", "a=b"),
		add("Content-Encoding", "gzip"), add("Content-Length", "99"), add("Proxy-Status", "x"),
		add("Vary", "Origin"), {name: "Cache-Control", clear: true}, add("Cache-Control", "max-age=60"),
		{name: "Expires", clear: true}}, body: []byte("hello")}
	rec := httptest.NewRecorder()
	// Set by outer middleware before the replay, as before the first run.
	rec.Header().Set("Vary", "Accept-Encoding")
	rec.Header().Set("Cache-Control", "no-cache")
	rec.Header().Set("Expires", "0")
	s.write(rec, false)
	h := rec.Header()
	if rec.Code != 201 || rec.Body.String() != "hello" || h.Get("Set-Cookie") != "" || h.Get("Content-Encoding") != "" ||
		h.Get("Content-Length") != "" || h.Get("Proxy-Status") != "" || h.Get(ReplayedHeader) != "true" {
		t.Fatalf("%d %v %q", rec.Code, h, rec.Body)
	}
	if v := h.Values("Vary"); !reflect.DeepEqual(v, []string{"Accept-Encoding", "Origin"}) {
		t.Errorf("Vary %q, want the outer value then the handler's", v)
	}
	if v := h.Values("Cache-Control"); !reflect.DeepEqual(v, []string{"max-age=60"}) {
		t.Errorf("Cache-Control %q, want the handler's replacement", v)
	}
	if v, ok := h["Expires"]; ok {
		t.Errorf("Expires %q, want removed as the handler removed it", v)
	}
	rec = httptest.NewRecorder()
	(&storedResponse{status: 304, body: []byte("x")}).write(rec, false)
	if rec.Code != 304 || rec.Body.Len() != 0 || rec.Header().Get("Content-Length") != "" {
		t.Fatalf("304: %d %v %q", rec.Code, rec.Header(), rec.Body)
	}
}

func FuzzDecodeResponse(f *testing.F) {
	f.Add((&storedResponse{status: 201, header: []headerField{add("Content-Type", "application/json")}, body: []byte(`{}`)}).encode())
	f.Add((&storedResponse{status: 200, header: []headerField{{name: "Vary", clear: true}, add("Vary", "a")}}).encode())
	f.Add((&storedResponse{status: 200, omitted: true, size: 1 << 40}).encode())
	f.Add([]byte{1, 0, 101, 1, 1, 'a', 1, 'b'})
	f.Add([]byte{1, 1, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01})
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := decodeResponse(b)
		if err != nil {
			return
		}
		if s.status < 100 || s.status > 999 || len(s.header) > maxStoredFields {
			t.Fatalf("accepted %+v", s)
		}
		again, err := decodeResponse(s.encode())
		if err != nil || !reflect.DeepEqual(again, s) {
			t.Fatalf("re-encoding %+v: %+v, %v", s, again, err)
		}
		if !s.omitted && !bytes.HasSuffix(b, s.body) {
			t.Fatal("body is not the tail of the input")
		}
		s.write(httptest.NewRecorder(), false) // a decoded response is always writable
	})
}
