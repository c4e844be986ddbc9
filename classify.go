package idemkit

// IsPermanent reports whether the Guard classifies err as a permanent failure (recorded REJECTED and
// replayed) rather than a retryable one (FAILED, run again): an error marked with [Permanent], or
// one Options.IsPermanent says is permanent and not marked with [Retryable]. Adapters that settle something outside the record by the same rule (a message
// broker's dead-letter queue, an RPC status) ask the Guard rather than keep a copy of the classifier.
// It is safe for concurrent use.
func (g *Guard) IsPermanent(err error) bool {
	return err != nil && (IsPermanent(err) || !IsRetryable(err) && g.opts.IsPermanent(err))
}
