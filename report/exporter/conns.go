package exporter

import (
	"net"
	"net/http"
	"sync"
	"time"
)

// Connection limits of Serve. A node's serve answers a Prometheus scraper
// or two and the odd pprof fetch; each open connection costs a descriptor
// and about 25 KiB (a goroutine, its buffers), so an unbounded number of
// them, idle keep-alives or connections that never send a byte, would
// grow serve's memory and exhaust its descriptors until scrapes fail.
const (
	// MaxConns bounds the connections Serve holds open: about 3 MiB at
	// most. A connection beyond it closes the oldest idle one (a
	// keep-alive between requests, or one that has sent nothing yet);
	// when every one is busy with a request, the new one is closed.
	MaxConns = 128
	// readTimeout bounds reading a request (headers: readHeaderTimeout),
	// writeTimeout writing its response (a big process's profile takes a
	// moment to build and send), idleTimeout a keep-alive between
	// requests (Prometheus scrapes every 15-60 s).
	readHeaderTimeout = 10 * time.Second
	readTimeout       = 30 * time.Second
	writeTimeout      = 2 * time.Minute
	idleTimeout       = 90 * time.Second
)

// connLimiter is a net.Listener that holds at most max connections open,
// closing the oldest idle one to make room (see MaxConns). The server
// tells it each connection's state through track (http.Server.ConnState).
// Safe for concurrent use.
type connLimiter struct {
	net.Listener
	max int

	mu    sync.Mutex
	conns map[net.Conn]*connState
	seq   uint64
}

// connState is what the limiter knows of one connection: whether it is
// serving a request, and the order it became idle in.
type connState struct {
	active bool
	since  uint64 // seq when it last became idle (or was accepted)
}

func newConnLimiter(ln net.Listener, max int) *connLimiter {
	return &connLimiter{Listener: ln, max: max, conns: make(map[net.Conn]*connState)}
}

// Accept accepts the next connection, making room for it first.
func (l *connLimiter) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		l.mu.Lock()
		if len(l.conns) >= l.max && !l.evictLocked() {
			l.mu.Unlock()
			_ = c.Close() // every connection is busy: refuse this one
			continue
		}
		l.seq++
		l.conns[c] = &connState{since: l.seq}
		l.mu.Unlock()
		return c, nil
	}
}

// evictLocked closes the connection idle the longest; false when every
// connection is busy with a request.
func (l *connLimiter) evictLocked() bool {
	var oldest net.Conn
	var at uint64
	for c, s := range l.conns {
		if !s.active && (oldest == nil || s.since < at) {
			oldest, at = c, s.since
		}
	}
	if oldest == nil {
		return false
	}
	delete(l.conns, oldest)
	_ = oldest.Close() // the server sees it closed and lets it go
	return true
}

// track is the server's ConnState hook.
func (l *connLimiter) track(c net.Conn, st http.ConnState) {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.conns[c]
	if s == nil {
		return // evicted
	}
	switch st {
	case http.StateActive:
		s.active = true
	case http.StateIdle:
		l.seq++
		s.active, s.since = false, l.seq
	case http.StateHijacked, http.StateClosed:
		delete(l.conns, c)
	}
}

// open is the number of connections held.
func (l *connLimiter) open() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.conns)
}
