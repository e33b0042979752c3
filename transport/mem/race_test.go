//go:build race

package mem

// raceEnabled trims the slowest randomized tests under the race detector,
// which makes their single-goroutine work roughly ten times slower.
const raceEnabled = true
