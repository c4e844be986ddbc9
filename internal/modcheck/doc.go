// Package modcheck holds a test of the module's layout: the library's go.mod lists only what the
// library's own packages, its examples and their tests need, so `go get github.com/idemkit/idemkit` brings no
// dependency that only a tool (benchmark charts, compose validation) uses. Tools with dependencies of
// their own live in nested modules under tools/.
package modcheck
