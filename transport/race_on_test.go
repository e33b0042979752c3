//go:build race

package transport_test

// raceEnabled: the race detector slows the simulator about tenfold; the long
// fault runs shrink under it (make test also runs them at full size without it).
const raceEnabled = true
