// Package notify builds and delivers the notifications of a workspace's
// notify blocks for pipeline events: a run that failed (run_failed), a run
// not succeeded by its pipeline's deadline (deadline_missed).
//
// It owns the payload (Payload: the JSON a webhook receives and a command
// reads on stdin, with its idempotency key), which blocks get an event
// (Queue), and the delivery of the state's outbox (Deliverer): claim the
// due notifications, send each to its block's command and webhook, record
// it delivered, or retried with backoff, or given up after MaxAge.
//
// It never decides that an event happened: the scheduler queues a
// notification in the transaction of the transition that causes it, and
// any rewind that runs next delivers it. Delivery never blocks an
// execution: it runs beside it, and a notification that cannot be sent
// stays in the state for the next rewind.
package notify
