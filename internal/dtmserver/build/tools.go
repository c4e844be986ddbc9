//go:build tools

// Package build pins the DTM server version that idemkit's tests and example run.
// It is its own module so the server's old gorm drivers never meet idemkit's.
package build

import _ "github.com/dtm-labs/dtm"
