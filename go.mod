module github.com/vrnic/vrnicd

go 1.26.0

require github.com/google/gopacket v1.1.19

require (
	golang.org/x/net v0.63.0 // indirect
	golang.org/x/sys v0.50.0 // indirect
)
