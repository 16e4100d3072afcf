package exporter

import (
	"context"
	"net"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestServe serves on a real loopback listener: /metrics and a profile
// answer with the fed process's figures, the sweep drops the process once
// it has exited and a scrape has reported it, and cancelling the context
// ends Serve with nil and closes the port.
func TestServe(t *testing.T) {
	var running atomic.Bool
	running.Store(true)
	x := New(Options{PerProcess: true, Grace: time.Nanosecond, Alive: func(uint32, uint64) bool { return running.Load() }})
	feed(t, x, 7, 0, 3)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- x.Serve(ctx, ln, time.Millisecond) }()
	url := "http://" + ln.Addr().String()

	v, ok := value(scrape(t, url), MetricLiveBytes, 7)
	require.True(t, ok)
	assert.Equal(t, float64(3*MiB), v, "feed keeps one 1 MiB allocation a round")
	resp, err := http.Get(url + "/debug/pprof/peak?pid=7")
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	assert.Equal(t, http.StatusOK, resp.StatusCode)

	running.Store(false)
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, ok := value(scrape(t, url), MetricLiveBytes, 7); !ok {
			break // swept: exited, reported by a scrape, past the grace
		}
		require.True(t, time.Now().Before(deadline), "the exited process was never swept")
		time.Sleep(5 * time.Millisecond)
	}

	cancel()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("Serve did not return after cancel")
	}
	_, err = net.Dial("tcp", ln.Addr().String())
	assert.Error(t, err, "the port is closed")
}

// TestServeFails: a listener that cannot accept ends Serve with its error
// at once, whatever the context.
func TestServeFails(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	require.NoError(t, ln.Close())
	err = New(Options{}).Serve(t.Context(), ln, time.Hour)
	assert.ErrorIs(t, err, net.ErrClosed)
}
