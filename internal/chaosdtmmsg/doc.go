// Package chaosdtmmsg is the chaos run of DTM 2-phase messages (package dtmmsg): publisher processes
// publish guarded messages against a real DTM server, with duplicate keys and failing local
// transactions, and are SIGKILLed at chosen points — inside the local transaction, between the local
// commit and the submit (a proxy in front of DTM holds the submit), or at a random moment. DTM's
// back-check and the dtmmsg.Reconciler resolve what they left; the checker then verifies that every
// committed local transaction was published exactly once, that nothing else was published, that each
// key committed at most once, and that every record ended SUCCEEDED exactly when its message was
// published. cmd/idemchaos runs it ("idemchaos dtm-msg") and the dtmmsg tests run a small version.
package chaosdtmmsg
