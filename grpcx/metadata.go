package grpcx

import (
	"errors"
	"fmt"
	"slices"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/encoding/protowire"
)

// Field numbers of the metadata appended to a stored answer (a google.protobuf.Any or a
// google.rpc.Status, neither of which uses them): each an entry {1: name, 2: value}. A record written
// before they existed has none, and a decoder that does not know them skips them.
const (
	headerField  protowire.Number = 100
	trailerField protowire.Number = 101
)

// errHeaderSent is what a guarded handler gets for setting or sending its header after it sent it,
// as gRPC's own stream answers.
var errHeaderSent = errors.New("grpcx: the header was already sent")

// answerMD stands for the call's stream in a guarded handler's context: it keeps the header and the
// trailer the handler sets (grpc.SetHeader, grpc.SendHeader, grpc.SetTrailer) instead of sending
// them, so that they are stored with the handler's answer and go out only when that answer is the
// call's — not when the handler's writes were rolled back and the call is answered from the record.
type answerMD struct {
	grpc.ServerTransportStream // the call's own stream: its Method

	mu      sync.Mutex
	header  metadata.MD
	trailer metadata.MD
	sent    bool // the handler sent its header (grpc.SendHeader)
}

// SetHeader keeps md for the header.
func (m *answerMD) SetHeader(md metadata.MD) error {
	if md.Len() == 0 {
		return nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.sent {
		return errHeaderSent
	}
	m.header = metadata.Join(m.header, md)
	return nil
}

// SendHeader keeps md for the header and closes it: it goes out with the answer.
func (m *answerMD) SendHeader(md metadata.MD) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.sent {
		return errHeaderSent
	}
	m.header, m.sent = metadata.Join(m.header, md), true
	return nil
}

// SetTrailer keeps md for the trailer.
func (m *answerMD) SetTrailer(md metadata.MD) error {
	if md.Len() == 0 {
		return nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.trailer = metadata.Join(m.trailer, md)
	return nil
}

// kept returns copies of the header and the trailer kept so far, and whether the header was sent.
func (m *answerMD) kept() (header, trailer metadata.MD, sent bool) {
	if m == nil {
		return nil, nil, false
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.header.Copy(), m.trailer.Copy(), m.sent
}

// flush sets what the handler set on the call's own stream: its answer goes out with it.
func (m *answerMD) flush() {
	if m == nil || m.ServerTransportStream == nil {
		return
	}
	header, trailer, sent := m.kept()
	if sent {
		_ = m.ServerTransportStream.SendHeader(header)
	} else {
		_ = m.ServerTransportStream.SetHeader(header)
	}
	_ = m.ServerTransportStream.SetTrailer(trailer)
}

// appendMD appends header's and trailer's entries to a stored answer b, names in order.
func appendMD(b []byte, header, trailer metadata.MD) []byte {
	b = appendEntries(b, headerField, header)
	return appendEntries(b, trailerField, trailer)
}

func appendEntries(b []byte, num protowire.Number, md metadata.MD) []byte {
	names := make([]string, 0, len(md))
	for name := range md {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		for _, v := range md[name] {
			var e []byte
			e = protowire.AppendTag(e, 1, protowire.BytesType)
			e = protowire.AppendString(e, name)
			e = protowire.AppendTag(e, 2, protowire.BytesType)
			e = protowire.AppendString(e, v)
			b = protowire.AppendTag(b, num, protowire.BytesType)
			b = protowire.AppendBytes(b, e)
		}
	}
	return b
}

// splitMD separates a stored answer b into the answer itself and the header and trailer stored with
// it (nil when none were).
func splitMD(b []byte) (answer []byte, header, trailer metadata.MD, err error) {
	answer = b
	found := false
	for rest := b; len(rest) > 0; {
		num, typ, n := protowire.ConsumeTag(rest)
		if n < 0 {
			return nil, nil, nil, fmt.Errorf("grpcx: decoding stored answer: %w", protowire.ParseError(n))
		}
		m := protowire.ConsumeFieldValue(num, typ, rest[n:])
		if m < 0 {
			return nil, nil, nil, fmt.Errorf("grpcx: decoding stored answer: %w", protowire.ParseError(m))
		}
		field := rest[:n+m]
		rest = rest[n+m:]
		if (num != headerField && num != trailerField) || typ != protowire.BytesType {
			continue
		}
		if !found { // the entries follow the answer
			answer, found = slices.Clip(b[:len(b)-len(rest)-len(field)]), true
		}
		name, value, err := decodeEntry(field[n:])
		if err != nil {
			return nil, nil, nil, err
		}
		if num == headerField {
			header = metadata.Join(header, metadata.MD{name: {value}})
		} else {
			trailer = metadata.Join(trailer, metadata.MD{name: {value}})
		}
	}
	return answer, header, trailer, nil
}

// decodeEntry decodes one metadata entry, the length-prefixed value of its field.
func decodeEntry(b []byte) (name, value string, err error) {
	e, n := protowire.ConsumeBytes(b)
	if n < 0 {
		return "", "", fmt.Errorf("grpcx: decoding stored metadata: %w", protowire.ParseError(n))
	}
	for len(e) > 0 {
		num, typ, n := protowire.ConsumeTag(e)
		if n < 0 || typ != protowire.BytesType {
			return "", "", errors.New("grpcx: decoding stored metadata: malformed entry")
		}
		v, m := protowire.ConsumeString(e[n:])
		if m < 0 {
			return "", "", fmt.Errorf("grpcx: decoding stored metadata: %w", protowire.ParseError(m))
		}
		switch num {
		case 1:
			name = v
		case 2:
			value = v
		}
		e = e[n+m:]
	}
	if name == "" {
		return "", "", errors.New("grpcx: decoding stored metadata: entry without a name")
	}
	return name, value, nil
}
