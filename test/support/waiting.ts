// Waiting for something to happen in a test: never for a fixed time, never without a bound, and a
// failure that names what was awaited.
import { setTimeout as sleep } from 'node:timers/promises'

/** Polls `check` every `intervalMs` until it holds; an error naming `what` once `timeoutMs` have passed. */
export async function until (what: string, check: () => boolean | Promise<boolean>, timeoutMs = 30_000, intervalMs = 50): Promise<void> {
  for (const started = Date.now(); !(await check()); await sleep(intervalMs)) {
    if (Date.now() - started > timeoutMs) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`)
  }
}
