package docs

import (
	"fmt"
	"go/ast"
	"go/token"
	"go/types"
	"strings"
)

// errDiscardAllowed are the functions whose error result the docs may drop without a word, as
// errcheck's defaults allow: formatted printing, and writes to in-memory buffers.
var errDiscardAllowed = map[string]bool{
	"fmt.Print": true, "fmt.Printf": true, "fmt.Println": true,
	"fmt.Fprint": true, "fmt.Fprintf": true, "fmt.Fprintln": true,
	"(*bytes.Buffer).Write": true, "(*bytes.Buffer).WriteString": true, "(*bytes.Buffer).WriteByte": true,
	"(*bytes.Buffer).WriteRune": true, "(*strings.Builder).Write": true, "(*strings.Builder).WriteString": true,
	"(*strings.Builder).WriteByte": true, "(*strings.Builder).WriteRune": true,
}

// droppedErrors reports, through report, every place in file (within the lines [from, to]; to 0
// means the whole file) where an error a function returns is dropped silently:
//
//   - a call used as a statement whose results include an error: `store.CreateTable(ctx)`;
//   - an assignment that keeps some results but sends an error to the blank identifier:
//     `db, _ := gorm.Open(...)`.
//
// Dropping an error on purpose is allowed when it is explicit: every result assigned to the blank
// identifier (`_ = f()`, `_, _ = w.Write(b)`). Deferred and go statements are not checked.
func droppedErrors(fset *token.FileSet, file *ast.File, info *types.Info, from, to int, report func(pos token.Pos, msg string)) {
	in := func(n ast.Node) bool {
		l := fset.PositionFor(n.Pos(), false).Line
		return to == 0 || l >= from && l <= to
	}
	ast.Inspect(file, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.ExprStmt:
			call, ok := ast.Unparen(n.X).(*ast.CallExpr)
			if !ok || !in(n) {
				return true
			}
			results := resultTypes(info.TypeOf(call))
			if len(errorIndexes(results)) == 0 || errDiscardAllowed[calleeName(info, call)] {
				return true
			}
			blanks := strings.TrimSuffix(strings.Repeat("_, ", len(results)), ", ")
			report(call.Pos(), fmt.Sprintf("the error %s returns is dropped: handle it, or discard it explicitly with `%s = %s(...)`",
				types.ExprString(call.Fun), blanks, types.ExprString(call.Fun)))
		case *ast.AssignStmt:
			if !in(n) || (n.Tok != token.DEFINE && n.Tok != token.ASSIGN) || allBlank(n.Lhs) {
				return true
			}
			var types_ []types.Type
			switch {
			case len(n.Rhs) == 1 && len(n.Lhs) > 1:
				types_ = resultTypes(info.TypeOf(n.Rhs[0]))
			case len(n.Rhs) == len(n.Lhs):
				for _, r := range n.Rhs {
					types_ = append(types_, info.TypeOf(r))
				}
			}
			for _, i := range errorIndexes(types_) {
				if i < len(n.Lhs) && isBlank(n.Lhs[i]) {
					what := "an error"
					if len(n.Rhs) == 1 {
						if call, ok := ast.Unparen(n.Rhs[0]).(*ast.CallExpr); ok {
							what = "the error " + types.ExprString(call.Fun) + " returns"
						}
					}
					report(n.Lhs[i].Pos(), what+" is assigned to _ and never looked at: handle it (a snippet that handles no error is a bug in the docs)")
				}
			}
		}
		return true
	})
}

// resultTypes flattens a call's type into its results.
func resultTypes(t types.Type) []types.Type {
	switch t := t.(type) {
	case nil:
		return nil
	case *types.Tuple:
		out := make([]types.Type, t.Len())
		for i := range out {
			out[i] = t.At(i).Type()
		}
		return out
	}
	return []types.Type{t}
}

var errorType = types.Universe.Lookup("error").Type()

func errorIndexes(ts []types.Type) []int {
	var out []int
	for i, t := range ts {
		if t != nil && types.Identical(t, errorType) {
			out = append(out, i)
		}
	}
	return out
}

func isBlank(e ast.Expr) bool {
	id, ok := e.(*ast.Ident)
	return ok && id.Name == "_"
}

func allBlank(es []ast.Expr) bool {
	for _, e := range es {
		if !isBlank(e) {
			return false
		}
	}
	return true
}

// calleeName is the full name of the function a call calls ("fmt.Println",
// "(*bytes.Buffer).Write"), or "" when it is not a declared function or method.
func calleeName(info *types.Info, call *ast.CallExpr) string {
	var id *ast.Ident
	switch f := ast.Unparen(call.Fun).(type) {
	case *ast.Ident:
		id = f
	case *ast.SelectorExpr:
		id = f.Sel
	default:
		return ""
	}
	if fn, ok := info.Uses[id].(*types.Func); ok {
		return fn.FullName()
	}
	return ""
}
