package exporter

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"runtime"
	"runtime/pprof"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// floodConns is the connection flood of TestConnectionFlood: over ten
// times MaxConns, well within the test's descriptor limit (each costs one
// here, on the client side).
const floodConns = 1500

// memInUse is the heap and the goroutine stacks in use, after a GC: what
// each connection a server holds costs (its goroutine, its buffers). Only
// logged: it depends on the GC and counts the client's sockets too.
func memInUse() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse + ms.StackInuse
}

// serving counts the goroutines serving an HTTP connection: one per
// connection the server holds.
func serving(t *testing.T) int {
	var buf bytes.Buffer
	require.NoError(t, pprof.Lookup("goroutine").WriteTo(&buf, 2))
	return strings.Count(buf.String(), "net/http.(*conn).serve(")
}

// TestConnectionFlood floods Serve on 127.0.0.1 with connections that
// stay open, half idle keep-alives after one request, half that never
// send a byte: it holds at most MaxConns of them, serves them with at most
// MaxConns goroutines (a goroutine and its buffers, 25 KiB, each), not the
// flood's, and a scrape after the flood is answered with the process's
// figures.
func TestConnectionFlood(t *testing.T) {
	x := New(Options{PerProcess: true, Alive: func(uint32, uint64) bool { return true }})
	feed(t, x, 7, 0, 3)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- x.Serve(ctx, ln, time.Hour) }()
	t.Cleanup(func() { cancel(); <-done })
	addr := ln.Addr().String()
	url := "http://" + addr
	_, ok := value(scrape(t, url), MetricLiveBytes, 7)
	require.True(t, ok)
	http.DefaultClient.CloseIdleConnections()

	before := memInUse()
	conns := make([]net.Conn, 0, floodConns)
	t.Cleanup(func() {
		for _, c := range conns {
			_ = c.Close()
		}
	})
	for i := range floodConns {
		c, err := net.Dial("tcp", addr)
		require.NoError(t, err)
		conns = append(conns, c)
		if i%2 == 1 {
			continue // never sends a byte
		}
		// One request, then the connection idles, kept alive.
		_, err = io.WriteString(c, "GET / HTTP/1.1\r\nHost: flood\r\n\r\n")
		require.NoError(t, err)
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		require.NoError(t, err, "request %d of the flood", i)
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		assert.Equal(t, http.StatusOK, resp.StatusCode)
	}
	// Accepted in order: the scrape's connection comes after every one of
	// the flood's.
	v, ok := value(scrape(t, url), MetricLiveBytes, 7)
	require.True(t, ok, "a scrape under the flood is answered")
	assert.Equal(t, float64(3*MiB), v)
	http.DefaultClient.CloseIdleConnections()

	x.mu.Lock()
	lim := x.limiter
	x.mu.Unlock()
	if assert.NotNil(t, lim) {
		assert.LessOrEqual(t, lim.open(), MaxConns)
	}
	// The evicted connections' goroutines end once they see the close:
	// wait for it. Unbounded, the flood holds 1500.
	deadline := time.Now().Add(30 * time.Second)
	for serving(t) > MaxConns && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	assert.LessOrEqual(t, serving(t), MaxConns, "goroutines serving a connection")
	t.Logf("memory in use grew %d KiB under %d connections; %d held, %d goroutines serving",
		(int64(memInUse())-int64(before))>>10, floodConns, lim.open(), serving(t))
}
