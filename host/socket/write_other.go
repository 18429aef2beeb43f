//go:build !unix

package socket

// tryWrite is not available here: every frame goes through the writer
// goroutine.
func (c *Conn) tryWrite(p []byte) (int, error) { return 0, errNoInline }
