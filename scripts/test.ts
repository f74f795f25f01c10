// npm test: runs tap against a real PostgreSQL: TEST_DATABASE_URL when given, else a throwaway
// embedded cluster made for this run. Arguments pass through to tap (npm test -- test/x.test.ts).
import { runWithTestDatabase } from './test-database.js'

await runWithTestDatabase('tap', process.argv.slice(2))
