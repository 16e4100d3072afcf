package snapshot

import (
	"bufio"
	"bytes"
	"io"
	"strconv"
	"testing"

	"github.com/nlpodyssey/gopickle/pickle"
)

func newBufWriter(w io.Writer) *bufio.Writer { return bufio.NewWriter(w) }

func formatUint(v uint64) string { return strconv.FormatUint(v, 10) }

// fromPickle unpickles data with Decode's resolver but without its scan.
func fromPickle(tb testing.TB, data []byte) (any, error) {
	tb.Helper()
	u := pickle.NewUnpickler(bytes.NewReader(data))
	u.FindClass = refuseClass
	return u.Load()
}

// unescape turns \\xNN escapes into bytes.
func unescape(s string) string {
	out, err := strconv.Unquote(`"` + s + `"`)
	if err != nil {
		panic(err)
	}
	return out
}
