//go:build race

package main

// raceEnabled: the race detector slows the big-message runs tenfold.
const raceEnabled = true
