package main

import (
	"bytes"
	"os"
	"testing"
)

// The committed header is what the Go definitions generate: the C
// libraries never build against a stale layout.
func TestHeaderUpToDate(t *testing.T) {
	got, err := os.ReadFile("../../../cabi/include/vrnic_abi.h")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, Generate()) {
		t.Fatal("cabi/include/vrnic_abi.h is stale: run go generate ./verbsock/internal/cabigen")
	}
}
