//go:build !linux || !cgo

package nvml

import (
	"errors"
	"runtime"
)

// newGoNVML stands in for go-nvml where it cannot build: it needs cgo and
// the Linux driver. Open then reports NVML unavailable, saying why.
func newGoNVML(string) Library { return noNVML{} }

type noNVML struct{}

func (noNVML) Init() error {
	if runtime.GOOS != "linux" {
		return errors.New("NVML sampling needs Linux")
	}
	return errors.New("this vramprof was built without cgo (CGO_ENABLED=0), which NVML needs")
}

func (noNVML) Shutdown() error            { return nil }
func (noNVML) DeviceCount() (int, error)  { return 0, nil }
func (noNVML) Device(int) (Device, error) { return nil, errors.New("no NVML") }
