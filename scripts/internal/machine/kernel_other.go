//go:build !linux

package machine

// kernelCosts is measured on Linux only (kernel_linux.go).
func kernelCosts() kernelCost { return kernelCost{} }
