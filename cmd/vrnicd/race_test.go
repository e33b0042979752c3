//go:build race

package main

// raceEnabled: the daemon binary the tests run is built with -race too.
const raceEnabled = true
