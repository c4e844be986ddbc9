// Package netaddr checks the network addresses idemkit's programs (idemctl, the examples) are given
// on their command lines, so that one no dial can use is refused as a bad command line at start
// rather than failing later, as a server that is down would.
package netaddr

import "net"

// ValidPort reports whether port is one a TCP dial can use: a number from 1 to 65535, or a service
// name the system knows (as net.Dial takes it).
func ValidPort(port string) bool {
	n, err := net.LookupPort("tcp", port)
	return err == nil && n > 0
}

// HostPort reports whether addr is host:port with a host and a port ValidPort takes.
func HostPort(addr string) bool {
	host, port, err := net.SplitHostPort(addr)
	return err == nil && host != "" && ValidPort(port)
}
