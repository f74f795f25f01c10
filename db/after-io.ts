// Deadlines that read what has arrived before they decide. After a stall of the event loop (a
// long synchronous task, a GC pause, a CPU-starved container), Node runs the timers that came due
// meanwhile before it reads the sockets: a deadline decided in its timer takes an answer that came
// in time, still unread, for none (an outage, a replica down, a consumer cut, a key set missing).
// Used by the pool, the change feed's LISTEN connection and heartbeat, and the key set's fetch.

/**
 * Runs `fn` once the event loop has read the I/O waiting now (setImmediate runs after the loop's
 * poll for I/O). Not unref'd: an unref'd immediate does not keep the poll from blocking, so it
 * would wait for the next unrelated event (seconds on an idle process) before it ran.
 */
export function afterIo (fn: () => void): void {
  setImmediate(fn)
}

/**
 * AbortSignal.timeout(ms), but aborted only once the I/O waiting then has been read (afterIo). Its
 * reason is AbortSignal.timeout's, a TimeoutError, so a caller tells it from other aborts as before.
 */
export function deadline (ms: number): AbortSignal {
  const controller = new AbortController()
  setTimeout(() => afterIo(() => controller.abort(new DOMException('The operation was aborted due to timeout', 'TimeoutError'))), ms).unref()
  return controller.signal
}
