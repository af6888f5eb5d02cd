package pulsar

// OnUndecidedAtStop makes f run when a stopping Subscribe loop starts
// waiting for the Ack or Nack of its message in hand; the returned func
// undoes it.
func OnUndecidedAtStop(f func()) (undo func()) {
	undecidedAtStop = f
	return func() { undecidedAtStop = nil }
}
