// Package archtest holds no code: its test checks the import rules that the
// README's Layout and Architecture sections state, against `go list`, the
// way river's depguard configuration does, so that the picture and the code
// cannot drift apart.
package archtest
