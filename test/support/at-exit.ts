// What a test file starts ends with it, even when its teardown never runs. Stryker stops a test
// file at its first failure with SIGTERM, on which its hook calls process.exit() at once: no
// teardown runs, and every killed mutant used to leave its PgBouncer, PostgreSQL or server process
// running and its databases behind (a full mutation run left about fifty PgBouncers). An 'exit'
// listener can only do synchronous work, so each clean-up here is.
import { type ChildProcess } from 'node:child_process'

const pending = new Set<() => void>()
process.once('exit', () => {
  // Last started, first ended: a PgBouncer goes before the database it connects to is dropped.
  for (const end of [...pending].reverse()) {
    try {
      end()
    } catch {
      // The process is going anyway: one clean-up failing must not skip the others.
    }
  }
})

/** Runs `end` (synchronous) when the process exits, unless the returned function is called first. */
export function atExit (end: () => void): () => void {
  pending.add(end)
  return () => { pending.delete(end) }
}

/** `child`, SIGKILLed when this process exits while it still runs. */
export function endsWithTest<T extends ChildProcess> (child: T): T {
  const cancel = atExit(() => { child.kill('SIGKILL') })
  child.once('exit', cancel)
  return child
}
