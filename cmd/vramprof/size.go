package main

import (
	"math/big"

	"github.com/vramprof/vramprof/report/compare"
	"github.com/vramprof/vramprof/report/units"
)

// parseSize parses a size flag: "4096", "512MiB", "1.5GiB", "100MB" (see
// units.ParseSize).
func parseSize(s string) (uint64, error) { return units.ParseSize(s) }

// parsePercent parses a percentage flag exactly: "10", "2.5", "10%" (see
// compare.ParsePercent).
func parsePercent(s string) (*big.Rat, error) { return compare.ParsePercent(s) }
