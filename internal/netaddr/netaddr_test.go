package netaddr

import "testing"

func TestHostPort(t *testing.T) {
	for addr, want := range map[string]bool{
		"db:3306": true, "127.0.0.1:6379": true, "[::1]:1": true, "h:http": true, "h:65535": true,
		":3306": false, "db": false, "db:": false, "db:0": false, "db:65536": false, "db:abc": false, "db:-1": false,
	} {
		if got := HostPort(addr); got != want {
			t.Errorf("HostPort(%q) = %v, want %v", addr, got, want)
		}
	}
}
