// Package dtmserver builds and runs a real DTM server (github.com/dtm-labs/dtm) as a child process, for
// idemkit's tests and its runnable example.
//
// The server lives in its own module (internal/dtmserver/build) because linking it with idemkit's newer
// gorm breaks its old gorm drivers, and linking it with the client's gRPC packages panics at start
// (duplicate proto registration). [Build] runs `go build` in that module once and caches the binary;
// [Start] runs it on free loopback ports with its boltdb file in a temporary directory (or a kept
// Options.Dir, so a restarted server resumes its transactions); [StartT] does both
// for a test and stops the server when the test ends.
//
// Environment:
//
//	IDEMKIT_DTM_BIN           path of a ready DTM binary; Build returns it without building
//	IDEMKIT_DTM_CACHE         directory for built binaries (default os.UserCacheDir()/idemkit)
//	IDEMKIT_REQUIRE_SERVICES  "1" makes StartT fail instead of skip when the server cannot be built or started
package dtmserver
