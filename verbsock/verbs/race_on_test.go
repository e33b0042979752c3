//go:build race

package verbs_test

// raceEnabled: the race detector slows the daemon side about tenfold; the
// long loops run shrunk under it.
const raceEnabled = true
