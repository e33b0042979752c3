package main

import (
	"fmt"
	"os"
	"runtime/pprof"
)

// startCPUProfile starts runtime/pprof's CPU profile into path and returns
// the function that stops it and closes the file. run defers it, so a
// daemon stopped by SIGTERM or SIGINT (whose signal loop returns from run)
// leaves a complete profile.
func startCPUProfile(path string) (stop func(), err error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("--cpuprofile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("--cpuprofile: %w", err)
	}
	return func() {
		pprof.StopCPUProfile()
		if err := f.Close(); err != nil {
			fmt.Fprintf(os.Stderr, "vrnicd: --cpuprofile: %v\n", err)
		}
	}, nil
}
