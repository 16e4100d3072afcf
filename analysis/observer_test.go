package analysis

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/vramprof/vramprof/analysis/ledger"
)

// TestMemorySpaceIsLedgerSpace pins the conversion liveKey relies on: a
// MemorySpace is the ledger's Space of the same name.
func TestMemorySpaceIsLedgerSpace(t *testing.T) {
	assert.Equal(t, ledger.Device, ledger.Space(SpaceDevice))
	assert.Equal(t, ledger.Physical, ledger.Space(SpacePhysical))
	assert.Equal(t, ledger.Host, ledger.Space(SpaceHost))
	assert.Equal(t, ledger.DeviceScope, ledgerScope(deviceScope))
	assert.Equal(t, ledger.Scope{Layer: hostScope.layer, Host: true}, ledgerScope(hostScope))
}
