// What the two fuzz suites share: the seeded run count, the service holding the orders fixture,
// a send that counts what reached it, and the spec's rule for an id, restated independently of
// the service's code. FUZZ_SEED replays a run (test/support/fixtures.ts), FUZZ_RUNS sets its length.
import fc from 'fast-check'
import type { Test } from 'tap'
import { fastCheckSeed, ordersFixture } from '../support/fixtures.js'
import { build, type Harness } from '../support/harness.js'

// Runs per property: 1,000 (7,000 requests a run over the seven properties) fit npm test's time;
// FUZZ_RUNS explores further (FUZZ_RUNS=20000 FUZZ_SEED=random npm test -- test/http/fuzz-*.test.ts).
export const RUNS = Number(process.env.FUZZ_RUNS ?? 1_000)
if (!Number.isSafeInteger(RUNS) || RUNS < 1) throw new Error(`FUZZ_RUNS must be a whole number of runs, at least 1: ${process.env.FUZZ_RUNS}`)

export async function startFuzzing (t: Test) {
  fc.configureGlobal({ seed: fastCheckSeed(t), numRuns: RUNS, endOnFailure: true })
  const harness = await build(t)
  await harness.seed(ordersFixture())
  let requests = 0
  const send: Harness['request'] = (path, options) => {
    requests++
    return harness.request(path, options)
  }
  return { harness, send, sent: () => requests }
}

const codePoints = (value: string) => [...value].length
const storableText = (value: string) => !/[\u0000\uD800-\uDFFF]/u.test(value) // eslint-disable-line no-control-regex
export const validId = (value: unknown) => typeof value === 'string' && codePoints(value) >= 1 && codePoints(value) <= 255 && storableText(value)
