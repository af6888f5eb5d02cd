package kafkaqueue

// Kill closes the adapter's client as a crash would: no share session is
// closed and the group is not left; the broker sees the connections drop.
func Kill(a *Adapter) { a.c.cl.Close() }
