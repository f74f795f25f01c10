// npm run mutation: Stryker over every module with behaviour (stryker.config.json), against a real
// PostgreSQL like the tests. Reports: reports/mutation/mutation.{json,html}.
import { runWithTestDatabase } from './test-database.js'

// A mutant is killed or survives on its own merits, not on the seed the property tests drew.
process.env.FUZZ_SEED ??= 'pinned'

await runWithTestDatabase('stryker', ['run', ...process.argv.slice(2)])
