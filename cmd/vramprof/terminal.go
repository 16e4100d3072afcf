package main

import (
	"io"
	"os"

	"golang.org/x/term"
)

// isTerminalWriter reports whether w is a file on a terminal.
func isTerminalWriter(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && isTerminal(int(f.Fd()))
}

// isTerminal reports whether fd is a terminal.
func isTerminal(fd int) bool { return term.IsTerminal(fd) }
