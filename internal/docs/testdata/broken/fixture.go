// Package broken is the fixture of TestCheckerCatchesBrokenSnippets: README.md holds one snippet of
// each mistake the snippet checker must report, and example_test.go the Example it quotes.
package broken
