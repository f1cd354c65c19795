package testenv

import "testing"

// Ports are handed out below the ephemeral range, where no outgoing
// connection can take them between the pick and the server's bind.
func TestFreePortIsBelowTheEphemeralRange(t *testing.T) {
	lo, hi, ok := belowEphemeral()
	for range 20 {
		port, err := freePort()
		if err != nil {
			t.Fatal(err)
		}
		if ok && (port < lo || port >= hi) {
			t.Fatalf("port %d outside [%d, %d), below the ephemeral range", port, lo, hi)
		}
		if !bindable(port) {
			t.Fatalf("port %d is not free", port)
		}
	}
	if !ok {
		t.Logf("ip_local_port_range leaves no room below it here: ports came from the kernel")
	}
}
