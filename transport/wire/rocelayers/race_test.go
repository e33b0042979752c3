//go:build race

package rocelayers

const raceEnabled = true
