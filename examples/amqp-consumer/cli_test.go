package main

import (
	"testing"

	"github.com/idemkit/idemkit/examples/internal/cmdtest"
	"github.com/idemkit/idemkit/examples/internal/paydemo/paydemotest"
)

func TestMain(m *testing.M) { cmdtest.Main(m, main) }

// TestCommandLine: the example's command line, as paydemotest.CommandLine describes it.
func TestCommandLine(t *testing.T) { paydemotest.CommandLine(t, "amqp-consumer") }
