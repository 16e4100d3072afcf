package exporter

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"runtime"
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
// each connection a server holds costs (its goroutine, its buffers).
func memInUse() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse + ms.StackInuse
}

// TestConnectionFlood floods Serve on 127.0.0.1 with connections that
// stay open, half idle keep-alives after one request, half that never
// send a byte: it holds at most MaxConns of them, its memory grows by
// about that many connections' worth (25 KiB each), not by the flood's,
// and a scrape after the flood is answered with the process's figures.
func TestConnectionFlood(t *testing.T) {
	x := New(Options{Alive: func(uint32, uint64) bool { return true }})
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
	// MaxConns connections of ~25 KiB on the server side, the flood's
	// sockets on this side (~1 KiB each), 2 MiB of slack for the GC and
	// the runtime; unbounded, the flood takes 1500 x 25 KiB, about 37 MiB.
	after := memInUse()
	t.Logf("memory in use grew %d KiB under %d connections; %d held", (int64(after)-int64(before))>>10, floodConns, lim.open())
	bound := uint64(MaxConns*32<<10 + floodConns*2<<10 + 2<<20)
	assert.LessOrEqual(t, int64(after)-int64(before), int64(bound),
		"memory grew %d KiB under a flood of %d connections", (int64(after)-int64(before))>>10, floodConns)
}
