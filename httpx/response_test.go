package httpx

import (
	"bytes"
	"net/http/httptest"
	"reflect"
	"testing"
)

func TestResponseRoundTrip(t *testing.T) {
	tests := []storedResponse{
		{status: 201, header: []headerField{{"Content-Type", "application/json"}, {"Location", "/o/1"}, {"Link", "<a>"}, {"Link", "<b>"}}, body: []byte(`{"id":1}`)},
		{status: 204},
		{status: 422, body: []byte{0, 1, 2, 0xff}},
		{status: 200, header: []headerField{{"Etag", `"v1"`}}, omitted: true, size: 5 << 20},
		{status: 999, header: []headerField{{"X-Tab", "a\tb"}}},
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

func TestDecodeResponseRejects(t *testing.T) {
	good := (&storedResponse{status: 200, header: []headerField{{"A", "b"}}, body: []byte("x")}).encode()
	// Statuses in these vectors are below 128, one uvarint byte.
	tests := map[string][]byte{
		"empty":           nil,
		"one byte":        {1},
		"wrong version":   append([]byte{2}, good[1:]...),
		"unknown flag":    append([]byte{1, 2}, good[2:]...),
		"status 99":       {1, 0, 99, 0},
		"status 1000":     {1, 0, 0xe8, 0x07, 0},
		"truncated count": {1, 0, 101},
		"too many fields": {1, 0, 101, 0x81, 0x02},
		"field too long":  {1, 0, 101, 1, 10, 'A'},
		"bad name":        {1, 0, 101, 1, 2, 'A', ' ', 0},
		"empty name":      {1, 0, 101, 1, 0, 0},
		"CRLF in value":   {1, 0, 101, 1, 1, 'A', 3, 'a', '\r', '\n'},
		"NUL in value":    {1, 0, 101, 1, 1, 'A', 1, 0},
		"omitted no size": {1, 1, 101, 0},
		"omitted + rest":  {1, 1, 101, 0, 5, 'x'},
	}
	for name, b := range tests {
		if s, err := decodeResponse(b); err == nil {
			t.Errorf("%s: accepted as %+v", name, s)
		}
	}
}

// TestReplayWrite: a replay writes the stored fields, drops never-replayed ones even if stored,
// and sets Content-Length and Idempotent-Replayed.
func TestReplayWrite(t *testing.T) {
	s := storedResponse{status: 201, header: []headerField{{"Content-Type", "text/plain"}, {"Set-Cookie", "a=b"}}, body: []byte("hello")}
	rec := httptest.NewRecorder()
	s.write(rec)
	if rec.Code != 201 || rec.Body.String() != "hello" || rec.Header().Get("Set-Cookie") != "" ||
		rec.Header().Get("Content-Length") != "5" || rec.Header().Get(ReplayedHeader) != "true" {
		t.Fatalf("%d %v %q", rec.Code, rec.Header(), rec.Body)
	}
	rec = httptest.NewRecorder()
	(&storedResponse{status: 304, body: []byte("x")}).write(rec)
	if rec.Code != 304 || rec.Body.Len() != 0 || rec.Header().Get("Content-Length") != "" {
		t.Fatalf("304: %d %v %q", rec.Code, rec.Header(), rec.Body)
	}
}

func FuzzDecodeResponse(f *testing.F) {
	f.Add((&storedResponse{status: 201, header: []headerField{{"Content-Type", "application/json"}}, body: []byte(`{}`)}).encode())
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
		s.write(httptest.NewRecorder()) // a decoded response is always writable
	})
}
