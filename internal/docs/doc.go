// Package docs holds the test that keeps the documentation's code true: every ```go block of the
// module's Markdown files (README.md, docs/*.md, the packages' and examples' READMEs) either is a
// complete Go file, built as a package of its own inside the module, or quotes a godoc Example
// function of an example*_test.go file verbatim, so `go test ./...` compiles it. Either way a
// snippet may not silently drop an error a function returns. See TestSnippets.
package docs
