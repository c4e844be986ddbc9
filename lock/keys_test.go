package lock

import (
	"fmt"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
)

// crc16 is CRC-16/XMODEM (polynomial 0x1021, initial value 0), the checksum of Redis Cluster.
func crc16(s string) uint16 {
	var crc uint16
	for i := 0; i < len(s); i++ {
		crc ^= uint16(s[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}

// keySlot is the Redis Cluster slot of key, following the cluster specification: when the key has a
// '{' followed later by a '}' with at least one byte between them, only those bytes are hashed.
func keySlot(key string) int {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	return int(crc16(key)) % 16384
}

func TestKeySlotReference(t *testing.T) {
	// Values from the Redis Cluster specification and CLUSTER KEYSLOT.
	if got := crc16("123456789"); got != 0x31C3 {
		t.Fatalf("crc16(123456789) = %#x, want 0x31c3", got)
	}
	for key, want := range map[string]int{
		"foo": 12182, "bar": 5061, "{user1000}.following": keySlot("user1000"),
		"foo{}{bar}": keySlot("foo{}{bar}"), "foo{{bar}}zap": keySlot("{bar"), "foo{bar}{zap}": keySlot("bar"),
	} {
		if got := keySlot(key); got != want {
			t.Errorf("keySlot(%q) = %d, want %d", key, got, want)
		}
	}
	if keySlot("foo{}{bar}") == keySlot("bar") {
		t.Error("an empty hash tag must hash the whole key")
	}
}

// trickyKeys are keys whose braces, percent signs or emptiness could break a naive hash tag.
var trickyKeys = []string{
	"k", "", "}", "}}", "}x", "x}", "a}b", "{", "{{", "a{b", "{a}", "{}", "a{}b", "x{y}z", "%", "%}", "%%",
	"%7D", "}%", "12:POST /orders:key-1", "ключ{}", strings.Repeat("}{", 64),
}

func TestKeysTagged(t *testing.T) {
	l := &Locker{prefix: DefaultPrefix}
	seen := make(map[string]string)
	for _, key := range trickyKeys {
		k := l.key(key)
		if !strings.HasPrefix(k, DefaultPrefix+"{") || !strings.HasSuffix(k, "}") && !strings.Contains(key, "}") {
			t.Errorf("Redis key of %q = %q, want %s{...}", key, k, DefaultPrefix)
		}
		if tagOf(k) == "" {
			t.Errorf("key %q: Redis key %q has no hash tag", key, k)
		}
		if other, dup := seen[k]; dup {
			t.Errorf("keys %q and %q both map to %q", other, key, k)
		}
		seen[k] = key
		// The key and lock value built together name the same Redis key.
		if k2, v := l.keyAndLock(key, 1234, "tok"); k2 != k || v != "L1234:tok" {
			t.Errorf("keyAndLock(%q) = %q, %q; want %q, L1234:tok", key, k2, v, k)
		}
	}
	// Keys the Locker leaves alone are used verbatim.
	if got := l.key("order-1"); got != "idemkit:{order-1}" {
		t.Errorf("key(order-1) = %q", got)
	}
}

// tagOf returns the hash tag of a Redis key, "" when it has none.
func tagOf(key string) string {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			return key[i+1 : i+1+j]
		}
	}
	return ""
}

func FuzzKeysSameSlot(f *testing.F) {
	for _, k := range trickyKeys {
		f.Add(k)
	}
	l := &Locker{prefix: "app:"}
	f.Fuzz(func(t *testing.T, key string) {
		k := l.key(key)
		if tagOf(k) == "" {
			t.Fatalf("key %q: Redis key %q has no hash tag", key, k)
		}
		// Injective: the key is recoverable from its Redis key.
		if strings.Contains(key, "}") {
			// The tag is a hash of the whole key, which follows it: the tag never stops inside the key.
			if want := fmt.Sprintf("app:{#%016x}%s", fnv64a(key)|1<<63, key); k != want {
				t.Fatalf("key %q: Redis key %q, want %q", key, k, want)
			}
			return
		}
		got := strings.TrimSuffix(strings.TrimPrefix(k, "app:{"), "}")
		if got != key && got != "%"+key {
			t.Fatalf("key %q: Redis key %q does not hold it", key, k)
		}
		if got == "%"+key && key != "" && key[0] != '%' {
			t.Fatalf("key %q escaped needlessly", key)
		}
	})
}

func BenchmarkKeys(b *testing.B) {
	l := &Locker{prefix: DefaultPrefix}
	b.ReportAllocs()
	for b.Loop() {
		_, _ = l.keyAndLock("12:POST /orders:3f2a9c1e-5b7d-4e1a-9c2b-8d7e6f5a4b3c", 1700000000000, "3f2a9c1e5b7d4e1a9c2b8d7e6f5a4b3c")
	}
}

var _ Client = (*redis.Client)(nil)
