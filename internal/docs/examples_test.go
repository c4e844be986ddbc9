package docs

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path"
	"path/filepath"
	"strings"
)

// example is a function of an example file: a godoc Example, or a helper beside one.
type example struct {
	file  string // path relative to the module root, slash-separated
	name  string // ExampleXxx
	start int    // line of its first line (its doc comment's, if any)
	lines []string
}

// quote is a fragment found in an Example: the block's lines are the example's lines
// [at, at+len(block.lines)) of ex.file, up to a uniform indentation.
type quote struct {
	block *block
	ex    *example
	at    int // first quoted line in ex.file
}

// isExampleFile reports whether name is a file of testable examples: example_test.go or
// example_*_test.go.
func isExampleFile(name string) bool {
	return strings.HasPrefix(name, "example") && strings.HasSuffix(name, "_test.go")
}

// examplesIn parses the example files (relative paths) and returns their functions.
func examplesIn(root string, files []string) ([]*example, error) {
	var out []*example
	fset := token.NewFileSet()
	for _, rel := range files {
		src, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(rel)))
		if err != nil {
			return nil, err
		}
		f, err := parser.ParseFile(fset, rel, src, parser.SkipObjectResolution|parser.ParseComments)
		if err != nil {
			return nil, err
		}
		lines := strings.Split(string(src), "\n")
		for _, d := range f.Decls {
			fn, ok := d.(*ast.FuncDecl)
			// Example functions, and the helpers beside them (compiled by go test all the same).
			if !ok || fn.Recv != nil || fn.Body == nil {
				continue
			}
			open, end := fset.Position(fn.Body.Lbrace).Line, fset.Position(fn.Body.Rbrace).Line
			if end-open < 2 {
				continue // no line of its own inside the braces
			}
			// The whole declaration, doc comment included, so a document may quote the Example as a
			// function as well as lines of its body.
			first := fset.Position(fn.Pos()).Line
			if fn.Doc != nil {
				first = fset.Position(fn.Doc.Pos()).Line
			}
			out = append(out, &example{file: rel, name: fn.Name.Name, start: first, lines: lines[first-1 : end]})
		}
	}
	return out, nil
}

// findQuote returns where the fragment b appears in one of the examples, verbatim up to a uniform
// indentation (and trailing spaces), or a problem naming the closest candidate.
func findQuote(b *block, examples []*example) (*quote, *problem) {
	frag := trimBlank(b.lines)
	lead := leadingBlank(b.lines)
	if len(frag) == 0 {
		return nil, &problem{b.file, b.fence, "this ```go block is empty"}
	}
	var best struct {
		ex      *example
		at, n   int // where the longest partial match starts, and how many lines matched
		indent  string
		matched bool
	}
	for _, ex := range examples {
		for i := 0; i+len(frag) <= len(ex.lines); i++ {
			indent, ok := indentFor(ex.lines[i], frag[0])
			if !ok {
				continue
			}
			n := 0
			for n < len(frag) && sameLine(ex.lines[i+n], indent, frag[n]) {
				n++
			}
			if n == len(frag) {
				return &quote{block: &block{file: b.file, fence: b.fence + lead, lines: frag}, ex: ex, at: ex.start + i}, nil
			}
			if n > best.n {
				best.ex, best.at, best.n, best.indent = ex, i, n, indent
			}
		}
	}
	msg := "this ```go block is not a complete file (no package clause) and no function of an " +
		"example*_test.go file holds it verbatim: make it a complete program, or quote an Example"
	if best.ex == nil {
		return nil, &problem{b.file, b.fence, msg + "; no Example contains its first line " + fmt.Sprintf("%q", strings.TrimSpace(frag[0]))}
	}
	want := strings.TrimPrefix(best.ex.lines[best.at+best.n], best.indent)
	return nil, &problem{b.file, b.first() + lead + best.n, fmt.Sprintf(
		"%s; the closest is %s in %s, whose line %d differs here:\n\tblock:   %q\n\tExample: %q",
		msg, best.ex.name, best.ex.file, best.ex.start+best.at+best.n, frag[best.n], want)}
}

// indentFor returns the indentation the example line adds to the fragment line, if the example
// line is the fragment line indented.
func indentFor(exLine, fragLine string) (string, bool) {
	exLine, fragLine = strings.TrimRight(exLine, " \t\r"), strings.TrimRight(fragLine, " \t\r")
	if fragLine == "" || !strings.HasSuffix(exLine, fragLine) {
		return "", false
	}
	indent := exLine[:len(exLine)-len(fragLine)]
	return indent, strings.Trim(indent, " \t") == ""
}

// sameLine reports whether the example line is the fragment line with indent in front (blank
// lines match blank lines).
func sameLine(exLine, indent, fragLine string) bool {
	exLine, fragLine = strings.TrimRight(exLine, " \t\r"), strings.TrimRight(fragLine, " \t\r")
	if fragLine == "" {
		return exLine == ""
	}
	return exLine == indent+fragLine
}

// trimBlank drops blank lines at both ends.
func trimBlank(lines []string) []string {
	lead := leadingBlank(lines)
	lines = lines[lead:]
	for len(lines) > 0 && strings.TrimSpace(lines[len(lines)-1]) == "" {
		lines = lines[:len(lines)-1]
	}
	return lines
}

func leadingBlank(lines []string) int {
	n := 0
	for n < len(lines) && strings.TrimSpace(lines[n]) == "" {
		n++
	}
	return n
}

// exampleFiles lists the example files of the module under root.
func exampleFiles(root string) ([]string, error) {
	return walkModule(root, isExampleFile)
}

// dirOf is the slash-separated directory of a relative file path ("." for the root).
func dirOf(rel string) string { return path.Dir(rel) }
