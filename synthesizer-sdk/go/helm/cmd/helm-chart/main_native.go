//go:build !wasip1

package main

// A native build (tests, vet) is a command.
func main() { render() }
