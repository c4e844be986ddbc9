package broken_test

import (
	"fmt"
	"strconv"
)

func ExampleParse() {
	n, err := strconv.Atoi("42")
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(n)
	m, _ := strconv.Atoi("7")
	fmt.Println(m + 1)
	// Output:
	// 42
	// 8
}
