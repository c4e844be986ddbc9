package idemkit

import (
	"encoding/binary"
	"errors"
	"hash/crc32"
)

// The cached form of a finished record: what a replay needs and nothing else.
//
//	byte 0     format version (2)
//	byte 1     status: 1 SUCCEEDED, 2 REJECTED
//	uvarint    fence
//	uvarint n  + n bytes fingerprint
//	uvarint n  + n bytes error message
//	rest       response
//	4 bytes    CRC-32C (Castagnoli) of all the above, big endian
//
// The checksum keeps a value cut short, altered or written by someone else from being replayed as a
// result. Format 1, the same without it, written by earlier versions, is still read.
const cacheFormat = 2

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

var errBadCache = errors.New("idemkit: malformed cached result")

func encodeCached(r *Record) []byte {
	var st byte
	switch r.Status {
	case StatusSucceeded:
		st = 1
	case StatusRejected:
		st = 2
	default:
		return nil
	}
	b := make([]byte, 0, 2+3*binary.MaxVarintLen64+len(r.Fingerprint)+len(r.Error)+len(r.Response)+4)
	b = append(b, cacheFormat, st)
	b = binary.AppendUvarint(b, uint64(r.Fence))
	b = binary.AppendUvarint(b, uint64(len(r.Fingerprint)))
	b = append(b, r.Fingerprint...)
	b = binary.AppendUvarint(b, uint64(len(r.Error)))
	b = append(b, r.Error...)
	b = append(b, r.Response...)
	return binary.BigEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
}

// decodeCached parses what encodeCached wrote. It never panics on arbitrary input.
func decodeCached(b []byte) (Record, error) {
	var r Record
	if len(b) < 2 {
		return r, errBadCache
	}
	switch b[0] {
	case 1:
	case cacheFormat:
		n := len(b) - 4
		if n < 2 || binary.BigEndian.Uint32(b[n:]) != crc32.Checksum(b[:n], castagnoli) {
			return r, errBadCache
		}
		b = b[:n]
	default:
		return r, errBadCache
	}
	switch b[1] {
	case 1:
		r.Status = StatusSucceeded
	case 2:
		r.Status = StatusRejected
	default:
		return r, errBadCache
	}
	b = b[2:]
	fence, n := binary.Uvarint(b)
	if n <= 0 || fence > 1<<62 {
		return r, errBadCache
	}
	r.Fence = int64(fence)
	b = b[n:]
	var fp, msg []byte
	var ok bool
	if fp, b, ok = cutPrefixed(b); !ok {
		return r, errBadCache
	}
	if msg, b, ok = cutPrefixed(b); !ok {
		return r, errBadCache
	}
	r.Fingerprint, r.Error = string(fp), string(msg)
	if len(b) > 0 {
		r.Response = b
	}
	return r, nil
}

func cutPrefixed(b []byte) (field, rest []byte, ok bool) {
	l, n := binary.Uvarint(b)
	if n <= 0 || l > uint64(len(b)-n) {
		return nil, nil, false
	}
	end := n + int(l)
	return b[n:end], b[end:], true
}
